// Execd and Command: thin ObjectWraps over src/opensandbox/execd.h. Output batches and the result are carried
// from the engine thread to the JS thread by the addon's threadsafe function, in order.
#include "addon.h"

#include <string>
extern "C" {
#include "opensandbox/execd.h"
}

namespace {

// JS-thread state of one command: its result promise and the optional output callback.
// Holds a reference on the C command so batches can be acknowledged (flow control) until the result.
struct CmdJs {
  Napi::Promise::Deferred deferred;
  Napi::FunctionReference onBatch;
  Addon* a;
  osb_exec_cmd* cmd = nullptr;
  CmdJs(Napi::Env env, Addon* addon) : deferred(Napi::Promise::Deferred::New(env)), a(addon) {}
  ~CmdJs() { osb_exec_cmd_release(cmd); }
};

struct BatchDelivery : Delivery {
  CmdJs* cj;
  std::string out, err;
  void Run(Napi::Env env, Addon* a) override {
    struct Ack {  // report the batch as consumed even when the callback throws
      Addon* a;
      CmdJs* cj;
      size_t n;
      ~Ack() { osb_exec_output_consumed(a->engine, cj->cmd, n); }
    } ack{a, cj, out.size() + err.size()};
    if (cj->onBatch.IsEmpty()) return;
    cj->onBatch.Call({OutputBatch(env, out, err)});  // a throwing callback surfaces as an uncaught exception, like an event listener
  }
};

struct ResultDelivery : Delivery {
  CmdJs* cj;
  bool failed = false;
  osb_error err{};
  int exitCode = 0, timedOut = 0, cancelled = 0, hasErrorText = 0;
  std::string out, errOut, commandId, errorText;
  double outDropped = 0, errDropped = 0, executionTimeMs = 0;
  void Run(Napi::Env env, Addon* a) override {
    if (failed) {
      cj->deferred.Reject(MakeError(env, &err).Value());
    } else {
      Napi::Object o = Napi::Object::New(env);
      o.Set("exitCode", Napi::Number::New(env, exitCode));
      o.Set("stdout", Napi::String::New(env, out.data(), out.size()));
      o.Set("stderr", Napi::String::New(env, errOut.data(), errOut.size()));
      o.Set("stdoutDroppedBytes", Napi::Number::New(env, outDropped));
      o.Set("stderrDroppedBytes", Napi::Number::New(env, errDropped));
      o.Set("executionTimeMs", Napi::Number::New(env, executionTimeMs));
      o.Set("commandId", Napi::String::New(env, commandId));
      o.Set("timedOut", Napi::Boolean::New(env, timedOut));
      o.Set("cancelled", Napi::Boolean::New(env, cancelled));
      if (hasErrorText) o.Set("errorText", Napi::String::New(env, errorText));
      else o.Set("errorText", env.Null());
      cj->deferred.Resolve(o);
    }
    delete cj;
    cj = nullptr;
    a->Settled(env);
  }
  void Orphan() override {
    // The env is gone: the FunctionReference must not be released through Node-API.
    if (cj) cj->onBatch.SuppressDestruct();
    delete cj;
    cj = nullptr;
  }
};

// ---- engine-thread callbacks ----

void OnOutput(void* ud, const char* out, size_t out_len, const char* err, size_t err_len) {
  CmdJs* cj = static_cast<CmdJs*>(ud);
  BatchDelivery* d = new BatchDelivery();
  d->cj = cj;
  d->out.assign(out, out_len);
  d->err.assign(err, err_len);
  cj->a->Deliver(d);
}

void OnResult(void* ud, const osb_error* err, const osb_exec_result* r) {
  CmdJs* cj = static_cast<CmdJs*>(ud);
  ResultDelivery* d = new ResultDelivery();
  d->cj = cj;
  if (err) {
    d->failed = true;
    d->err = *err;
  } else {
    d->exitCode = r->exit_code;
    d->out.assign(r->out, r->out_len);
    d->errOut.assign(r->err, r->err_len);
    d->outDropped = (double)r->out_dropped;
    d->errDropped = (double)r->err_dropped;
    d->executionTimeMs = r->execution_time_ms;
    d->commandId = r->command_id;
    d->timedOut = r->timed_out;
    d->cancelled = r->cancelled;
    if (r->error_text) {
      d->hasErrorText = 1;
      d->errorText = r->error_text;
    }
  }
  cj->a->Deliver(d);
}

// ---- Command ----

class CommandWrap : public Napi::ObjectWrap<CommandWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Command", {InstanceMethod<&CommandWrap::Cancel>("cancel")});
  }
  explicit CommandWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CommandWrap>(info) {}
  ~CommandWrap() override { osb_exec_cmd_release(cmd_); }
  void Attach(osb_exec_cmd* c) { cmd_ = c; }

 private:
  osb_exec_cmd* cmd_ = nullptr;

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Addon* a = GetAddon(env);
    if (!cmd_) ThrowType(env, "not a command handle");
    PromiseDelivery* d = new PromiseDelivery(env, a);
    Napi::Promise p = d->deferred.Promise();
    if (!a->engine || osb_exec_cancel(a->engine, cmd_, DeliverDone, d) != 0) {
      delete d;
      ThrowType(env, "the native engine is shutting down");
    }
    a->Hold(env);
    return p;
  }
};

// ---- Execd ----

class ExecdWrap : public Napi::ObjectWrap<ExecdWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Execd",
                       {InstanceMethod<&ExecdWrap::WaitReady>("waitReady"), InstanceMethod<&ExecdWrap::Run>("run")});
  }

  // new Execd(baseUrl, headerKv: string[], requestTimeoutMs, idleTimeoutMs, caFile|null)
  explicit ExecdWrap(const Napi::CallbackInfo& info)
      : Napi::ObjectWrap<ExecdWrap>(info), x_(NewExecdClient(info)) {}
  ~ExecdWrap() override { osb_conn_free(x_); }

 private:
  osb_exec* x_;

  Napi::Value WaitReady(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Addon* a = GetAddon(env);
    long timeout = ArgLong(info, 0, 30000, "timeoutMs");
    osb_engine* e = a->Engine(env);
    PromiseDelivery* d = new PromiseDelivery(env, a);
    Napi::Promise p = d->deferred.Promise();
    char err[256] = "";
    if (osb_exec_wait_ready(e, x_, timeout, DeliverDone, d, err, sizeof err) != 0) {
      delete d;
      ThrowType(env, err);
    }
    a->Hold(env);
    return p;
  }

  // run(command, cwd|null, envKv: string[], timeoutMs, maxRetainedBytes, onBatch|undefined, highWaterBytes)
  //   -> Command
  Napi::Value Run(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Addon* a = GetAddon(env);
    std::string command = ArgString(info, 0, "command");
    bool hasCwd = !ArgIsNullish(info, 1);
    std::string cwd = hasCwd ? ArgString(info, 1, "cwd") : "";
    std::vector<std::string> envKv = ArgPairs(info, 2, "envs");
    long timeout = ArgLong(info, 3, 0, "timeoutMs");
    long maxRetained = ArgLong(info, 4, 1048576, "maxRetainedBytes");
    if (!ArgIsNullish(info, 5) && !info[5].IsFunction()) ThrowType(env, "onOutput must be a function");
    long highWater = ArgLong(info, 6, 0, "outputHighWaterBytes");
    if (highWater < 0) ThrowType(env, "outputHighWaterBytes must be >= 0");
    osb_engine* e = a->Engine(env);

    auto ev = CStrs(envKv);
    osb_exec_run_opts o{};
    o.command = command.c_str();
    o.cwd = hasCwd ? cwd.c_str() : nullptr;
    o.env_kv = ev.data();
    o.nenv = envKv.size() / 2;
    o.timeout_ms = timeout;
    o.max_retained = maxRetained;
    o.output_high_water = (size_t)highWater;
    osb_exec_callbacks cb{OnOutput, OnResult};

    CmdJs* cj = new CmdJs(env, a);
    if (!ArgIsNullish(info, 5)) cj->onBatch = Napi::Persistent(info[5].As<Napi::Function>());
    Napi::Object handle = a->commandCtor.New({});
    CommandWrap* w = CommandWrap::Unwrap(handle);
    char err[256] = "";
    osb_exec_cmd* c = osb_exec_run(e, x_, &o, &cb, cj, err, sizeof err);
    if (!c) {
      delete cj;
      ThrowType(env, err);
    }
    w->Attach(c);
    osb_exec_cmd_retain(c);  // CmdJs's reference, for acknowledging batches
    cj->cmd = c;
    handle.Set("result", cj->deferred.Promise());
    a->Hold(env);
    return handle;
  }
};

}  // namespace

void InitExecd(Napi::Env env, Napi::Object exports) {
  Addon* a = GetAddon(env);
  Napi::Function cmd = CommandWrap::Define(env);
  a->commandCtor = Napi::Persistent(cmd);
  exports.Set("Command", cmd);
  exports.Set("Execd", ExecdWrap::Define(env));
}
