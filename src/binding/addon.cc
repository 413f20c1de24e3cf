// Placeholder-free minimal binding: reports library versions. Replaced by the full binding.
#include <napi.h>
#include <curl/curl.h>
static Napi::Value Versions(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("curl", curl_version());
  return o;
}
static Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("versions", Napi::Function::New(env, Versions));
  return exports;
}
NODE_API_MODULE(mastra_opensandbox, Init)
