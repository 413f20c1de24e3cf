// Process: a thin ObjectWrap over src/opensandbox/process.h. processStart(...) returns a handle with two promises
// (`started` -> pid, `exited` -> exit info) and write()/kill(). Output batches arrive on the JS thread as Buffers
// (stdout, stderr) through the addon's threadsafe function, in order, before `exited` settles.
#include "addon.h"

#include <string>
extern "C" {
#include "core/ws.h"
#include "opensandbox/process.h"
}

namespace {

osb_ws* Ws(Napi::Env env, Addon* a) {
  if (a->ws) return a->ws;
  if (a->closing) ThrowType(env, "the native engine is shutting down");
  char err[256] = "";
  a->ws = osb_ws_start(err, sizeof err);
  if (!a->ws) throw Napi::Error::New(env, std::string("cannot start the WebSocket thread: ") + err);
  return a->ws;
}

// JS-thread state of one process.
struct ProcJs {
  Addon* a;
  osb_proc* p = nullptr;  // own reference: output deliveries report consumption (flow control)
  Napi::Promise::Deferred started, exited;
  Napi::FunctionReference onOutput;
  ProcJs(Napi::Env env, Addon* addon)
      : a(addon), started(Napi::Promise::Deferred::New(env)), exited(Napi::Promise::Deferred::New(env)) {}
};

void Release(ProcJs* pj, bool orphan) {
  if (orphan) pj->onOutput.SuppressDestruct();
  if (pj->p) osb_proc_release(pj->p);
  delete pj;
}

struct StartedDelivery : Delivery {
  ProcJs* pj;
  bool failed = false;
  osb_error err{};
  std::string pid;
  void Run(Napi::Env env, Addon* a) override {
    if (failed) {
      pj->started.Reject(MakeError(env, &err).Value());
      pj->exited.Resolve(env.Null());  // never started: nothing to wait for
      Release(pj, false);
      a->Settled(env);
    } else {
      pj->started.Resolve(Napi::String::New(env, pid));
    }
  }
  void Orphan() override {
    if (failed) Release(pj, true);
  }
};

struct OutputDelivery : Delivery {
  ProcJs* pj;
  std::string out, err;
  void Run(Napi::Env env, Addon*) override {
    if (pj->onOutput.IsEmpty()) {
      if (pj->p) osb_proc_consumed(pj->p, out.size() + err.size());
      return;
    }
    Napi::Value o = out.empty() ? env.Undefined() : Napi::Buffer<char>::Copy(env, out.data(), out.size()).As<Napi::Value>();
    Napi::Value e = err.empty() ? env.Undefined() : Napi::Buffer<char>::Copy(env, err.data(), err.size()).As<Napi::Value>();
    if (pj->p) osb_proc_consumed(pj->p, out.size() + err.size());  // copied out: JS owns it now
    pj->onOutput.Call({o, e});
  }
};

struct ExitDelivery : Delivery {
  ProcJs* pj;
  int exitCode = 0, killed = 0, timedOut = 0, hasError = 0;
  std::string errorText, errorCode, out, err;
  double outDropped = 0, errDropped = 0;
  void Run(Napi::Env env, Addon* a) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("exitCode", Napi::Number::New(env, exitCode));
    o.Set("killed", Napi::Boolean::New(env, killed));
    o.Set("timedOut", Napi::Boolean::New(env, timedOut));
    o.Set("errorText", hasError ? Napi::String::New(env, errorText).As<Napi::Value>() : env.Null());
    o.Set("errorCode", hasError ? Napi::String::New(env, errorCode).As<Napi::Value>() : env.Null());
    o.Set("stdout", Napi::Buffer<char>::Copy(env, out.data(), out.size()));
    o.Set("stderr", Napi::Buffer<char>::Copy(env, err.data(), err.size()));
    o.Set("stdoutDroppedBytes", Napi::Number::New(env, outDropped));
    o.Set("stderrDroppedBytes", Napi::Number::New(env, errDropped));
    pj->exited.Resolve(o);
    Release(pj, false);
    a->Settled(env);
  }
  void Orphan() override { Release(pj, true); }
};

struct OpDelivery : PromiseDelivery {  // write (undefined) / kill (boolean)
  bool boolean = false;
  int flag = 0;
  using PromiseDelivery::PromiseDelivery;
  Napi::Value Value(Napi::Env env) override {
    return boolean ? Napi::Boolean::New(env, flag != 0).As<Napi::Value>() : env.Undefined();
  }
};

// ---- engine-thread callbacks ----

void OnStarted(void* ud, const osb_error* err, const char* pid) {
  ProcJs* pj = static_cast<ProcJs*>(ud);
  StartedDelivery* d = new StartedDelivery();
  d->pj = pj;
  if (err) {
    d->failed = true;
    d->err = *err;
  } else {
    d->pid = pid;
  }
  pj->a->Deliver(d);
}

void OnOutput(void* ud, const char* out, size_t out_len, const char* err, size_t err_len) {
  ProcJs* pj = static_cast<ProcJs*>(ud);
  OutputDelivery* d = new OutputDelivery();
  d->pj = pj;
  d->out.assign(out, out_len);
  d->err.assign(err, err_len);
  pj->a->Deliver(d);
}

void OnExit(void* ud, const osb_proc_exit* x) {
  ProcJs* pj = static_cast<ProcJs*>(ud);
  ExitDelivery* d = new ExitDelivery();
  d->pj = pj;
  d->exitCode = x->exit_code;
  d->killed = x->killed;
  d->timedOut = x->timed_out;
  if (x->error_text) {
    d->hasError = 1;
    d->errorText = x->error_text;
    d->errorCode = x->error_code ? x->error_code : "PROCESS_FAILED";
  }
  d->out.assign(x->out, x->out_len);
  d->err.assign(x->err, x->err_len);
  d->outDropped = (double)x->out_dropped;
  d->errDropped = (double)x->err_dropped;
  pj->a->Deliver(d);
}

void OnOp(void* ud, const osb_error* err, int flag) {
  OpDelivery* d = static_cast<OpDelivery*>(ud);
  d->Fail(err);
  d->flag = flag;
  d->a->Deliver(d);
}

class ProcessWrap : public Napi::ObjectWrap<ProcessWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Process",
                       {InstanceMethod<&ProcessWrap::Write>("write"), InstanceMethod<&ProcessWrap::Kill>("kill"),
                        InstanceMethod<&ProcessWrap::CloseStdin>("closeStdin")});
  }
  explicit ProcessWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ProcessWrap>(info) {}
  ~ProcessWrap() override { osb_proc_release(p_); }
  void Attach(osb_proc* p) { p_ = p; }

 private:
  osb_proc* p_ = nullptr;

  enum OpKind { kWrite, kKill, kCloseStdin };
  Napi::Value Op(const Napi::CallbackInfo& info, OpKind kind) {
    Napi::Env env = info.Env();
    Addon* a = GetAddon(env);
    if (!p_) ThrowType(env, "not a process handle");
    std::string data;
    if (kind == kWrite) {
      if (info.Length() > 0 && info[0].IsBuffer()) {
        auto b = info[0].As<Napi::Buffer<char>>();
        data.assign(b.Data(), b.Length());
      } else if (info.Length() > 0 && info[0].IsString()) {
        data = info[0].As<Napi::String>().Utf8Value();
      } else {
        ThrowType(env, "stdin data must be a string or a Buffer");
      }
    }
    OpDelivery* d = new OpDelivery(env, a);
    d->boolean = kind == kKill;
    Napi::Promise pr = d->deferred.Promise();
    int rc = !a->engine           ? -1
             : kind == kKill       ? osb_proc_kill(p_, OnOp, d)
             : kind == kCloseStdin ? osb_proc_close_stdin(p_, OnOp, d)
                                   : osb_proc_write(p_, data.data(), data.size(), OnOp, d);
    if (rc != 0) {
      delete d;
      ThrowType(env, "the native engine is shutting down");
    }
    a->Hold(env);
    return pr;
  }
  Napi::Value Write(const Napi::CallbackInfo& info) { return Op(info, kWrite); }
  Napi::Value Kill(const Napi::CallbackInfo& info) { return Op(info, kKill); }
  Napi::Value CloseStdin(const Napi::CallbackInfo& info) { return Op(info, kCloseStdin); }
};

// processStart(baseUrl, headerKv[], requestTimeoutMs, maxRetainedBytes, command|null, cwd|null, envKv[],
//              stdinIgnore, timeoutMs, ackWaitS, attachPid|null, attachSince, onOutput, caFile|null) -> Process
Napi::Value ProcessStart(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Addon* a = GetAddon(env);
  std::string base = ArgString(info, 0, "baseUrl");
  std::vector<std::string> hkv = ArgPairs(info, 1, "headers");
  long reqTimeout = ArgLong(info, 2, 30000, "requestTimeoutMs");
  long maxRetained = ArgLong(info, 3, 1048576, "maxRetainedBytes");
  bool hasCmd = !ArgIsNullish(info, 4);
  std::string command = hasCmd ? ArgString(info, 4, "command") : "";
  bool hasCwd = !ArgIsNullish(info, 5);
  std::string cwd = hasCwd ? ArgString(info, 5, "cwd") : "";
  std::vector<std::string> ekv = ArgPairs(info, 6, "env");
  bool stdinIgnore = info.Length() > 7 && info[7].ToBoolean().Value();
  long timeout = ArgLong(info, 8, 0, "timeoutMs");
  long ackWait = ArgLong(info, 9, 0, "ackWaitS");
  bool hasPid = !ArgIsNullish(info, 10);
  std::string pid = hasPid ? ArgString(info, 10, "pid") : "";
  long since = ArgLong(info, 11, 0, "since");
  if (!ArgIsNullish(info, 12) && !info[12].IsFunction()) ThrowType(env, "onOutput must be a function");
  bool hasCa = !ArgIsNullish(info, 13);
  std::string ca = hasCa ? ArgString(info, 13, "caFile") : "";
  if (!hasCmd && !hasPid) ThrowType(env, "a command or a pid is required");

  osb_engine* e = a->Engine(env);
  osb_ws* ws = Ws(env, a);
  auto hv = CStrs(hkv);
  auto ev = CStrs(ekv);
  osb_proc_opts o{};
  o.base_url = base.c_str();
  o.header_kv = hv.data();
  o.nheaders = hkv.size() / 2;
  o.request_timeout_ms = reqTimeout;
  o.max_retained = maxRetained;
  o.ca_file = hasCa ? ca.c_str() : nullptr;
  o.command = hasCmd ? command.c_str() : nullptr;
  o.cwd = hasCwd ? cwd.c_str() : nullptr;
  o.env_kv = ev.data();
  o.nenv = ekv.size() / 2;
  o.stdin_ignore = stdinIgnore;
  o.timeout_ms = timeout;
  o.ack_wait_s = ackWait;
  o.attach_pid = hasPid ? pid.c_str() : nullptr;
  o.attach_since = since > 0 ? (uint64_t)since : 0;
  osb_proc_callbacks cb{OnStarted, OnOutput, OnExit};

  ProcJs* pj = new ProcJs(env, a);
  if (!ArgIsNullish(info, 12)) pj->onOutput = Napi::Persistent(info[12].As<Napi::Function>());
  Napi::Object handle = a->processCtor.New({});
  ProcessWrap* w = ProcessWrap::Unwrap(handle);
  char err[256] = "";
  osb_proc* p = osb_proc_start(e, ws, &o, &cb, pj, err, sizeof err);
  if (!p) {
    delete pj;
    ThrowType(env, err);
  }
  w->Attach(p);
  osb_proc_retain(p);
  pj->p = p;
  handle.Set("started", pj->started.Promise());
  handle.Set("exited", pj->exited.Promise());
  a->Hold(env);
  return handle;
}

}  // namespace

void InitProcess(Napi::Env env, Napi::Object exports) {
  Addon* a = GetAddon(env);
  Napi::Function ctor = ProcessWrap::Define(env);
  a->processCtor = Napi::Persistent(ctor);
  exports.Set("Process", ctor);
  exports.Set("processStart", Napi::Function::New(env, ProcessStart, "processStart"));
}
