// Shared declarations of the thin node-addon-api binding: the per-instance Addon (engine, one threadsafe
// function, pending-work count that refs/unrefs it) and the Delivery base class run on the JS thread.
#ifndef OSB_BINDING_ADDON_H
#define OSB_BINDING_ADDON_H
#include <napi.h>
#include <string>
#include <vector>
extern "C" {
#include "core/engine.h"
#include "opensandbox/conn.h"
#include "opensandbox/error.h"
}

struct Addon;

// Work handed from the engine thread to the JS thread. Run() is not called when the env is tearing down;
// the destructor must then not touch Node-API (see Orphan()).
struct Delivery {
  virtual ~Delivery() {}
  virtual void Run(Napi::Env env, Addon* a) = 0;
  virtual void Orphan() {}  // env gone: release without Node-API calls
};

void CallJs(Napi::Env env, Napi::Function fn, Addon* a, Delivery* d);
using Tsfn = Napi::TypedThreadSafeFunction<Addon, Delivery, CallJs>;

struct Addon {
  osb_engine* engine = nullptr;
  struct osb_ws* ws = nullptr;  // the WebSocket thread of process_wrap.cc, started lazily
  Tsfn tsfn;
  int pending = 0;  // JS thread only: promises not yet settled
  bool closing = false;
  Napi::FunctionReference commandCtor;
  Napi::FunctionReference processCtor;

  // Lazily starts the engine; throws a JS Error on failure.
  osb_engine* Engine(Napi::Env env);
  void Hold(Napi::Env env);     // a promise was created
  void Settled(Napi::Env env);  // a promise was settled
  // From any thread: hands d to the JS thread (deletes it when the env is closing).
  void Deliver(Delivery* d);
};

Addon* GetAddon(Napi::Env env);

// A promise settled on the JS thread: rejected with the contract's Error when Fail() recorded one, else resolved
// with Value() (undefined unless a subclass says otherwise). Settles the addon's pending count.
struct PromiseDelivery : Delivery {
  Napi::Promise::Deferred deferred;
  Addon* a;
  bool failed = false;
  osb_error err{};
  PromiseDelivery(Napi::Env env, Addon* addon) : deferred(Napi::Promise::Deferred::New(env)), a(addon) {}
  void Fail(const osb_error* e) {  // any thread; e may be NULL (success)
    if (!e) return;
    failed = true;
    err = *e;
  }
  virtual Napi::Value Value(Napi::Env env) { return env.Undefined(); }
  void Run(Napi::Env env, Addon* addon) override;
};
// Engine-thread callback of the C "done(ud, err)" shape: ud is a PromiseDelivery, handed to the JS thread.
void DeliverDone(void* ud, const osb_error* err);
// An output batch as JS sees it: { stdout?, stderr? } with only the non-empty parts.
Napi::Object OutputBatch(Napi::Env env, const std::string& out, const std::string& err);
// The contract's Error: message + kind/status/code/requestId/attempts own properties.
Napi::Error MakeError(Napi::Env env, const osb_error* e);
// Throws a TypeError (synchronous argument errors).
[[noreturn]] void ThrowType(Napi::Env env, const char* msg);

void InitLifecycle(Napi::Env env, Napi::Object exports);
void InitExecd(Napi::Env env, Napi::Object exports);
void InitProcess(Napi::Env env, Napi::Object exports);

// Helpers to read optional arguments.
std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* what);
bool ArgIsNullish(const Napi::CallbackInfo& info, size_t i);
long ArgLong(const Napi::CallbackInfo& info, size_t i, long def, const char* what);
// An array of strings [k0, v0, k1, v1, ...] (or [s0, s1, ...]) into std::strings.
std::vector<std::string> ArgStrings(const Napi::CallbackInfo& info, size_t i, const char* what);
std::vector<const char*> CStrs(const std::vector<std::string>& v);
// ArgStrings that must hold name/value pairs (TypeError "<what> must be name/value pairs" otherwise).
std::vector<std::string> ArgPairs(const Napi::CallbackInfo& info, size_t i, const char* what);

// The C client of an execd wrapper (Execd, CodeInterpreter) from its constructor arguments (baseUrl, headerKv[],
// requestTimeoutMs, idleTimeoutMs, caFile|null). Every argument is read before the client is made; bad input throws
// a TypeError and leaves nothing allocated (a throwing constructor never runs the destructor).
osb_conn* NewExecdClient(const Napi::CallbackInfo& info);

#endif
