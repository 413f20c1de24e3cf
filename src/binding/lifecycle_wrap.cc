// Lifecycle: a thin ObjectWrap over src/opensandbox/lifecycle.h. Arguments are strings/numbers prepared by
// lib/native.js (request bodies already JSON text); results are JSON text that lib/native.js parses.
#include "addon.h"

#include <cstdlib>
extern "C" {
#include "opensandbox/lifecycle.h"
}

namespace {

// Resolves { body, date }: body the JSON text (undefined without a body), date the response's HTTP Date header
// (undefined without one); a rejection carries the Date header as its serverDate property.
struct LcCall : PromiseDelivery {
  char* json = nullptr;
  std::string date;
  using PromiseDelivery::PromiseDelivery;
  ~LcCall() override { free(json); }
  Napi::Value Date(Napi::Env env) { return date.empty() ? env.Undefined() : Napi::String::New(env, date).As<Napi::Value>(); }
  Napi::Value Value(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("body", json ? Napi::String::New(env, json).As<Napi::Value>() : env.Undefined());
    o.Set("date", Date(env));
    return o;
  }
  void Run(Napi::Env env, Addon* addon) override {
    if (failed) {
      Napi::Error e = MakeError(env, &err);
      e.Value().Set("serverDate", Date(env));
      deferred.Reject(e.Value());
    } else {
      deferred.Resolve(Value(env));
    }
    addon->Settled(env);
  }
};

// Engine thread.
void OnDone(void* ud, const osb_error* err, char* json, const char* date) {
  LcCall* call = static_cast<LcCall*>(ud);
  call->Fail(err);
  call->json = json;
  if (date) call->date = date;
  call->a->Deliver(call);
}

class LifecycleWrap : public Napi::ObjectWrap<LifecycleWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Lifecycle",
                       {InstanceMethod<&LifecycleWrap::Create>("create"), InstanceMethod<&LifecycleWrap::Get>("get"),
                        InstanceMethod<&LifecycleWrap::List>("list"), InstanceMethod<&LifecycleWrap::Delete>("delete"),
                        InstanceMethod<&LifecycleWrap::Pause>("pause"), InstanceMethod<&LifecycleWrap::Resume>("resume"),
                        InstanceMethod<&LifecycleWrap::Renew>("renew"),
                        InstanceMethod<&LifecycleWrap::Endpoint>("endpoint"),
                        InstanceMethod<&LifecycleWrap::PatchMetadata>("patchMetadata"),
                        InstanceMethod<&LifecycleWrap::CreateSnapshot>("createSnapshot"),
                        InstanceMethod<&LifecycleWrap::GetSnapshot>("getSnapshot"),
                        InstanceMethod<&LifecycleWrap::ListSnapshots>("listSnapshots"),
                        InstanceMethod<&LifecycleWrap::DeleteSnapshot>("deleteSnapshot")});
  }

  // new Lifecycle(baseUrl, apiKey|null, requestTimeoutMs, caFile|null)
  explicit LifecycleWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<LifecycleWrap>(info) {
    std::string base = ArgString(info, 0, "baseUrl");
    std::string key = ArgIsNullish(info, 1) ? "" : ArgString(info, 1, "apiKey");
    long timeout = ArgLong(info, 2, 30000, "requestTimeoutMs");
    bool hasCa = !ArgIsNullish(info, 3);
    std::string ca = hasCa ? ArgString(info, 3, "caFile") : "";  // every argument read before allocating
    char err[256] = "";
    lc_ = osb_lc_new(base.c_str(), key.empty() ? nullptr : key.c_str(), timeout, err, sizeof err);
    if (!lc_) ThrowType(info.Env(), err);
    if (hasCa) {
      if (osb_lc_set_ca_file(lc_, ca.c_str(), err, sizeof err) != 0) {
        osb_lc_free(lc_);  // a throwing constructor never runs the destructor
        lc_ = nullptr;
        ThrowType(info.Env(), err);
      }
    }
  }
  ~LifecycleWrap() override { osb_lc_free(lc_); }

 private:
  osb_lc* lc_ = nullptr;

  // Runs one C call that takes (engine, lc, ..., done, ud, errbuf, errlen) and returns its promise.
  template <typename F>
  Napi::Value Start(const Napi::CallbackInfo& info, F submit) {
    Napi::Env env = info.Env();
    Addon* a = GetAddon(env);
    osb_engine* e = a->Engine(env);
    LcCall* call = new LcCall(env, a);
    Napi::Promise p = call->deferred.Promise();
    char err[256] = "";
    if (submit(e, call, err, sizeof err) != 0) {
      delete call;
      ThrowType(env, err);
    }
    a->Hold(env);
    return p;
  }

  Napi::Value Create(const Napi::CallbackInfo& info) {
    std::string body = ArgString(info, 0, "request");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_create(e, lc_, body.c_str(), OnDone, c, err, n);
    });
  }
  Napi::Value Get(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "sandbox id");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_get(e, lc_, id.c_str(), OnDone, c, err, n);
    });
  }
  // list(metaKv: string[], states: string[], page, pageSize)
  Napi::Value List(const Napi::CallbackInfo& info) {
    std::vector<std::string> meta = ArgStrings(info, 0, "metadata");
    std::vector<std::string> states = ArgStrings(info, 1, "states");
    if (meta.size() % 2) ThrowType(info.Env(), "metadata must be key/value pairs");
    long page = ArgLong(info, 2, 0, "page"), size = ArgLong(info, 3, 0, "pageSize");
    auto mv = CStrs(meta), sv = CStrs(states);
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_list(e, lc_, mv.data(), meta.size() / 2, sv.data(), sv.size(), page, size, OnDone, c, err, n);
    });
  }
  Napi::Value Delete(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "sandbox id");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_delete(e, lc_, id.c_str(), OnDone, c, err, n);
    });
  }
  Napi::Value Pause(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "sandbox id");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_pause(e, lc_, id.c_str(), OnDone, c, err, n);
    });
  }
  Napi::Value Resume(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "sandbox id");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_resume(e, lc_, id.c_str(), OnDone, c, err, n);
    });
  }
  Napi::Value Renew(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "sandbox id"), at = ArgString(info, 1, "expiresAt");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_renew(e, lc_, id.c_str(), at.c_str(), OnDone, c, err, n);
    });
  }
  Napi::Value Endpoint(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "sandbox id");
    long port = ArgLong(info, 1, 0, "port");
    bool proxy = info.Length() > 2 && info[2].ToBoolean().Value();
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_endpoint(e, lc_, id.c_str(), port, proxy ? 1 : 0, OnDone, c, err, n);
    });
  }
  Napi::Value PatchMetadata(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "sandbox id"), patch = ArgString(info, 1, "patch");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_patch_metadata(e, lc_, id.c_str(), patch.c_str(), OnDone, c, err, n);
    });
  }
  // createSnapshot(sandboxId, name|null)
  Napi::Value CreateSnapshot(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "sandbox id");
    bool named = !ArgIsNullish(info, 1);
    std::string name = named ? ArgString(info, 1, "name") : "";
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_snapshot_create(e, lc_, id.c_str(), named ? name.c_str() : nullptr, OnDone, c, err, n);
    });
  }
  Napi::Value GetSnapshot(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "snapshot id");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_snapshot_get(e, lc_, id.c_str(), OnDone, c, err, n);
    });
  }
  Napi::Value DeleteSnapshot(const Napi::CallbackInfo& info) {
    std::string id = ArgString(info, 0, "snapshot id");
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_snapshot_delete(e, lc_, id.c_str(), OnDone, c, err, n);
    });
  }
  // listSnapshots(sandboxId|null, states: string[], page, pageSize)
  Napi::Value ListSnapshots(const Napi::CallbackInfo& info) {
    bool bySandbox = !ArgIsNullish(info, 0);
    std::string id = bySandbox ? ArgString(info, 0, "sandbox id") : "";
    std::vector<std::string> states = ArgStrings(info, 1, "states");
    long page = ArgLong(info, 2, 0, "page"), size = ArgLong(info, 3, 0, "pageSize");
    auto sv = CStrs(states);
    return Start(info, [&](osb_engine* e, LcCall* c, char* err, size_t n) {
      return osb_lc_snapshot_list(e, lc_, bySandbox ? id.c_str() : nullptr, sv.data(), sv.size(), page, size, OnDone,
                                  c, err, n);
    });
  }
};

}  // namespace

void InitLifecycle(Napi::Env env, Napi::Object exports) { exports.Set("Lifecycle", LifecycleWrap::Define(env)); }
