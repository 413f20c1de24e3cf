// CodeInterpreter: thin ObjectWrap over src/opensandbox/code.h. Plain calls resolve the response JSON text; a
// cell's output batches and its result are carried to the JS thread by the addon's threadsafe function, in order.
// A run handle is a Napi::External whose finalizer releases the C reference.
#include "addon.h"

#include <string>
#include <vector>
extern "C" {
#include "opensandbox/code.h"
}

namespace {

// Plain calls: resolve the JSON text ("" for empty bodies) or reject with the contract's Error.
struct JsonDelivery : PromiseDelivery {
  std::string json;
  using PromiseDelivery::PromiseDelivery;
  Napi::Value Value(Napi::Env env) override { return Napi::String::New(env, json); }
};

void OnJson(void* ud, const osb_error* err, char* json) {
  JsonDelivery* d = static_cast<JsonDelivery*>(ud);
  d->Fail(err);
  if (!err && json) d->json = json;
  free(json);
  d->a->Deliver(d);
}

// JS-thread state of one cell: its result promise and the optional output callback.
struct RunJs {
  Napi::Promise::Deferred deferred;
  Napi::FunctionReference onBatch;
  Addon* a;
  RunJs(Napi::Env env, Addon* addon) : deferred(Napi::Promise::Deferred::New(env)), a(addon) {}
};

struct BatchDelivery : Delivery {
  RunJs* rj;
  std::string out, err;
  void Run(Napi::Env env, Addon*) override {
    if (rj->onBatch.IsEmpty()) return;
    rj->onBatch.Call({OutputBatch(env, out, err)});  // a throwing callback surfaces as an uncaught exception, like an event listener
  }
};

struct ResultDelivery : Delivery {
  RunJs* rj;
  bool failed = false;
  osb_error err{};
  std::string contextId, out, errOut, resultsJson, ename, evalue, status;
  std::vector<std::string> traceback;
  long executionCount = -1;
  double executionTimeMs = 0, outDropped = 0, errDropped = 0, resultsCount = 0, resultsDropped = 0;
  bool completed = false, hasStatus = false, hasError = false, timedOut = false, interrupted = false, streamCut = false;

  void Run(Napi::Env env, Addon* a) override {
    if (failed) {
      rj->deferred.Reject(MakeError(env, &err).Value());
    } else {
      Napi::Object o = Napi::Object::New(env);
      o.Set("contextId", Napi::String::New(env, contextId));
      o.Set("executionCount", executionCount >= 0 ? Napi::Number::New(env, (double)executionCount) : env.Null());
      o.Set("executionTimeMs", Napi::Number::New(env, executionTimeMs));
      o.Set("completed", Napi::Boolean::New(env, completed));
      o.Set("status", hasStatus ? Napi::String::New(env, status) : env.Null());
      o.Set("stdout", Napi::String::New(env, out.data(), out.size()));
      o.Set("stderr", Napi::String::New(env, errOut.data(), errOut.size()));
      o.Set("stdoutDroppedBytes", Napi::Number::New(env, outDropped));
      o.Set("stderrDroppedBytes", Napi::Number::New(env, errDropped));
      o.Set("resultsJson", Napi::String::New(env, resultsJson));
      o.Set("resultsCount", Napi::Number::New(env, resultsCount));
      o.Set("resultsDropped", Napi::Number::New(env, resultsDropped));
      if (hasError) {
        Napi::Object e = Napi::Object::New(env);
        e.Set("ename", Napi::String::New(env, ename));
        e.Set("evalue", Napi::String::New(env, evalue));
        Napi::Array tb = Napi::Array::New(env, traceback.size());
        for (size_t i = 0; i < traceback.size(); i++) tb.Set((uint32_t)i, Napi::String::New(env, traceback[i]));
        e.Set("traceback", tb);
        o.Set("error", e);
      } else {
        o.Set("error", env.Null());
      }
      o.Set("timedOut", Napi::Boolean::New(env, timedOut));
      o.Set("interrupted", Napi::Boolean::New(env, interrupted));
      o.Set("streamCut", Napi::Boolean::New(env, streamCut));
      rj->deferred.Resolve(o);
    }
    delete rj;
    rj = nullptr;
    a->Settled(env);
  }
  void Orphan() override {
    if (rj) rj->onBatch.SuppressDestruct();  // the env is gone: no Node-API calls
    delete rj;
    rj = nullptr;
  }
};

// ---- engine-thread callbacks ----

void OnOutput(void* ud, const char* out, size_t out_len, const char* err, size_t err_len) {
  RunJs* rj = static_cast<RunJs*>(ud);
  BatchDelivery* d = new BatchDelivery();
  d->rj = rj;
  d->out.assign(out, out_len);
  d->err.assign(err, err_len);
  rj->a->Deliver(d);
}

void OnResult(void* ud, const osb_error* err, const osb_code_result* r) {
  RunJs* rj = static_cast<RunJs*>(ud);
  ResultDelivery* d = new ResultDelivery();
  d->rj = rj;
  if (err) {
    d->failed = true;
    d->err = *err;
  } else {
    d->contextId = r->context_id;
    d->executionCount = r->execution_count;
    d->executionTimeMs = r->execution_time_ms;
    d->completed = r->completed;
    if (r->status) {
      d->hasStatus = true;
      d->status = r->status;
    }
    d->out.assign(r->out, r->out_len);
    d->errOut.assign(r->err, r->err_len);
    d->outDropped = (double)r->out_dropped;
    d->errDropped = (double)r->err_dropped;
    d->resultsJson = r->results_json;
    d->resultsCount = (double)r->results_count;
    d->resultsDropped = (double)r->results_dropped;
    d->hasError = r->has_error;
    d->ename = r->ename;
    d->evalue = r->evalue;
    for (size_t i = 0; i < r->ntraceback; i++) d->traceback.emplace_back(r->traceback[i]);
    d->timedOut = r->timed_out;
    d->interrupted = r->interrupted;
    d->streamCut = r->stream_cut;
  }
  rj->a->Deliver(d);
}

void ReleaseRun(Napi::Env, osb_code_run* r) { osb_code_run_release(r); }

// ---- CodeInterpreter ----

class CodeInterpreterWrap : public Napi::ObjectWrap<CodeInterpreterWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "CodeInterpreter",
                       {InstanceMethod<&CodeInterpreterWrap::CreateContext>("createContext"),
                        InstanceMethod<&CodeInterpreterWrap::ListContexts>("listContexts"),
                        InstanceMethod<&CodeInterpreterWrap::GetContext>("getContext"),
                        InstanceMethod<&CodeInterpreterWrap::DeleteContext>("deleteContext"),
                        InstanceMethod<&CodeInterpreterWrap::DeleteContexts>("deleteContexts"),
                        InstanceMethod<&CodeInterpreterWrap::Interrupt>("interrupt"),
                        InstanceMethod<&CodeInterpreterWrap::Run>("run"),
                        InstanceMethod<&CodeInterpreterWrap::InterruptRun>("interruptRun")});
  }

  // new CodeInterpreter(baseUrl, headerKv: string[], requestTimeoutMs, idleTimeoutMs, caFile|null)
  explicit CodeInterpreterWrap(const Napi::CallbackInfo& info)
      : Napi::ObjectWrap<CodeInterpreterWrap>(info),
        x_(NewExecdClient(info)) {}
  ~CodeInterpreterWrap() override { osb_conn_free(x_); }

 private:
  osb_code* x_;

  // Runs one plain call: start(engine, done, ud, errbuf) -> 0 / -1.
  template <typename Start>
  Napi::Value Plain(Napi::Env env, Start start) {
    Addon* a = GetAddon(env);
    osb_engine* e = a->Engine(env);
    JsonDelivery* d = new JsonDelivery(env, a);
    Napi::Promise p = d->deferred.Promise();
    char err[256] = "";
    if (start(e, d, err) != 0) {
      delete d;
      ThrowType(env, err);
    }
    a->Hold(env);
    return p;
  }

  std::string OptString(const Napi::CallbackInfo& info, size_t i, const char* what) {
    return ArgIsNullish(info, i) ? std::string() : ArgString(info, i, what);
  }

  // createContext(language, cwd|null, timeoutMs|null)
  Napi::Value CreateContext(const Napi::CallbackInfo& info) {
    std::string lang = ArgString(info, 0, "language");
    std::string cwd = OptString(info, 1, "cwd");
    long timeout = ArgLong(info, 2, 0, "timeoutMs");
    return Plain(info.Env(), [&](osb_engine* e, JsonDelivery* d, char* err) {
      return osb_code_create_context(e, x_, lang.c_str(), cwd.c_str(), timeout, OnJson, d, err, 256);
    });
  }
  // listContexts(language|null)
  Napi::Value ListContexts(const Napi::CallbackInfo& info) {
    std::string lang = OptString(info, 0, "language");
    return Plain(info.Env(), [&](osb_engine* e, JsonDelivery* d, char* err) {
      return osb_code_list_contexts(e, x_, lang.c_str(), OnJson, d, err, 256);
    });
  }
  Napi::Value GetContext(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "context id");
    return Plain(info.Env(), [&](osb_engine* e, JsonDelivery* d, char* err) {
      return osb_code_get_context(e, x_, id.c_str(), OnJson, d, err, 256);
    });
  }
  Napi::Value DeleteContext(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "context id");
    return Plain(info.Env(), [&](osb_engine* e, JsonDelivery* d, char* err) {
      return osb_code_delete_context(e, x_, id.c_str(), OnJson, d, err, 256);
    });
  }
  Napi::Value DeleteContexts(const Napi::CallbackInfo& info) {
    std::string lang = ArgString(info, 0, "language");
    return Plain(info.Env(), [&](osb_engine* e, JsonDelivery* d, char* err) {
      return osb_code_delete_contexts(e, x_, lang.c_str(), OnJson, d, err, 256);
    });
  }
  Napi::Value Interrupt(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "context id");
    return Plain(info.Env(), [&](osb_engine* e, JsonDelivery* d, char* err) {
      return osb_code_interrupt(e, x_, id.c_str(), OnJson, d, err, 256);
    });
  }

  // run(code, language, contextId|null, timeoutMs, maxOutputBytes, maxResultBytes, onBatch|undefined, maxEventBytes?)
  //   -> { result: Promise, handle: External }
  Napi::Value Run(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Addon* a = GetAddon(env);
    std::string code = ArgString(info, 0, "code");
    std::string lang = ArgString(info, 1, "language");
    std::string ctx = OptString(info, 2, "contextId");
    long timeout = ArgLong(info, 3, 0, "timeoutMs");
    long maxOut = ArgLong(info, 4, 1048576, "maxOutputBytes");
    long maxRes = ArgLong(info, 5, 8388608, "maxResultBytes");
    long maxEvent = ArgLong(info, 7, 0, "maxEventBytes");
    if (!ArgIsNullish(info, 6) && !info[6].IsFunction()) ThrowType(env, "onOutput must be a function");
    osb_engine* e = a->Engine(env);

    osb_code_run_opts o{};
    o.code = code.c_str();
    o.language = lang.c_str();
    o.context_id = ctx.empty() ? nullptr : ctx.c_str();
    o.timeout_ms = timeout;
    o.max_output = maxOut;
    o.max_results = maxRes;
    o.max_event_bytes = maxEvent;
    osb_code_callbacks cb{OnOutput, OnResult};

    RunJs* rj = new RunJs(env, a);
    if (!ArgIsNullish(info, 6)) rj->onBatch = Napi::Persistent(info[6].As<Napi::Function>());
    Napi::Object out = Napi::Object::New(env);
    out.Set("result", rj->deferred.Promise());
    char err[256] = "";
    osb_code_run* r = osb_code_run_start(e, x_, &o, &cb, rj, err, sizeof err);
    if (!r) {
      delete rj;
      ThrowType(env, err);
    }
    a->Hold(env);
    out.Set("handle", Napi::External<osb_code_run>::New(env, r, ReleaseRun));
    return out;
  }

  // interruptRun(handle) -> Promise<void>
  Napi::Value InterruptRun(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    Addon* a = GetAddon(env);
    if (info.Length() < 1 || !info[0].IsExternal()) ThrowType(env, "not a run handle");
    osb_code_run* r = info[0].As<Napi::External<osb_code_run>>().Data();
    PromiseDelivery* d = new PromiseDelivery(env, a);
    Napi::Promise p = d->deferred.Promise();
    if (!a->engine || osb_code_run_interrupt(a->engine, r, DeliverDone, d) != 0) {
      delete d;
      ThrowType(env, "the native engine is shutting down");
    }
    a->Hold(env);
    return p;
  }
};

}  // namespace

void InitCodeInterpreter(Napi::Env env, Napi::Object exports) {
  exports.Set("CodeInterpreter", CodeInterpreterWrap::Define(env));
}
