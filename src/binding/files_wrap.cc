// Files: the thin binding of src/opensandbox/files.h. filesUpload(baseUrl, headerKv, paths, modes, buffers,
// timeoutMs) -> { result: Promise<void>, handle }; filesCancel(handle) ends it early. lib/native.js wraps both.
#include "addon.h"

extern "C" {
#include "opensandbox/files.h"
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
  osb_upload* u = osb_upload_start(e, base.c_str(), kv.data(), headers.size() / 2, files.data(), files.size(), timeout,
                                   DeliverDone, d, err, sizeof err);
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

}  // namespace

void InitFiles(Napi::Env env, Napi::Object exports) {
  exports.Set("filesUpload", Napi::Function::New(env, Upload, "filesUpload"));
  exports.Set("filesCancel", Napi::Function::New(env, Cancel, "filesCancel"));
}
