// Entry point of the thin binding: per-instance state (engine started lazily, stopped in an env cleanup
// hook), the threadsafe function that carries engine results to the JS thread, errors, stats().
#include "addon.h"

#include <curl/curl.h>
#include <memory>
extern "C" {
#include "core/ws.h"
#include "opensandbox/process.h"
}

osb_engine* Addon::Engine(Napi::Env env) {
  if (engine) return engine;
  if (closing) ThrowType(env, "the native engine is shutting down");
  char err[256] = "";
  engine = osb_engine_start(err, sizeof err);
  if (!engine) throw Napi::Error::New(env, std::string("cannot start the native engine: ") + err);
  return engine;
}

void Addon::Hold(Napi::Env env) {
  if (pending++ == 0) tsfn.Ref(env);
}

void Addon::Settled(Napi::Env env) {
  if (--pending == 0) tsfn.Unref(env);
}

void Addon::Deliver(Delivery* d) {
  if (tsfn.NonBlockingCall(d) != napi_ok) {
    d->Orphan();
    delete d;
  }
}

void CallJs(Napi::Env env, Napi::Function, Addon* a, Delivery* d) {
  std::unique_ptr<Delivery> owned(d);
  if (!d) return;
  if (env == nullptr || a == nullptr) {
    d->Orphan();
    return;
  }
  d->Run(env, a);
}

Addon* GetAddon(Napi::Env env) { return env.GetInstanceData<Addon>(); }

Napi::Error MakeError(Napi::Env env, const osb_error* e) {
  Napi::Error err = Napi::Error::New(env, e->message[0] ? e->message : e->code);
  Napi::Object o = err.Value();
  o.Set("kind", osb_kind_name(e->kind));
  o.Set("status", Napi::Number::New(env, (double)e->status));
  o.Set("code", e->code);
  if (e->request_id[0]) o.Set("requestId", e->request_id);
  else o.Set("requestId", env.Undefined());
  o.Set("attempts", Napi::Number::New(env, e->attempts > 0 ? e->attempts : 1));
  return err;
}

void ThrowType(Napi::Env env, const char* msg) { throw Napi::TypeError::New(env, msg); }

bool ArgIsNullish(const Napi::CallbackInfo& info, size_t i) {
  return info.Length() <= i || info[i].IsUndefined() || info[i].IsNull();
}

std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (info.Length() <= i || !info[i].IsString()) ThrowType(info.Env(), (std::string(what) + " must be a string").c_str());
  std::string s = info[i].As<Napi::String>().Utf8Value();
  if (s.find('\0') != std::string::npos) ThrowType(info.Env(), (std::string(what) + " must not contain NUL").c_str());
  return s;
}

long ArgLong(const Napi::CallbackInfo& info, size_t i, long def, const char* what) {
  if (ArgIsNullish(info, i)) return def;
  if (!info[i].IsNumber()) ThrowType(info.Env(), (std::string(what) + " must be a number").c_str());
  double d = info[i].As<Napi::Number>().DoubleValue();
  if (d != d || d < -9.0e15 || d > 9.0e15) ThrowType(info.Env(), (std::string(what) + " is out of range").c_str());
  return (long)d;
}

std::vector<std::string> ArgStrings(const Napi::CallbackInfo& info, size_t i, const char* what) {
  std::vector<std::string> out;
  if (ArgIsNullish(info, i)) return out;
  if (!info[i].IsArray()) ThrowType(info.Env(), (std::string(what) + " must be an array of strings").c_str());
  Napi::Array a = info[i].As<Napi::Array>();
  for (uint32_t k = 0; k < a.Length(); k++) {
    Napi::Value v = a.Get(k);
    if (!v.IsString()) ThrowType(info.Env(), (std::string(what) + " must be an array of strings").c_str());
    std::string s = v.As<Napi::String>().Utf8Value();
    if (s.find('\0') != std::string::npos) ThrowType(info.Env(), (std::string(what) + " must not contain NUL").c_str());
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<const char*> CStrs(const std::vector<std::string>& v) {
  std::vector<const char*> r;
  for (auto& s : v) r.push_back(s.c_str());
  return r;
}

std::vector<std::string> ArgPairs(const Napi::CallbackInfo& info, size_t i, const char* what) {
  std::vector<std::string> v = ArgStrings(info, i, what);
  if (v.size() % 2) ThrowType(info.Env(), (std::string(what) + " must be name/value pairs").c_str());
  return v;
}

osb_conn* NewExecdClient(const Napi::CallbackInfo& info) {
  std::string base = ArgString(info, 0, "baseUrl");
  std::vector<std::string> kv = ArgPairs(info, 1, "headers");
  long timeout = ArgLong(info, 2, 30000, "requestTimeoutMs");
  long idle = ArgLong(info, 3, 10000, "idleTimeoutMs");
  bool hasCa = !ArgIsNullish(info, 4);
  std::string ca = hasCa ? ArgString(info, 4, "caFile") : "";
  auto hv = CStrs(kv);
  char err[256] = "";
  osb_conn* x = osb_conn_new(base.c_str(), hv.data(), kv.size() / 2, timeout, idle, err, sizeof err);
  if (!x) ThrowType(info.Env(), err);
  if (hasCa && osb_conn_set_ca_file(x, ca.c_str(), err, sizeof err) != 0) {
    osb_conn_free(x);
    ThrowType(info.Env(), err);
  }
  return x;
}

void PromiseDelivery::Run(Napi::Env env, Addon* addon) {
  if (failed) deferred.Reject(MakeError(env, &err).Value());
  else deferred.Resolve(Value(env));
  addon->Settled(env);
}

void DeliverDone(void* ud, const osb_error* err) {
  PromiseDelivery* d = static_cast<PromiseDelivery*>(ud);
  d->Fail(err);
  d->a->Deliver(d);
}

Napi::Object OutputBatch(Napi::Env env, const std::string& out, const std::string& err) {
  Napi::Object o = Napi::Object::New(env);
  if (!out.empty()) o.Set("stdout", Napi::String::New(env, out.data(), out.size()));
  if (!err.empty()) o.Set("stderr", Napi::String::New(env, err.data(), err.size()));
  return o;
}

static Napi::Value Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Addon* a = GetAddon(env);
  osb_engine_stats s = {};
  if (a->engine) osb_engine_get_stats(a->engine, &s);
  Napi::Object o = Napi::Object::New(env);
  o.Set("requestsInFlight", Napi::Number::New(env, (double)s.requests_in_flight));
  o.Set("requestsStarted", Napi::Number::New(env, (double)s.requests_started));
  o.Set("sockets", Napi::Number::New(env, (double)s.sockets));
  o.Set("engineThreads", Napi::Number::New(env, a->engine ? 1 : 0));
  osb_ws_stats w = {0, 0};
  osb_ws_get_stats(a->ws, &w);
  o.Set("wsThreads", Napi::Number::New(env, (double)w.threads));
  o.Set("wsConnections", Napi::Number::New(env, (double)w.connections));
  o.Set("processes", Napi::Number::New(env, (double)osb_proc_count()));
  o.Set("processesPaused", Napi::Number::New(env, (double)osb_proc_paused_count()));
  o.Set("processObjects", Napi::Number::New(env, (double)osb_proc_object_count()));
  o.Set("stdinHolders", Napi::Number::New(env, (double)osb_proc_holder_count()));
  o.Set("operations", Napi::Number::New(env, (double)s.actives));
  o.Set("pendingPromises", Napi::Number::New(env, a->pending));
  o.Set("pausedStreams", Napi::Number::New(env, (double)s.paused));
  return o;
}

static Napi::Value Versions(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("curl", curl_version_info(CURLVERSION_NOW)->version);
  o.Set("napi", Napi::Number::New(info.Env(), NAPI_VERSION));
  return o;
}

void InitCodeInterpreter(Napi::Env env, Napi::Object exports);  // code_wrap.cc
void InitFiles(Napi::Env env, Napi::Object exports);            // files_wrap.cc

static void Cleanup(Addon* a) {
  a->closing = true;
  if (a->engine) osb_engine_stop(a->engine);  // settles everything: deliveries are orphaned below
  a->engine = nullptr;
  if (a->ws) osb_ws_stop(a->ws);  // after the engine: its processes have closed their sockets
  a->ws = nullptr;
  a->tsfn.Abort();
}

static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  Addon* a = new Addon();
  env.SetInstanceData<Addon>(a);
  a->tsfn = Tsfn::New(env, "mastra-opensandbox", 0, 1, a);
  a->tsfn.Unref(env);  // an idle addon never holds the process open
  env.AddCleanupHook(Cleanup, a);
  exports.Set("stats", Napi::Function::New(env, Stats, "stats"));
  exports.Set("versions", Napi::Function::New(env, Versions, "versions"));
  InitLifecycle(env, exports);
  InitExecd(env, exports);
  InitProcess(env, exports);
  InitCodeInterpreter(env, exports);
  InitFiles(env, exports);
  return exports;
}

NODE_API_MODULE(mastra_opensandbox, Init)
