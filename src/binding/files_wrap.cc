// Files: the thin binding of src/opensandbox/files.h and fileops.h. filesUpload(baseUrl, headerKv, paths, modes,
// buffers, timeoutMs, caFile|null) -> { result: Promise<void>, handle }; filesCancel(handle) ends it early.
// new FilesClient(baseUrl, headerKv, requestTimeoutMs, idleTimeoutMs, caFile|null).op(kind, paths, text|null,
// text2|null, num, rangeStart, rangeEnd, sizeHint, maxBytes, timeoutMs) -> { result: Promise<string|Buffer|undefined>,
// handle }; fileOpCancel(handle). A download resolves a Buffer over the C allocation itself (no copy).
// lib/filesystem.js wraps them.
#include "addon.h"

#include <cstdlib>
#include <cstring>
extern "C" {
#include "opensandbox/files.h"
#include "opensandbox/fileops.h"
}

namespace {

struct Handle {
  osb_upload* u;
};

Napi::Value Upload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string base = ArgString(info, 0, "baseUrl");
  std::vector<std::string> headers = ArgPairs(info, 1, "headers");
  std::vector<std::string> paths = ArgStrings(info, 2, "paths");
  if (info.Length() < 5 || !info[3].IsArray() || !info[4].IsArray()) ThrowType(env, "modes and buffers must be arrays");
  Napi::Array modes = info[3].As<Napi::Array>(), bufs = info[4].As<Napi::Array>();
  if (modes.Length() != paths.size() || bufs.Length() != paths.size()) ThrowType(env, "paths, modes and buffers differ in length");
  long timeout = ArgLong(info, 5, 0, "timeoutMs");
  bool hasCa = !ArgIsNullish(info, 6);
  std::string ca = hasCa ? ArgString(info, 6, "caFile") : "";
  std::vector<osb_upload_file> files(paths.size());
  for (size_t i = 0; i < paths.size(); i++) {
    Napi::Value m = modes.Get(i), b = bufs.Get(i);
    if (!m.IsNumber()) ThrowType(env, "modes must be numbers");
    if (!b.IsBuffer()) ThrowType(env, "buffers must be Buffers");
    Napi::Buffer<char> buf = b.As<Napi::Buffer<char>>();
    files[i] = {paths[i].c_str(), m.As<Napi::Number>().Int32Value(), buf.Data(), buf.Length()};
  }
  Addon* a = GetAddon(env);
  osb_engine* e = a->Engine(env);
  PromiseDelivery* d = new PromiseDelivery(env, a);
  Napi::Promise p = d->deferred.Promise();
  auto kv = CStrs(headers);
  char err[256] = "";
  osb_upload* u = osb_upload_start(e, base.c_str(), kv.data(), headers.size() / 2, hasCa ? ca.c_str() : nullptr,
                                   files.data(), files.size(), timeout, DeliverDone, d, err, sizeof err);
  if (!u) {
    delete d;
    ThrowType(env, err);
  }
  a->Hold(env);
  Napi::Object o = Napi::Object::New(env);
  o.Set("result", p);
  o.Set("handle", Napi::External<Handle>::New(env, new Handle{u}, [](Napi::Env, Handle* h) {
          osb_upload_release(h->u);
          delete h;
        }));
  return o;
}

Napi::Value Cancel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsExternal()) ThrowType(env, "expected an upload handle");
  Addon* a = GetAddon(env);
  if (a->engine) osb_upload_cancel(a->engine, info[0].As<Napi::External<Handle>>().Data()->u);
  return env.Undefined();
}

struct OpCall : PromiseDelivery {  // resolves JSON text, the downloaded bytes (Buffer), or undefined
  char* data = nullptr;
  size_t len = 0;
  bool bytes = false;
  using PromiseDelivery::PromiseDelivery;
  ~OpCall() override { free(data); }
  Napi::Value Value(Napi::Env env) override {
    if (!data) return env.Undefined();
    char* d = data;
    data = nullptr;
    if (!bytes) {
      Napi::String s = Napi::String::New(env, d, len);
      free(d);
      return s;
    }
    return Napi::Buffer<char>::New(env, d, len, [](Napi::Env, char* p) { free(p); });
  }
};

void OnOpDone(void* ud, const osb_error* err, char* data, size_t len) {  // engine thread
  OpCall* c = static_cast<OpCall*>(ud);
  c->Fail(err);
  c->data = data;
  c->len = len;
  c->a->Deliver(c);
}

struct OpHandle {
  osb_fop* op;
};

const char* const kKinds[] = {"info", "remove", "list", "search", "mkdir", "rmdir", "move", "chmod", "replace", "download",
                              "policyGet", "policyPatch", "policyDelete"};

class FilesClient : public Napi::ObjectWrap<FilesClient> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "FilesClient", {InstanceMethod<&FilesClient::Op>("op")});
  }
  explicit FilesClient(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FilesClient>(info), conn_(NewExecdClient(info)) {}
  ~FilesClient() override { osb_conn_free(conn_); }

 private:
  osb_conn* conn_;

  Napi::Value Op(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    std::string kind = ArgString(info, 0, "kind");
    osb_fop_req q = {};
    size_t k = 0;
    while (k < sizeof kKinds / sizeof *kKinds && kind != kKinds[k]) k++;
    if (k == sizeof kKinds / sizeof *kKinds) ThrowType(env, "unknown file operation");
    q.kind = static_cast<osb_fop_kind>(k);
    std::vector<std::string> paths = ArgStrings(info, 1, "paths");
    bool hasText = !ArgIsNullish(info, 2), hasText2 = !ArgIsNullish(info, 3);
    std::string text = hasText ? ArgString(info, 2, "text") : "";
    std::string text2 = hasText2 ? ArgString(info, 3, "text2") : "";
    q.num = ArgLong(info, 4, 0, "num");
    q.range_start = ArgLong(info, 5, -1, "rangeStart");
    q.range_end = ArgLong(info, 6, -1, "rangeEnd");
    q.size_hint = (size_t)ArgLong(info, 7, 0, "sizeHint");
    q.max_bytes = (size_t)ArgLong(info, 8, 0, "maxBytes");
    q.timeout_ms = ArgLong(info, 9, conn_->timeout_ms, "timeoutMs");
    auto pv = CStrs(paths);
    q.paths = pv.data();
    q.npaths = paths.size();
    q.text = hasText ? text.c_str() : nullptr;
    q.text2 = hasText2 ? text2.c_str() : nullptr;
    Addon* a = GetAddon(env);
    osb_engine* e = a->Engine(env);
    OpCall* c = new OpCall(env, a);
    c->bytes = q.kind == OSB_FOP_DOWNLOAD;
    Napi::Promise p = c->deferred.Promise();
    char err[256] = "";
    osb_fop* op = osb_fop_start(e, conn_, &q, OnOpDone, c, err, sizeof err);
    if (!op) {
      delete c;
      ThrowType(env, err);
    }
    a->Hold(env);
    Napi::Object o = Napi::Object::New(env);
    o.Set("result", p);
    o.Set("handle", Napi::External<OpHandle>::New(env, new OpHandle{op}, [](Napi::Env, OpHandle* h) {
            osb_fop_release(h->op);
            delete h;
          }));
    return o;
  }
};

Napi::Value OpCancel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsExternal()) ThrowType(env, "expected a file operation handle");
  Addon* a = GetAddon(env);
  if (a->engine) osb_fop_cancel(a->engine, info[0].As<Napi::External<OpHandle>>().Data()->op);
  return env.Undefined();
}

}  // namespace

void InitFiles(Napi::Env env, Napi::Object exports) {
  exports.Set("filesUpload", Napi::Function::New(env, Upload, "filesUpload"));
  exports.Set("filesCancel", Napi::Function::New(env, Cancel, "filesCancel"));
  exports.Set("FilesClient", FilesClient::Define(env));
  exports.Set("fileOpCancel", Napi::Function::New(env, OpCancel, "fileOpCancel"));
}
