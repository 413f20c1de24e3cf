/* osb-execd: the C execd of the local OpenSandbox-compatible server, the process that runs inside each sandbox (see
 * docs/dev-server-execd.md). It answers every route itself. Its command line:
 *   --socket PATH | --port N [--host H]   where it listens (a stale socket file is removed first)
 *   --access-token-fd N | --access-token T | $EXECD_ACCESS_TOKEN   the required X-EXECD-ACCESS-TOKEN ("" none)
 *   --workspace DIR, --command-tail-ms N, --pty-exit-race, --signal-forwarding, --pty-close-linger
 *   --code-kernels DIR                    the code interpreter's kernel programs (lib/dev-server/execd/code-*-kernel.*)
 *   --node PATH                           the node the javascript kernel runs on (default: `node` on PATH)
 * --image-root ...: the step before bubblewrap of an image sandbox (rootfs.h), then execs bubblewrap.
 * --version prints "osb-execd <package version>" and exits.
 * Prints "execd ready\n" (socket) or "execd ready <port>\n" (TCP) once it listens. SIGTERM/SIGINT: shutdown, exit 0.
 * With --signal-forwarding, SIGHUP SIGUSR2 SIGPIPE SIGWINCH go on to the foreground command. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include "fsedit.h"
#include "rootfs.h"
#include "server.h"
#include "xd.h"

static uv_loop_t *loop;
static xd_server *server;
static void *commands; /* commands.c: /command* */
static void *dirs; /* dirs.c: POST /directories */
static void *fsedit; /* fsedit.c: DELETE /files, POST /files/{permissions,mv,replace}, DELETE /directories */
static void *upload; /* upload.c: POST /files/upload */
static void *files; /* files.c: GET /files/info, GET|HEAD /files/download */
static void *pty; /* pty.c: /pty* */
static void *code; /* code.c: /code* */
static void *proxy; /* proxy.c: /proxy/{port}/... */
static void *sessions; /* sessions.c: /session* */
static void *metrics; /* metrics.c: GET /metrics, GET /metrics/watch */
static uv_signal_t sigs[6];
static size_t nsigs;
static uv_timer_t exit_timer;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "execd: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

/* the whole content of an inherited fd (the token pipe), then closed */
static char *read_fd(int fd) {
  size_t cap = 256, len = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  for (;;) {
    if (len + 1 >= cap) {
      if (cap >= 1u << 20) break;
      char *n = realloc(s, cap *= 2);
      if (!n) break;
      s = n;
    }
    ssize_t r = read(fd, s + len, cap - len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      free(s);
      close(fd);
      return NULL;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  s[len] = 0;
  return s;
}

/* Closes every descriptor above 2 that execd was started with. Whatever the server's own launcher left open without
 * close-on-exec (a host file, a socket, a CI runner's pipe) passes through Node's spawn and bubblewrap into the
 * sandbox, where every command would inherit it and could write to the host through it. Returns -1 when one could
 * not be closed (execd then refuses to start). */
static int close_inherited(void) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0u) == 0) return 0;
#endif
  /* a kernel before 5.9: the descriptors /proc lists */
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int self = dirfd(d), n = 0, fds[256];
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < (int)(sizeof fds / sizeof fds[0])) {
    char *end;
    long fd = strtol(e->d_name, &end, 10);
    if (*end == 0 && fd > 2 && fd != self) fds[n++] = (int)fd; /* "." and ".." parse as 0; /proc lists ints */
  }
  int full = e != NULL;
  closedir(d);
  for (int i = 0; i < n; i++) (void)close(fds[i]);
  return full ? close_inherited() : 0; /* more than fit: another pass over what is left */
}

static void relay_signal(int sig) { xd_commands_relay_signal(commands, sig); }

static int code_interrupt(const char *id, xd_res *res) { return xd_code_interrupt(code, id, res); }
/* DELETE /command?id= of a bash session: closes it (upstream's Interrupt) */
static int interrupt_other(const char *id) { return sessions && xd_sessions_interrupt(sessions, id); }

static void on_exit_timer(uv_timer_t *t) {
  (void)t;
  exit(0);
}

static void shutdown_all(void) {
  for (size_t i = 0; i < nsigs; i++) uv_close((uv_handle_t *)&sigs[i], NULL);
  nsigs = 0;
  xd_server_close(server);
  xd_commands_close(commands); /* kills the running commands */
  commands = NULL;
  xd_dirs_close(dirs);
  dirs = NULL;
  xd_fsedit_close(fsedit);
  fsedit = NULL;
  xd_upload_close(upload);
  upload = NULL;
  xd_files_close(files);
  files = NULL;
  xd_pty_close(pty); /* kills the PTY sessions' processes */
  pty = NULL;
  xd_code_close(code); /* kills the kernels and the code shell runs */
  code = NULL;
  xd_proxy_close(proxy);
  proxy = NULL;
  xd_sessions_close(sessions); /* kills the bash sessions' runs */
  sessions = NULL;
  xd_metrics_close(metrics);
  metrics = NULL;
  /* what the modules still close (or a child that does not go) must not keep execd: exit after a bound */
  uv_timer_init(loop, &exit_timer);
  uv_timer_start(&exit_timer, on_exit_timer, 2000, 0);
  uv_unref((uv_handle_t *)&exit_timer);
}

static void on_signal(uv_signal_t *h, int sig) {
  (void)h;
  if (sig == SIGTERM || sig == SIGINT) {
    shutdown_all();
    return;
  }
  /* --signal-forwarding: a signal execd received goes on to the foreground command (commands.c) */
  xd_commands_relay_signal(commands, sig);
}

static void pool_noop(uv_work_t *w) {
  (void)w;
}

static void pool_noop_done(uv_work_t *w, int status) {
  (void)w;
  (void)status;
}

/* libuv's thread pool does the file system work (the fsyncs of concurrent uploads wait side by side, as the real
 * execd's goroutines do: with libuv's 4 threads, 16 uploads in flight queued behind each other's fsyncs) and the
 * process starts. Its size is read from UV_THREADPOOL_SIZE once, when the first work is queued: a no-op is queued
 * with it set, then it is taken out of the environment the commands inherit (a size the sandbox's environment
 * gives stays, for both). */
#define XD_THREAD_POOL 16
#define XD_STR_(x) #x
#define XD_STR(x) XD_STR_(x)
static void size_thread_pool(uv_loop_t *loop) {
  static uv_work_t first;
  int ours = getenv("UV_THREADPOOL_SIZE") == NULL;
  if (ours) setenv("UV_THREADPOOL_SIZE", XD_STR(XD_THREAD_POOL), 1);
  if (uv_queue_work(loop, &first, pool_noop, pool_noop_done) != 0) die("cannot start the thread pool", NULL);
  if (ours) unsetenv("UV_THREADPOOL_SIZE");
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--image-root") == 0) return rootfs_main(argc, argv); /* rootfs.h */
  const char *socket_path = NULL, *port_s = NULL, *host = "127.0.0.1", *workspace = "/workspace";
  const char *tail_s = "1000", *node_path = NULL, *token_fd_s = NULL, *code_kernels = NULL;
  const char *token = getenv("EXECD_ACCESS_TOKEN");
  int pty_exit_race = 0, signal_forwarding = 0, pty_close_linger = 0;
  enum { O_SOCKET = 1, O_PORT, O_HOST, O_TOKEN, O_TOKEN_FD, O_WORKSPACE, O_RACE, O_SIGFWD, O_LINGER, O_TAIL, O_NODE, O_KERNELS, O_VERSION };
  static const struct option opts[] = {
      {"socket", required_argument, NULL, O_SOCKET},
      {"port", required_argument, NULL, O_PORT},
      {"host", required_argument, NULL, O_HOST},
      {"access-token", required_argument, NULL, O_TOKEN},
      {"access-token-fd", required_argument, NULL, O_TOKEN_FD},
      {"workspace", required_argument, NULL, O_WORKSPACE},
      {"pty-exit-race", no_argument, NULL, O_RACE},
      {"signal-forwarding", no_argument, NULL, O_SIGFWD},
      {"pty-close-linger", no_argument, NULL, O_LINGER},
      {"command-tail-ms", required_argument, NULL, O_TAIL},
      {"node", required_argument, NULL, O_NODE},
      {"code-kernels", required_argument, NULL, O_KERNELS},
      {"version", no_argument, NULL, O_VERSION},
      {NULL, 0, NULL, 0},
  };
  int o;
  opterr = 0;
  while ((o = getopt_long_only(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
      case O_SOCKET: socket_path = optarg; break;
      case O_PORT: port_s = optarg; break;
      case O_HOST: host = optarg; break;
      case O_TOKEN: token = optarg; break;
      case O_TOKEN_FD: token_fd_s = optarg; break;
      case O_WORKSPACE: workspace = optarg; break;
      case O_RACE: pty_exit_race = 1; break;
      case O_SIGFWD: signal_forwarding = 1; break;
      case O_LINGER: pty_close_linger = 1; break;
      case O_TAIL: tail_s = optarg; break;
      case O_NODE: node_path = optarg; break;
      case O_KERNELS: code_kernels = optarg; break;
      case O_VERSION: printf("osb-execd %s\n", OSB_EXECD_VERSION); return 0; /* the package's (scripts/build.js) */
      default: die("unknown option or missing value", optind > 0 && optind <= argc ? argv[optind - 1] : NULL);
    }
  }
  if (optind < argc) die("unexpected argument", argv[optind]);
  char *token_buf = NULL;
  if (token_fd_s) {
    char *end;
    long fd = strtol(token_fd_s, &end, 10);
    if (*end || fd < 0 || fd > 65535) die("--access-token-fd is not a descriptor number", token_fd_s);
    if (!(token_buf = read_fd((int)fd))) die("--access-token-fd could not be read", token_fd_s);
    token = token_buf;
  }
  if (close_inherited() != 0) die("could not close the descriptors it inherited", NULL);
  /* the token must not reach commands through the environment */
  unsetenv("EXECD_ACCESS_TOKEN");
  if (!token) token = "";
  char *end;
  long tail = strtol(tail_s, &end, 10);
  if (*end || tail < 0) tail = 0; /* as Math.max(0, Number(x) || 0): anything else is 0 */
  int port = 44772;
  if (port_s) {
    long p = strtol(port_s, &end, 10);
    if (*end || p < 0 || p > 65535) die("--port is not a port number", port_s);
    port = (int)p;
  }
  /* as Node and Go do at start: the soft limit of open files up to the hard one, for execd's connections and its
   * commands' pipes (inherited by the commands) */
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (!signal_forwarding) signal(SIGPIPE, SIG_IGN);
  loop = uv_default_loop();

  xd_ctx ctx = {
      .loop = loop, .workspace = workspace, .signal_forwarding = signal_forwarding, .pty_exit_race = pty_exit_race,
      .pty_close_linger = pty_close_linger, .command_tail_ms = (uint64_t)tail,
      .relay_signal = relay_signal, .code_kernels = code_kernels, .node_path = node_path,
      .code_interrupt = code_interrupt, .interrupt_other = interrupt_other,
  };
  if (!(commands = xd_commands_new(&ctx))) die("out of memory", NULL);
  if (!(dirs = xd_dirs_new(&ctx))) die("out of memory", NULL);
  if (!(fsedit = xd_fsedit_new(&ctx))) die("out of memory", NULL);
  if (!(upload = xd_upload_new(&ctx))) die("out of memory", NULL);
  if (!(files = xd_files_new(&ctx))) die("out of memory", NULL);
  if (!(pty = xd_pty_new(&ctx))) die("out of memory", NULL);
  if (!(code = xd_code_new(&ctx))) die("out of memory", NULL);
  if (!(proxy = xd_proxy_new(&ctx))) die("out of memory", NULL);
  if (!(sessions = xd_sessions_new(&ctx))) die("out of memory", NULL);
  if (!(metrics = xd_metrics_new(&ctx))) die("out of memory", NULL);
  const xd_route routes[] = {{commands, xd_commands_route}, {dirs, xd_dirs_route}, {fsedit, xd_fsedit_route},
                             {upload, xd_upload_route}, {files, xd_files_route}, {pty, xd_pty_route},
                             {code, xd_code_route}, {sessions, xd_sessions_route}, {metrics, xd_metrics_route},
                             {proxy, xd_proxy_route}};

  server = xd_server_new(&(xd_server_opts){
      .loop = loop, .token = token, .routes = routes, .nroutes = sizeof routes / sizeof *routes});
  if (!server) die("out of memory", NULL);
  int rc, bound = 0;
  if (socket_path) rc = xd_server_listen_unix(server, socket_path);
  else rc = xd_server_listen_tcp(server, host, port, &bound);
  if (rc != 0) die("cannot listen", uv_strerror(rc));
  /* /proxy/44772 reaches this execd where it listens */
  if (xd_proxy_set_self(proxy, socket_path, host, bound) != 0) die("out of memory", NULL);

  int handled[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR2, SIGPIPE, SIGWINCH};
  for (size_t i = 0; i < (signal_forwarding ? 6u : 2u); i++) {
    uv_signal_init(loop, &sigs[nsigs]);
    uv_signal_start(&sigs[nsigs], on_signal, handled[i]);
    nsigs++;
  }

  if (socket_path) printf("execd ready\n");
  else printf("execd ready %d\n", bound);
  fflush(stdout);
  size_thread_pool(loop); /* after the ready line: its threads start while the server hears of it (~1 ms) */
  uv_run(loop, UV_RUN_DEFAULT);
  /* everything closed in time: the bound's timer goes too, and the loop with it */
  if (uv_is_active((uv_handle_t *)&exit_timer) && !uv_is_closing((uv_handle_t *)&exit_timer)) {
    uv_close((uv_handle_t *)&exit_timer, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
  }
  uv_loop_close(loop);
  free(token_buf);
  return 0;
}
