/* The process wrapper (process.c's osb_proc_wrapper) run by real shells over a pipe, as execd's pipe mode runs it:
 * the go line, stdin frames ("D<n>\n" + n bytes, "E\n"), the exit marker, the ack. Each case runs under bash (what
 * execd's PTY API runs) with the tools of the machine (coreutils), then with busybox's applets first on PATH (a
 * minimal image: busybox's head reads ahead, so the decoder must not rely on it). Checked: every byte value and
 * payloads larger than one frame arrive exactly, the end frame gives the command its EOF, and a command that exits
 * in the middle of the input leaves a wrapper that still takes its ack and exits. No network, no execd. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "opensandbox/process.h"

#define NONCE "0123456789abcdef0123456789abcdef"

static char g_bbdir[64]; /* a directory of busybox applet links, "" without busybox */

/* The stdin holder the wrappers with stdin are given (its pid after the go line), or none (pid 0: the wrapper's own
 * decoder); the client's requests to it ("S <nonce>", "C <nonce>") are written into g_holder_in. */
static pid_t g_holder_pid;
static int g_holder_in = -1;

static long ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t k = write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    c += k;
    n -= (size_t)k;
  }
  return 0;
}

static int frame_as(int fd, char kind, const unsigned char *p, size_t n) {
  char head[32];
  int hn = snprintf(head, sizeof head, "%c%zu\n", kind, n);
  return write_all(fd, head, (size_t)hn) || write_all(fd, p, n);
}
/* A frame copied by dd. */
static int frame(int fd, const unsigned char *p, size_t n) { return frame_as(fd, 'D', p, n); }
/* A frame read by the shell (the client sends small ones without NUL so). */
static int tframe(int fd, const unsigned char *p, size_t n) { return frame_as(fd, 'T', p, n); }

typedef struct {
  pid_t pid;
  int in, out;
  char dir[64];
} wrap;

/* Starts shell -c <wrapper of command> in a fresh TMPDIR (also the cwd), PATH = path, stdinMode 'ignore' when
 * ignore; sends go (go_len bytes) first when go is not NULL. */
static int wrap_spawn(wrap *w, const char *shell, const char *path, const char *command, int ignore, const char *go,
                      size_t go_len) {
  osb_proc_opts o;
  memset(&o, 0, sizeof o);
  o.command = command;
  o.stdin_ignore = ignore;
  char err[200];
  snprintf(w->dir, sizeof w->dir, "/tmp/osb-wrapper-XXXXXX");
  if (!mkdtemp(w->dir)) return -1;
  o.cwd = w->dir;
  char *script = osb_proc_wrapper(&o, NONCE, err, sizeof err);
  if (!script) return -1;
  int in[2], out[2];
  if (pipe(in) || pipe(out)) return -1;
  w->pid = fork();
  if (w->pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    char ep[96];
    snprintf(ep, sizeof ep, "%s/stderr", w->dir);
    int e = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(e, 2);
    for (int fd = 3; fd < 64; fd++) close(fd);
    setenv("TMPDIR", w->dir, 1);
    setenv("PATH", path, 1);
    execl(shell, shell, "-c", script, (char *)NULL);
    _exit(127);
  }
  free(script);
  close(in[0]);
  close(out[1]);
  w->in = in[1];
  w->out = out[0];
  if (w->pid <= 0) return -1;
  return go ? write_all(w->in, go, go_len) : 0;
}

/* The go line with stdin: the holder's pid (0: none) on the next line. */
static const char *go_line(const char *go, char *buf, size_t cap) {
  snprintf(buf, cap, "%s%ld\n", go, (long)g_holder_pid);
  return buf;
}

/* Starts a command with stdin (the go line names g_holder_pid). */
static int wrap_start(wrap *w, const char *shell, const char *path, const char *command) {
  char go[96];
  go_line("OSB-GO:" NONCE "\n", go, sizeof go);
  return wrap_spawn(w, shell, path, command, 0, go, strlen(go));
}

/* With a holder: waits (deadline 10 s) for the wrapper's holder marker on its stderr (the client's cue), then sends
 * the request (S: start the decoder, C: close the holder's writer). Without one: nothing. 0, or -1. */
static int holder_ask(wrap *w, char req) {
  if (g_holder_in < 0) return 0;
  char mark[96], line[OSB_HOLDER_REQ_LEN], path[128];
  snprintf(mark, sizeof mark, "\037OSB-H:" NONCE ":%ld\037", (long)g_holder_pid);
  snprintf(path, sizeof path, "%s/stderr", w->dir);
  long deadline = ms_now() + 10000;
  for (;;) {
    char buf[4096];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    if (memmem(buf, n, mark, strlen(mark))) break;
    if (ms_now() > deadline) return -1;
    usleep(2000);
  }
  size_t n = osb_proc_holder_request(line, 0, req, NONCE);
  return n ? write_all(g_holder_in, line, n) : -1;
}

/* Reads the wrapper's stdout until the exit marker (deadline 30 s); the command's status, or -1000. */
static int wrap_exit_code(wrap *w) {
  static const char mark[] = "\037OSB-EXIT:" NONCE ":";
  char buf[4096];
  size_t len = 0;
  long deadline = ms_now() + 30000;
  for (;;) {
    char *m = memmem(buf, len, mark, sizeof mark - 1);
    if (m && memchr(m + sizeof mark - 1, '\037', len - (size_t)(m - buf) - (sizeof mark - 1)))
      return atoi(m + sizeof mark - 1);
    long left = deadline - ms_now();
    struct pollfd pf = {.fd = w->out, .events = POLLIN};
    if (left <= 0 || poll(&pf, 1, (int)left) <= 0 || len == sizeof buf) return -1000;
    ssize_t k = read(w->out, buf + len, sizeof buf - len);
    if (k <= 0) return -1000;
    len += (size_t)k;
  }
}

/* Sends ack (ack_len bytes) and waits (deadline 30 s) for the wrapper's exit; its status, or -1. */
static int wrap_finish_with(wrap *w, const char *ack, size_t ack_len) {
  int rc = write_all(w->in, ack, ack_len) ? -1 : 0;
  long deadline = ms_now() + 30000;
  int st = 0;
  pid_t r = 0;
  while ((r = waitpid(w->pid, &st, WNOHANG)) == 0 && ms_now() < deadline) usleep(5000);
  if (r == 0) {
    kill(w->pid, SIGKILL);
    waitpid(w->pid, &st, 0);
    rc = -1;
  }
  close(w->in);
  close(w->out);
  return rc == 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int wrap_finish(wrap *w) { return wrap_finish_with(w, "OSB-ACK:" NONCE "\n", strlen(NONCE) + 9); }

static unsigned char *read_file(const char *dir, const char *name, size_t *n) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *p = malloc(len > 0 ? (size_t)len : 1);
  *n = fread(p, 1, (size_t)len, f);
  fclose(f);
  return p;
}

/* Prints what the wrapper wrote on stderr when the current test failed, then removes its directory. */
static void remove_dir(const char *dir) {
  char cmd[160];
  if (t_cur_failed) {
    snprintf(cmd, sizeof cmd, "sed 's/^/    stderr: /' '%s/stderr' 2>/dev/null | cat -v | head -20", dir);
    if (system(cmd) != 0) printf("  (no stderr)\n");
  }
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("  (could not remove %s)\n", dir);
}

/* Every byte value, single bytes, a lone newline, an empty frame, 2.5 MiB in frames of up to 1 MiB (the client's
 * maximum) and one larger than a pipe's buffer, and text frames between them (every byte value but NUL, a lone
 * newline, CR LF, 4 KiB): out.bin must be their exact concatenation, and cat must see EOF. */
static void case_exact(const char *shell, const char *path) {
  wrap w;
  CHECK(wrap_start(&w, shell, path, "cat > out.bin; echo done >> status") == 0);
  CHECK(holder_ask(&w, 'S') == 0);
  size_t total = 255 + 1 + 2 + 4096 + 256 + 1 + 1 + 0 + 5 * 512 * 1024 + 200000;
  unsigned char *all = malloc(total), *o = all;
  for (int i = 1; i < 256; i++) *o++ = (unsigned char)i;
  CHECK(tframe(w.in, all, 255) == 0);
  *o = '\n';
  CHECK(tframe(w.in, o++, 1) == 0);
  memcpy(o, "\r\n", 2);
  CHECK(tframe(w.in, o, 2) == 0);
  o += 2;
  for (int i = 0; i < 4096; i++) o[i] = (unsigned char)(1 + i % 255);
  CHECK(tframe(w.in, o, 4096) == 0);
  o += 4096;
  for (int i = 0; i < 256; i++) o[i] = (unsigned char)i;
  CHECK(frame(w.in, o, 256) == 0);
  o += 256;
  *o = 0;
  CHECK(frame(w.in, o++, 1) == 0);
  *o = '\n';
  CHECK(frame(w.in, o++, 1) == 0);
  CHECK(frame(w.in, o, 0) == 0);
  unsigned v = 12345;
  for (size_t i = 0; i < 5 * 512 * 1024 + 200000; i++) o[i] = (unsigned char)((v = v * 1103515245u + 12345u) >> 16);
  CHECK(frame(w.in, o, 1024 * 1024) == 0);
  CHECK(frame(w.in, o + 1024 * 1024, 1024 * 1024) == 0);
  CHECK(frame(w.in, o + 2 * 1024 * 1024, 512 * 1024 + 200000) == 0);
  CHECK(write_all(w.in, "E\n", 2) == 0);
  CHECK(holder_ask(&w, 'C') == 0);
  CHECK(wrap_exit_code(&w) == 0);
  CHECK(wrap_finish(&w) == 0);
  size_t n = 0;
  unsigned char *got = read_file(w.dir, "out.bin", &n);
  CHECK(got && n == total && memcmp(got, all, total) == 0);
  if (got && n != total) printf("  %s: %zu of %zu bytes\n", shell, n, total);
  size_t sn = 0;
  unsigned char *st = read_file(w.dir, "status", &sn);
  CHECK(st && sn == 5 && memcmp(st, "done\n", 5) == 0);
  free(st);
  free(got);
  free(all);
  remove_dir(w.dir);
}

/* A command that stops reading after 5 bytes while more frames follow (one of them being copied when the command
 * ends): its status arrives, the wrapper takes its ack (reading past what is left of the input) and exits 0. */
static void case_early_exit(const char *shell, const char *path) {
  wrap w;
  CHECK(wrap_start(&w, shell, path, "head -c 5 > out.bin; exit 3") == 0);
  CHECK(holder_ask(&w, 'S') == 0);
  CHECK(tframe(w.in, (const unsigned char *)"0123456789", 10) == 0);
  size_t big = 150000;
  unsigned char *b = malloc(big);
  memset(b, 'x', big);
  CHECK(frame(w.in, b, big) == 0);
  CHECK(write_all(w.in, "D100000\n", 8) == 0); /* a frame whose bytes never come */
  CHECK(wrap_exit_code(&w) == 3);
  CHECK(wrap_finish(&w) == 0);
  size_t n = 0;
  unsigned char *got = read_file(w.dir, "out.bin", &n);
  CHECK(got && n == 5 && memcmp(got, "01234", 5) == 0);
  free(got);
  free(b);
  remove_dir(w.dir);
}

#define GO "OSB-GO:" NONCE "\n"
#define ACK "\nOSB-ACK:" NONCE "\n" /* as the client sends it */
#define OTHER "fedcba9876543210fedcba9876543210"

/* The go line and the ack (read with one fixed-length read when nothing else came first, else line by line, each
 * line's end matched): the go line alone, after a partial line of an earlier connection, after a line and a go line
 * of another nonce, in two pieces; the ack as the client sends it, without its leading newline, after other lines,
 * at the end of a partial line. With and without stdin, the command in the wrapper's shell and in a subshell ("exec"
 * in its text): the command runs exactly once, its status arrives, the wrapper exits 0 at the ack. */
static void case_protocol(const char *shell, const char *path) {
  static const struct {
    const char *go;
    const char *ack;
  } v[] = {
      {GO, ACK},
      {"junk" GO, "OSB-ACK:" NONCE "\n"},
      {"hello\n" "OSB-GO:" OTHER "\n" GO, "garbage\n" ACK},
      {"OSB-GO:0123456789", "yyyOSB-ACK:" NONCE "\n"}, /* the go line's rest is sent below */
      {"\n\n\n" GO, "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n" ACK},
  };
  static const char *const cmd[] = {"echo ran >> ran; exit 4", "echo ran >> ran; exit 4 # exec"};
  for (int ignore = 0; ignore < 2; ignore++) {
    for (size_t c = 0; c < 2; c++) {
      for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        wrap w;
        char go[256];
        const char *g = ignore || i == 3 ? v[i].go : go_line(v[i].go, go, sizeof go);
        CHECK(wrap_spawn(&w, shell, path, cmd[c], ignore, g, strlen(g)) == 0);
        if (i == 3) CHECK(write_all(w.in, go_line("abcdef0123456789abcdef\n", go, sizeof go), ignore ? 23 : strlen(go)) == 0);
        int code = wrap_exit_code(&w);
        CHECK(code == 4);
        CHECK(wrap_finish_with(&w, v[i].ack, strlen(v[i].ack)) == 0);
        size_t n = 0;
        unsigned char *got = read_file(w.dir, "ran", &n);
        CHECK(got && n == 4 && memcmp(got, "ran\n", 4) == 0);
        if (code != 4 || !got || n != 4) printf("  %s ignore=%d command %zu variant %zu: exit %d\n", path, ignore, c, i, code);
        free(got);
        remove_dir(w.dir);
      }
    }
  }
}

/* The EXIT trap keeps the status in $1 and reads the ack into names of its own (_osb_*): a command that made
 * one-letter names readonly (c, p, x: the trap's names before) or gave them attributes still ends at the ack, with
 * its status, with and without stdin. */
static void case_readonly(const char *shell, const char *path) {
  for (int ignore = 0; ignore < 2; ignore++) {
    wrap w;
    char go[256];
    const char *g = ignore ? GO : go_line(GO, go, sizeof go);
    CHECK(wrap_spawn(&w, shell, path, "readonly c=1 p=2 x=3 y=4; echo ran >> ran; exit 4", ignore, g, strlen(g)) == 0);
    CHECK(wrap_exit_code(&w) == 4);
    CHECK(wrap_finish_with(&w, ACK, strlen(ACK)) == 0);
    size_t n = 0; /* no read of the trap failed on a readonly name (it would have ended without the ack) */
    unsigned char *err = read_file(w.dir, "stderr", &n);
    CHECK(err && !memmem(err, n, "readonly", 8));
    free(err);
    remove_dir(w.dir);
    /* the same names with attributes (integer, upper case), a name reference */
    CHECK(wrap_spawn(&w, shell, path, "declare -i c=7 x=0; declare -u p; y=1; declare -n s=y; echo ran >> ran; exit 5", ignore, g,
                     strlen(g)) == 0);
    CHECK(wrap_exit_code(&w) == 5);
    CHECK(wrap_finish_with(&w, ACK, strlen(ACK)) == 0);
    remove_dir(w.dir);
  }
}

/* The command's functions named like the builtins the trap and the wrapper's end run (printf, read, exit, kill,
 * wait, [, :, set, unset) change nothing: the markers come with the command's status, the wrapper ends at the ack,
 * with and without stdin. Seen failing before: an exit function gave status 0 for false, a printf function no
 * markers at all. */
static void case_functions(const char *shell, const char *path) {
  static const char *const cmd[] = {
      "exit() { echo bye; }; false",
      "printf() { :; }; read() { return 0; }; exit() { echo bye; return 3; }; kill() { :; }; wait() { :; }; [() { return 1; }; "
      ":() { return 1; }; set() { :; }; unset() { :; }; echo ran >> ran; sh -c 'exit 7'",
  };
  for (int ignore = 0; ignore < 2; ignore++) {
    for (size_t c = 0; c < 2; c++) {
      wrap w;
      char go[256];
      const char *g = ignore ? GO : go_line(GO, go, sizeof go);
      CHECK(wrap_spawn(&w, shell, path, cmd[c], ignore, g, strlen(g)) == 0);
      if (!ignore) CHECK(holder_ask(&w, 'S') == 0);
      int code = wrap_exit_code(&w);
      CHECK(code == (c ? 7 : 1));
      if (code != (c ? 7 : 1)) printf("  %s ignore=%d command %zu: exit %d\n", path, ignore, c, code);
      CHECK(wrap_finish_with(&w, ACK, strlen(ACK)) == 0);
      remove_dir(w.dir);
    }
  }
}

/* A wrapper started again by execd at a reconnect gets the ack where it waits for the go line (as the client sends
 * it, and after a partial line): it exits 0 and never runs the command nor prints its start marker. */
static void case_ack_first(const char *shell, const char *path) {
  static const char *const acks[] = {ACK, "junk" ACK, "xOSB-ACK:" NONCE "\n"};
  for (int ignore = 0; ignore < 2; ignore++) {
    for (size_t i = 0; i < sizeof acks / sizeof *acks; i++) {
      wrap w;
      CHECK(wrap_spawn(&w, shell, path, "echo ran >> ran", ignore, NULL, 0) == 0);
      CHECK(wrap_finish_with(&w, acks[i], strlen(acks[i])) == 0);
      size_t n = 0;
      unsigned char *got = read_file(w.dir, "ran", &n);
      CHECK(!got);
      free(got);
      unsigned char *err = read_file(w.dir, "stderr", &n);
      CHECK(err && n == 0);
      if (err && n) printf("  %s: stderr %.*s\n", path, (int)n, err);
      free(err);
      remove_dir(w.dir);
    }
  }
}

/* With stdinMode 'ignore' the wrapper has no decoder: neither its start nor its EXIT trap mention one. How the go
 * line and the ack are read. */
static void test_wrapper_ignore_text(void) {
  osb_proc_opts o;
  memset(&o, 0, sizeof o);
  o.command = "true";
  char err[200];
  for (int ignore = 0; ignore < 2; ignore++) {
    o.stdin_ignore = ignore;
    char *s = osb_proc_wrapper(&o, NONCE, err, sizeof err);
    CHECK(s != NULL);
    if (!s) continue;
    CHECK((strstr(s, "kill") == NULL) == ignore);
    CHECK((strstr(s, "dd bs=") == NULL) == ignore);
    /* "OSB-GO:" + 32 + "\n": its first byte with a deadline, the rest (in the same write) without: bash's read -t
     * makes three system calls per character */
    CHECK(strstr(s, "read -r -t 120 -N 1 l || exit 125; IFS= read -r -N 39 x;") != NULL);
    /* "\nOSB-ACK:" + 32, its last newline left: the same without stdin; with stdin every byte keeps the deadline */
    CHECK((strstr(s, "read -r -u $l -t 600 -N 1 _osb_a || exit 0; IFS= read -r -u $l -N 40 _osb_b;") != NULL) == ignore);
    CHECK((strstr(s, "read -r -u $l -t 600 -N 41 _osb_a") != NULL) == !ignore);
    free(s);
  }
}

/* Starts the holder script under bash with PATH = path (its decoders run dd from there); 0, or -1. */
static int holder_start(const char *path) {
  int in[2], out[2];
  if (pipe(in) || pipe(out)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    int nul = open("/dev/null", O_WRONLY);
    dup2(nul, 2);
    for (int fd = 3; fd < 64; fd++) close(fd);
    setenv("PATH", path, 1);
    execl("/bin/bash", "bash", "-c", osb_proc_holder_script(), (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  char buf[64];
  size_t len = 0;
  long deadline = ms_now() + 10000;
  while (!memchr(buf, '\n', len) && len < sizeof buf - 1) {
    struct pollfd pf = {.fd = out[0], .events = POLLIN};
    long left = deadline - ms_now();
    if (left <= 0 || poll(&pf, 1, (int)left) <= 0) break;
    ssize_t k = read(out[0], buf + len, sizeof buf - 1 - len);
    if (k <= 0) break;
    len += (size_t)k;
  }
  buf[len] = 0;
  close(out[0]);
  char want[48];
  snprintf(want, sizeof want, "OSB-HOLDER:%ld\n", (long)pid);
  if (strcmp(buf, want) != 0) {
    printf("  holder said %s\n", buf);
    close(in[1]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  g_holder_pid = pid;
  g_holder_in = in[1];
  return 0;
}

/* The end of its request pipe ends the holder; 0 when it exited 0 within 10 s. */
static int holder_stop(void) {
  close(g_holder_in);
  g_holder_in = -1;
  long deadline = ms_now() + 10000;
  int st = 0;
  pid_t r = 0;
  while ((r = waitpid(g_holder_pid, &st, WNOHANG)) == 0 && ms_now() < deadline) usleep(5000);
  if (r == 0) {
    kill(g_holder_pid, SIGKILL);
    waitpid(g_holder_pid, &st, 0);
  }
  g_holder_pid = 0;
  return r > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void each(void (*fn)(const char *, const char *)) {
  char bbpath[128];
  snprintf(bbpath, sizeof bbpath, "%s:/usr/bin:/bin", g_bbdir);
  fn("/bin/bash", "/usr/bin:/bin");
  if (*g_bbdir) fn("/bin/bash", bbpath);
}

static void test_wrapper_stdin_exact(void) { each(case_exact); }
static void test_wrapper_early_exit(void) { each(case_early_exit); }
static void test_wrapper_protocol(void) { each(case_protocol); }
static void test_wrapper_ack_first(void) { each(case_ack_first); }
static void test_wrapper_readonly(void) { each(case_readonly); }
static void test_wrapper_functions(void) { each(case_functions); }

/* The same cases with the sandbox's stdin holder (bash, its decoders' dd from coreutils, then busybox): the command's
 * stdin is held by it, the decoder it starts at "S" copies the frames exactly, "E" and "C" give EOF, a command that
 * exits early leaves nothing hanging (the wrapper's K), and the go line variants run the command once. */
static void holder_cases(const char *shell, const char *path) {
  CHECK(holder_start(path) == 0);
  if (g_holder_in < 0) return;
  /* what other code in the sandbox may write into the holder's pipe first: a line that is no record (the holder
   * realigns at its newline), records that are no request (a glob, a nonce it does not hold): all ignored */
  char rec[OSB_HOLDER_REQ_LEN + 1];
  CHECK(write_all(g_holder_in, "garbage\n", 8) == 0);
  snprintf(rec, sizeof rec, "%-*s\n", OSB_HOLDER_REQ_LEN - 1, "X *");
  CHECK(write_all(g_holder_in, rec, OSB_HOLDER_REQ_LEN) == 0);
  CHECK(osb_proc_holder_request(rec, 0, 'K', "ffffffffffffffffffffffffffffffff") == OSB_HOLDER_REQ_LEN);
  CHECK(write_all(g_holder_in, rec, OSB_HOLDER_REQ_LEN) == 0);
  /* a record in two writes: the holder waits (with its deadline) for a record's first byte only, then reads the
   * rest without one; the next records stay aligned (the wrappers below see its answer) */
  CHECK(write_all(g_holder_in, rec, 1) == 0);
  usleep(50000);
  CHECK(write_all(g_holder_in, rec + 1, OSB_HOLDER_REQ_LEN - 1) == 0);
  case_exact(shell, path);
  case_early_exit(shell, path);
  case_protocol(shell, path);
  case_functions(shell, path);
  CHECK(holder_stop() == 0);
}
static void test_wrapper_holder(void) { each(holder_cases); }

/* A holder that is gone (its pid names no process): the wrapper falls back to its own decoder at once. */
static void gone_cases(const char *shell, const char *path) {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  g_holder_pid = dead;
  case_exact(shell, path);
  case_early_exit(shell, path);
  g_holder_pid = 0;
}
static void test_wrapper_holder_gone(void) { each(gone_cases); }

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  /* busybox's applets the wrapper uses, ahead of coreutils on PATH (bash itself stays: execd runs it) */
  const char *bb = access("/usr/bin/busybox", X_OK) == 0 ? "/usr/bin/busybox" : access("/bin/busybox", X_OK) == 0 ? "/bin/busybox" : NULL;
  if (bb) {
    snprintf(g_bbdir, sizeof g_bbdir, "/tmp/osb-busybox-XXXXXX");
    if (!mkdtemp(g_bbdir)) {
      *g_bbdir = 0;
    } else {
      static const char *const applets[] = {"cat", "dd", "head", "sed", "sleep"};
      for (size_t i = 0; i < sizeof applets / sizeof *applets; i++) {
        char l[128];
        snprintf(l, sizeof l, "%s/%s", g_bbdir, applets[i]);
        if (symlink(bb, l) != 0) printf("  cannot link %s\n", l);
      }
    }
  } else {
    printf("  busybox is not installed (scripts/setup.sh installs busybox-static): the minimal-image cases fail\n");
    t_failed++;
  }
  RUN(test_wrapper_stdin_exact);
  RUN(test_wrapper_early_exit);
  RUN(test_wrapper_protocol);
  RUN(test_wrapper_ack_first);
  RUN(test_wrapper_readonly);
  RUN(test_wrapper_functions);
  RUN(test_wrapper_ignore_text);
  RUN(test_wrapper_holder);
  RUN(test_wrapper_holder_gone);
  t_cur_failed = 0;
  if (*g_bbdir) remove_dir(g_bbdir);
  return t_summary();
}
