// spawn(file, argv[] (argv[0] included), envp[], cwd|null, newSession, stdio[], onExit) over src/core/spawn.h for the local server's
// execd (lib/dev-server/execd/spawn.js). stdio entries: -1 /dev/null, -2 a new socketpair, n >= 0 the caller's
// descriptor n. Returns { pid, fds } (fds[i]: the caller's end of entry i's socketpair, else -1) or throws an Error
// with errno (positive) and syscall (the step that failed). The reaper thread starts at the first call (an Error
// with code 'SPAWN_UNSUPPORTED' when the kernel has no pidfd_open) and is stopped in the addon's cleanup hook;
// onExit(pid, code, signo) of the latest call is called on the JS thread for every exit. A running child keeps the
// event loop alive, like a ChildProcess.
#include "addon.h"

#include <cstring>
#include <string>
extern "C" {
#include "core/spawn.h"
}

namespace {

struct ExitDelivery : Delivery {
  pid_t pid;
  int code, signo;
  void Run(Napi::Env env, Addon* a) override {
    a->ChildExited(env);
    if (a->spawnExit.IsEmpty()) return;
    Napi::HandleScope scope(env);
    a->spawnExit.Call({Napi::Number::New(env, pid), Napi::Number::New(env, code), Napi::Number::New(env, signo)});
  }
};

void OnExit(void* ud, pid_t pid, int code, int signo) {  // reaper thread
  auto* d = new ExitDelivery();
  d->pid = pid;
  d->code = code;
  d->signo = signo;
  static_cast<Addon*>(ud)->Deliver(d);
}

Napi::Value Spawn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Addon* a = GetAddon(env);
  std::string file = ArgString(info, 0, "file");
  std::vector<std::string> args = ArgStrings(info, 1, "args");
  std::vector<std::string> envs = ArgStrings(info, 2, "env");
  bool hasCwd = !ArgIsNullish(info, 3);
  std::string cwd = hasCwd ? ArgString(info, 3, "cwd") : "";
  bool session = info.Length() > 4 && info[4].ToBoolean().Value();
  if (info.Length() <= 5 || !info[5].IsArray()) ThrowType(env, "stdio must be an array of numbers");
  Napi::Array st = info[5].As<Napi::Array>();
  if (st.Length() > OSB_SPAWN_MAX_STDIO) ThrowType(env, "stdio has too many entries");
  if (info.Length() <= 6 || !info[6].IsFunction()) ThrowType(env, "onExit must be a function");
  osb_spawn_opts o;
  memset(&o, 0, sizeof o);
  o.nstdio = (int)st.Length();
  for (int i = 0; i < o.nstdio; i++) {
    Napi::Value v = st.Get((uint32_t)i);
    double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -3;
    if (d == -1) o.stdio[i].kind = OSB_STDIO_NULL;
    else if (d == -2) o.stdio[i].kind = OSB_STDIO_PAIR;
    else if (d >= 0 && d <= 2147483647 && d == (int)d) {
      o.stdio[i].kind = OSB_STDIO_FD;
      o.stdio[i].fd = (int)d;
    } else ThrowType(env, "stdio entries must be -1 (/dev/null), -2 (socketpair) or a descriptor");
  }
  if (a->closing) ThrowType(env, "the native engine is shutting down");
  if (!a->reaper) {
    char err[256] = "";
    a->reaper = osb_reaper_new(OnExit, a, err, sizeof err);
    if (!a->reaper) {
      Napi::Error e = Napi::Error::New(env, err);
      e.Set("code", "SPAWN_UNSUPPORTED");
      throw e;
    }
  }
  a->spawnExit = Napi::Persistent(info[6].As<Napi::Function>());
  std::vector<const char*> argv = CStrs(args), envp = CStrs(envs);
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  o.file = file.c_str();
  o.argv = argv.data();
  o.envp = envp.data();
  o.cwd = hasCwd ? cwd.c_str() : nullptr;
  o.new_session = session;
  pid_t pid;
  int err_no = 0;
  const char* step = "spawn";
  if (osb_reaper_spawn(a->reaper, &o, &pid, &err_no, &step) != 0) {
    Napi::Error e = Napi::Error::New(env, std::string(step) + ": " + strerror(err_no));
    e.Set("errno", Napi::Number::New(env, err_no));
    e.Set("syscall", step);
    throw e;
  }
  a->ChildStarted(env);
  Napi::Object r = Napi::Object::New(env);
  r.Set("pid", Napi::Number::New(env, pid));
  Napi::Array fds = Napi::Array::New(env, o.nstdio);
  for (int i = 0; i < o.nstdio; i++)
    fds.Set((uint32_t)i, Napi::Number::New(env, o.stdio[i].kind == OSB_STDIO_PAIR ? o.stdio[i].fd : -1));
  r.Set("fds", fds);
  return r;
}

}  // namespace

void InitSpawn(Napi::Env env, Napi::Object exports) {
  exports.Set("spawn", Napi::Function::New(env, Spawn, "spawn"));
}
