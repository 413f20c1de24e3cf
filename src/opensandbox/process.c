/* The process table: execd PTY sessions in pipe mode driven by a wrapper script (see process.h). */
#define _GNU_SOURCE
#include "process.h"
#include "conn.h"
#include "ptyframe.h"
#include "lifecycle.h"
#include "core/batch.h"
#include "core/buf.h"
#include "core/http.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#define DRAIN_MS 2000        /* after the ack: wait this long for execd's close before deleting the session */
/* After a kill (or any end while the socket is open): wait this long for execd's exit and close frames before
 * closing. execd writes them once the process is gone; a socket the client already closed turns those writes into
 * EPIPE, and the SIGPIPE execd receives is relayed to its foreground command (docs/opensandbox-protocol.md §5b). */
#define LINGER_MS 2000
#define RECONNECT_BUDGET_MS 10000 /* keep reconnecting this long after the connection was lost */
#define RECONNECT_BASE_MS 100      /* backoff: doubles up to RECONNECT_MAX_MS */
#define RECONNECT_MAX_MS 1600
/* A connection counts as re-established (the window starts afresh at its loss) only once it delivered output or
 * stayed up this long: a socket that is accepted and then dropped (or fed an invalid frame) at once must not
 * renew the window forever. */
#define RECONNECT_STABLE_MS 3000
#define HIGH_WATER (8L * 1024 * 1024) /* output handed to the consumer and not yet consumed: pause reading above */
#define LOW_WATER (1L * 1024 * 1024)  /* … and resume below */
#define KILLED_EXIT 137
#define TIMEOUT_EXIT 124

static long g_count;  /* atomic: processes alive in the table */
static long g_paused; /* atomic: processes whose socket is paused by flow control */
static long g_objects; /* atomic: process objects allocated and not yet freed (the last reference released) */
long osb_proc_count(void) { return __atomic_load_n(&g_count, __ATOMIC_RELAXED); }
long osb_proc_object_count(void) { return __atomic_load_n(&g_objects, __ATOMIC_RELAXED); }
long osb_proc_paused_count(void) { return __atomic_load_n(&g_paused, __ATOMIC_RELAXED); }
static long g_holders_alive; /* atomic: stdin holders' processes in the table */
long osb_proc_holder_count(void) { return __atomic_load_n(&g_holders_alive, __ATOMIC_RELAXED); }

/* What waits to go to the wrapper's stdin: our own protocol lines (go, ack: a whole execd message), user bytes and
 * the end of input. User bytes and the end are framed at flush time, so writes queued together (an LSP header and
 * its body, a write and closeStdin) travel as one frame in one message. */
enum { M_LINE, M_DATA, M_END };
typedef struct stdin_msg {
  struct stdin_msg *next;
  int kind;
  osb_proc_done_fn done; /* NULL for our own lines (go, ack) and all but the last piece of a write */
  void *ud;
  size_t n;
  char data[]; /* M_LINE: 0x00 + bytes; M_DATA: the user's bytes; M_END: nothing */
} stdin_msg;

typedef struct waiter {
  struct waiter *next;
  osb_proc_done_fn done;
  void *ud;
} waiter;

enum { S_INIT = 0, S_STARTING, S_RUNNING, S_SETTLED };

struct osb_proc {
  osb_active active;
  int refs; /* atomic: caller + engine side + queued events */
  osb_engine *e;
  osb_ws *ws;
  /* configuration (immutable) */
  osb_conn execd;  /* base URL, HTTP header lines, secrets; timeout_ms = per HTTP request */
  char *ws_base;
  char **hdr_kv;   /* name, value pairs for the WebSocket handshake */
  long timeout_ms;
  char *body;      /* POST /pty body (spawn) */
  int attach;
  uint64_t since;
  char sid[128], nonce[33], pid[176];
  osb_proc_callbacks cb;
  void *ud;
  /* engine-thread state */
  int state, engine_side, cleaning;
  int go_pending;       /* send the go line at "connected" */
  int ended;            /* the GET before this (re)connection said running:false: the wrapper had ended */
  int connected;
  osb_ws_conn *conn;
  struct ws_link *link; /* the ud of conn */
  unsigned gen;         /* connection generation: events of older connections are ignored */
  osb_http_req *req;    /* POST / GET status / DELETE (cleanup) */
  osb_http_req *del;    /* DELETE for kill/timeout */
  uint64_t received;    /* bytes of the merged output stream seen */
  osb_pty_markers mk;   /* the wrapper's markers: patterns, held-back prefixes, what arrived */
  osb_tail tail[2];
  osb_batch batch;
  uv_timer_t timeout_timer, retry_timer;
  int reconnects, takeover;
  uint64_t retry_since; /* engine ms when the connection was first lost; 0 = not reconnecting */
  uint64_t connected_at, received_at_connect; /* when the current connection was confirmed; bytes seen then */
  stdin_msg *qhead, *qtail;
  waiter *kill_waiters;
  int kill_requested, timed_out, draining;
  int lingering;        /* cleanup waits for execd's close of the socket (LINGER_MS, timeout_timer) */
  int start_pending;    /* reattach: on_started waits for the connected frame (the replay comes before it) */
  int aborting;         /* engine shutdown: close at once */
  int stdin_closed; /* closeStdin was called: the end-of-input frame is queued or sent */
  size_t queued;    /* user stdin bytes queued, not yet sent */
  int qwaiting;     /* queued user writes whose done waits for their sending (the queue was over its maximum) */
  int unacked;      /* stdin frames sent on this connection whose frame-written marker has not arrived */
  int flush_posted; /* a flush of the stdin queue is posted to the engine */
  char error_text[512];
  const char *error_code; /* static string: what kind of failure error_text is (see osb_proc_exit) */
  char last_close[200]; /* why the last WebSocket ended (for error texts) */
  long inflight;        /* atomic: bytes given to on_output and not yet reported consumed */
  int paused;           /* engine thread: the socket is paused (flow control) */
  int paused_flag;      /* atomic copy of paused for osb_proc_consumed */
  int resume_posted;    /* atomic: a resume job is queued */
  /* the stdin holder (see HOLDER_SCRIPT) */
  int is_holder;        /* this process is a holder: internal, not counted */
  int stdin_pipe;       /* spawned with stdin: its go line names the holder (0: none) */
  size_t frame_max;     /* user bytes per stdin frame */
  struct holder *holder; /* the holder this client asks about this process (a reference), or NULL */
  struct osb_proc *hnext; /* in the holder's list of processes whose go line waits for it */
  int go_waiting;       /* the go line waits for the holder to be ready (or gone) */
  int holder_user;      /* counted in holder->users */
  long go_holder;       /* the holder pid its go line named, 0: none */
  int run_seen;         /* the run marker was seen (checked against go_holder once) */
  int s_need, s_sent;   /* a stdin frame was sent / the holder was asked to start the decoder */
  int c_need, c_sent;   /* the end of input was sent / the holder was asked to close its writer */
  int k_need, k_sent;   /* ended without the wrapper's own K / the holder was asked to forget it */
};

/* What a WebSocket connection's callbacks get: the process and the connection's generation. */
typedef struct ws_link {
  osb_proc *p;
  unsigned gen;
} ws_link;

/* ---------------------------------------------------------------- helpers */

static void drop_conn(osb_proc *p) {
  if (p->conn) osb_ws_conn_release(p->conn); /* no callback of it runs after this */
  free(p->link);
  p->conn = NULL;
  p->link = NULL;
  p->connected = 0;
}

static void holder_unref(struct holder *h);

static void proc_free(osb_proc *p) {
  if (p->holder) holder_unref(p->holder);
  free(p->ws_base);
  osb_strv_free(p->hdr_kv, 2 * p->execd.nheaders);
  osb_conn_clear(&p->execd);
  free(p->body);
  osb_batch_free(&p->batch);
  for (int i = 0; i < 2; i++) osb_tail_free(&p->tail[i]);
  while (p->qhead) {
    stdin_msg *m = p->qhead;
    p->qhead = m->next;
    free(m);
  }
  while (p->kill_waiters) {
    waiter *w = p->kill_waiters;
    p->kill_waiters = w->next;
    free(w);
  }
  if (!p->is_holder) __atomic_sub_fetch(&g_objects, 1, __ATOMIC_RELAXED);
  free(p);
}

static void proc_ref(osb_proc *p) { __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED); }
void osb_proc_release(osb_proc *p) {
  if (p && __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) == 0) proc_free(p);
}

/* Appends s single-quoted for the shell. */
static int shq(osb_buf *b, const char *s) {
  if (osb_buf_append(b, "'", 1)) return -1;
  for (; *s; s++) {
    if (*s == '\'') {
      if (osb_buf_append_str(b, "'\\''")) return -1;
    } else if (osb_buf_append(b, s, 1)) {
      return -1;
    }
  }
  return osb_buf_append(b, "'", 1);
}

static int is_ident(const char *s) {
  if (!*s || !(isalpha((unsigned char)*s) || *s == '_')) return 0;
  for (; *s; s++)
    if (!(isalnum((unsigned char)*s) || *s == '_')) return 0;
  return 1;
}

/* The command's stdin (see process.h): user bytes arrive as frames "D<n>\n" + n raw bytes and end of input as "E\n";
 * a small frame without NUL bytes (an LSP message, a line for a REPL) comes as "T<n>\n" + n bytes instead and is
 * read and written by the shell itself (read -N of bash with LC_ALL=C: n bytes; no dd started);
 * a decoder (a process substitution of the wrapper's bash: a pipe, no FIFO to create and remove) writes them into
 * the command's stdin and exits (closing it) at "E". The decoder's shell reads a frame's header line (a shell reads a
 * pipe byte by byte, so nothing past the line is consumed) and dd (coreutils or busybox) copies the frame's bytes in
 * blocks: with iflag=fullblock and one block of exactly n bytes it reads no byte past the frame (head -c would do for
 * GNU head, but busybox's head reads ahead through stdio). The wrapper's own protocol lines after the command (ack)
 * thus stay unread; the decoder is stopped before the markers (its TERM trap stops a dd in the middle of a frame
 * too). A TERM that arrives just before the shell enters a blocking read(2) is only noted, not acted on, until
 * that read returns: so the header read has a 1 s timeout (partial input is kept, bash saves it on a timeout) and
 * a lost TERM costs at most that second, never a hang. dd's errors (one without iflag=fullblock or status=none)
 * reach the command's stderr. $! of a process substitution needs bash >= 4.4. After each frame the decoder prints a
 * frame-written marker on stderr (\037OSB-W:<nonce>\037, stripped by the client): the client's flow control keeps
 * at most STDIN_UNACKED frames unacknowledged and coalesces what is queued meanwhile. */
/* The decoder's loop: frames from fd 3, the bytes to stdout, written markers (nonce $n) to stderr, dd's pid in $h. */
#define DECODER_LOOP                                                                                      \
  "    p=; while :; do IFS= read -r -u 3 -t 1 l; r=$?; [ $r -gt 128 ] && { p=$p$l; continue; }\n"          \
  "      l=$p$l; p=; [ $r -eq 0 ] || exit 0; case $l in\n"                                              \
  "      D0|T0) ;;\n"                                                                                   \
  "      T*) IFS= read -r -u 3 -N \"${l#T}\" t || exit 0; printf %s \"$t\"; printf '\\037OSB-W:%s\\037' \"$n\" >&2;;\n" \
  "      D*) dd bs=\"${l#D}\" count=1 iflag=fullblock status=none <&3 & h=$!; wait \"$h\" || exit 0; h=;\n"  \
  "        printf '\\037OSB-W:%s\\037' \"$n\" >&2;;\n"                                                          \
  "      E) exit 0;; esac; done"

#define STDIN_DECODER                                                                                   \
  "  exec 3<&0\n"                                                                                     \
  "  exec 4< <( h=; LC_ALL=C; trap '[ -n \"$h\" ] && kill \"$h\" 2>/dev/null; exit 0' TERM\n"            \
  DECODER_LOOP " )\n"                                                                                 \
  "  d=$!\n"

/* The sandbox's stdin holder (one per client and execd, see docs/processes.md): a long-lived bash that holds a writer
 * of each process's stdin pipe, so that no decoder has to be forked until the process's first stdin frame. Its
 * requests come on its stdin: from the wrappers (written into /proc/<holder pid>/fd/0) "O <nonce> <wrapper pid>
 * <fd of the command's stdin> <fd of the wrapper's execd stdin>" (open a writer of that pipe, answer "ok" into it)
 * and "K <nonce>" (the command ended: kill its decoder, close the writer); from the client "S <nonce>" (start the
 * decoder: it reads the frames from the wrapper's execd stdin and writes the bytes into the command's stdin, as the
 * wrapper's own decoder does), "C <nonce>" (closeStdin: close the writer; the decoder closes its own at "E") and
 * "F <holder pid> <request>" (a request for another client's holder, passed on); from a decoder that ends by itself
 * (at "E", or its wrapper gone) "X <nonce>", so that a later K never kills a process group whose id was reused.
 * Each request is a record of OSB_HOLDER_REQ_LEN bytes (padded with spaces, then a newline), written with one
 * write(2): the holder waits for a record's first byte with its hour's deadline and reads the rest with one read(2)
 * without one (read -N; a line read reads a pipe byte by byte, and bash's read -t makes a pselect and two
 * sigprocmask calls per character, even from what one read(2) already took: 128 system calls a record, ~150 us
 * of CPU against ~8 us for read -N alone on a VM) and checks its fields with patterns (a regular
 * expression is compiled at each use), globbing off. A chunk that is not one
 * record (bytes that some code in the sandbox wrote there) is dropped up to its last newline, which realigns the
 * reads; records that match no request are
 * ignored: other code in the sandbox can write here, with no more rights than it has already. After an hour
 * without requests it forgets the wrappers that are gone and exits when none is left. Decoders run as jobs (their
 * own process group), so a K kills one in the middle of a dd as well. It first tries what the wrappers will do (a
 * here-string that is a pipe, reopened through /proc) and says pid 0 when that fails: no wrapper is given it then. */
#define HOLDER_REQ_TEXT 63 /* OSB_HOLDER_REQ_LEN - 1: the text of a request record, padded */
#define HOLDER_STR_(x) #x
#define HOLDER_STR(x) HOLDER_STR_(x)
#define HOLDER_REQ_TEXT_S HOLDER_STR(HOLDER_REQ_TEXT)
_Static_assert(HOLDER_REQ_TEXT + 1 == OSB_HOLDER_REQ_LEN, "a request record is its padded text and a newline");
#define HOLDER_SCRIPT                                                                                   \
  "set -mf; trap '' PIPE; declare -A f w l d\n"                                                         \
  "g() { local x=${f[$1]} k=${d[$1]}; [ -n \"$x\" ] && exec {x}>&-; [ -n \"$k\" ] && { kill -KILL -- -$k; wait $k; } 2>/dev/null\n" \
  "  unset \"f[$1]\" \"w[$1]\" \"l[$1]\" \"d[$1]\"; }\n"                                             \
  "exec {t}<<<x && [[ -p /dev/fd/$t ]] && exec {u}<>/proc/$BASHPID/fd/$t || { printf 'OSB-HOLDER:0\\n'; exit 0; }\n" \
  "exec {t}<&- {u}>&-; me=$BASHPID; printf 'OSB-HOLDER:%s\\n' $me\n"                              \
  "p=; while :; do IFS= read -r -t 3600 -N 1 a; r=$?\n"                                               \
  "  if [ $r -gt 128 ]; then for k in \"${!w[@]}\"; do [ -e /proc/${w[$k]} ] || g $k; done; [ ${#w[@]} -eq 0 ] && exit 0; continue; fi\n" \
  "  [ $r -eq 0 ] || exit 0\n"                                                                        \
  "  [ ${#p} -lt " HOLDER_REQ_TEXT_S " ] && { IFS= read -r -N $((" HOLDER_REQ_TEXT_S "-${#p})) b || exit 0; a=$a$b; }\n" \
  "  a=$p$a; p=; case $a in *$'\\n'?*) p=${a##*$'\\n'}; continue;; *$'\\n'*$'\\n') continue;; *$'\\n') ;; *) continue;; esac\n" \
  "  set -- $a; case $#$1 in 5O) [[ ${#2} -eq 32 && $2 != *[!0-9a-f]* && $3$4$5 != *[!0-9]* ]];;\n"      \
  "    2[SCKX]) [[ ${#2} -eq 32 && $2 != *[!0-9a-f]* ]];; 4F) [[ $2 != *[!0-9]* && $3 == [SCK] && ${#4} -eq 32 && $4 != *[!0-9a-f]* ]];;\n" \
  "    *) false;; esac || continue\n"                                                                   \
  "  case $1 in\n"                                                                                      \
  "  O) [ -z \"${w[$2]}\" ] || continue; exec {x}<>\"/proc/$3/fd/$4\" || continue\n"                 \
  "    f[$2]=$x w[$2]=$3 l[$2]=$5; printf 'ok\\n' >&$x;;\n"                                             \
  "  S) x=${f[$2]}; [ -n \"$x\" ] && [ -z \"${d[$2]}\" ] || continue\n"                               \
  "    ( n=$2; trap '{ printf \"%-" HOLDER_REQ_TEXT_S "s\\n\" \"X $n\" >\"/proc/$me/fd/0\"; } 2>/dev/null' EXIT\n"                  \
  "      for k in \"${f[@]}\"; do [ -n \"$k\" ] && [ \"$k\" != \"$x\" ] && exec {k}>&-; done\n"       \
  "      exec 3<\"/proc/${w[$n]}/fd/${l[$n]}\" 2>>\"/proc/${w[$n]}/fd/2\" >&$x {x}>&- </dev/null || exit 0\n" \
  "      h=; LC_ALL=C\n"                                                                                \
  DECODER_LOOP " ) &\n"                                                                               \
  "    d[$2]=$!;;\n"                                                                                   \
  "  C) x=${f[$2]}; [ -n \"$x\" ] && exec {x}>&-; [ -n \"${w[$2]}\" ] && f[$2]=;;\n"                    \
  "  K) g $2;;\n"                                                                                      \
  "  X) [ -n \"${d[$2]}\" ] && { wait \"${d[$2]}\"; d[$2]=; } 2>/dev/null;;\n"                       \
  "  F) { printf '%-" HOLDER_REQ_TEXT_S "s\\n' \"$3 $4\" >\"/proc/$2/fd/0\"; } 2>/dev/null;;\n"                         \
  "  esac\n"                                                                                           \
  "done\n"

const char *osb_proc_holder_script(void) { return HOLDER_SCRIPT; }

size_t osb_proc_holder_request(char out[OSB_HOLDER_REQ_LEN], long forward_to, char req, const char *nonce) {
  char text[OSB_HOLDER_REQ_LEN + 1];
  int n = forward_to ? snprintf(text, sizeof text, "F %ld %c %s", forward_to, req, nonce)
                     : snprintf(text, sizeof text, "%c %s", req, nonce);
  if (n < 0 || n > HOLDER_REQ_TEXT) return 0;
  memset(out, ' ', OSB_HOLDER_REQ_LEN - 1);
  memcpy(out, text, (size_t)n);
  out[OSB_HOLDER_REQ_LEN - 1] = '\n';
  return OSB_HOLDER_REQ_LEN;
}

/* Whether s may run "." (source a script): a "." word where a command starts. */
static int dot_command(const char *s) {
  for (const char *q = s; (q = strchr(q, '.')) != NULL; q++) {
    if (q[1] && q[1] != ' ' && q[1] != '\t') continue;
    const char *k = q;
    while (k > s && (k[-1] == ' ' || k[-1] == '\t')) k--;
    if (k == s || strchr(";&|({\n!", k[-1])) return 1;
  }
  return 0;
}

char *osb_proc_wrapper(const osb_proc_opts *o, const char *nonce, char *err, size_t errlen) {
  if (!o->command || !*o->command) {
    snprintf(err, errlen, "command must be a non-empty string");
    return NULL;
  }
  for (size_t i = 0; i < o->nenv; i++) {
    if (!is_ident(o->env_kv[2 * i])) {
      snprintf(err, errlen, "environment variable name %.64s is not a valid shell identifier", o->env_kv[2 * i]);
      return NULL;
    }
  }
  long ack = o->ack_wait_s > 0 ? o->ack_wait_s : 600;
  /* The command runs in the wrapper's own shell (eval, like bash -c runs it: no fork of its own; a fork of bash is
   * ~3.5 ms of CPU, more than the rest of the wrapper) and an EXIT trap prints the markers and waits for the ack.
   * A command that could replace the shell (exec) or the trap (trap), or run code that could (source, ".", eval),
   * or (with stdin) wait for all children (wait: the decoder is one of the shell's), runs in a subshell of the
   * wrapper instead, as before (a word test on the command string: false positives only
   * cost the fork). */
  int sub = strstr(o->command, "exec") || strstr(o->command, "trap") || strstr(o->command, "source") ||
            strstr(o->command, "eval") || dot_command(o->command) ||
            (!o->stdin_ignore && strstr(o->command, "wait")); /* a bare wait would wait for the decoder too */
  osb_buf b;
  osb_buf_init(&b);
  int bad = 0;
  /* The go line and the ack have a fixed length (go_len, ack_len): one read -N (bash reads that many bytes in one
   * read(2); a line read reads a pipe byte by byte) takes them when nothing else came first. The go line's first
   * byte waits with the deadline, its rest (the client sends the go line, and the holder's pid after it, in one
   * frame: one write into the pipe) is read without one, as is the holder's pid (read -t's cost per character: see
   * HOLDER_SCRIPT). Anything else (a line
   * left by an earlier client, user stdin the decoder did not consume before the ack, an ack where a go line was
   * expected) falls back to the line loop, the fixed read's last partial line ($p) joined to the next line: the
   * same lines are matched as by the loop alone. The client's ack is "\nOSB-ACK:<nonce>\n": the fixed read takes
   * all but its last newline. */
  size_t go_len = strlen(nonce) + 8, ack_len = strlen(nonce) + 9;
  bad |= osb_buf_appendf(&b,
                         "n=%s\n"
                         "IFS= read -r -t 120 -N 1 l || exit 125; IFS= read -r -N %zu x; l=$l$x\n"
                         "case $l in \"OSB-GO:$n\n\") ;; *) eval 'p=${l##*\n}\n"
                         "  while :; do IFS= read -r -t 120 l || exit 125; l=$p$l; p=; case $l in *\"OSB-GO:$n\") break;; *\"OSB-ACK:$n\") exit 0;; esac; done';; esac\n"
                         "%s",
                         nonce, go_len - 1, o->stdin_ignore ? "printf '\\037OSB-RUN:%s\\037' \"$n\" >&2\n  d=\n" : "");
  if (!o->stdin_ignore) {
    /* With stdin, a line after the go line names the sandbox's stdin holder (its pid; 0: none). The command's stdin
     * is then a pipe made without a fork (a one-line here-string: a pipe in bash >= 5.1), of which the holder opens
     * a writer through /proc (paths under /proc/<pid>, never /proc/self: Docker's default AppArmor profile refuses
     * writes under non-numeric /proc entries) and says "ok" into it; the wrapper drops its own writer, and no
     * decoder runs until the client asks the holder for one (S). The holder marker tells the client. Anything
     * that fails (bash < 5.1: the here-string is a file; /proc refused; no answer within 5 s) falls back to the
     * wrapper's own decoder, as without a holder. That branch is the text of an eval: bash parses a compound
     * command whole before it runs any of it, and parsing the decoder cost every wrapper ~0.2 ms of CPU (a third of
     * what stdin adds to a process of `true`), taken or not. */
    static const char fallback[] =
        "trap - PIPE; q=; [ -n \"$w\" ] && exec {w}>&-; [ -n \"$r\" ] && exec {r}<&-; [ -n \"$l\" ] && exec {l}<&-\n"
        "  printf '\\037OSB-RUN:%s\\037' \"$n\" >&2\n" STDIN_DECODER;
    bad |= osb_buf_append_str(
        &b,
        "IFS= read -r q || exit 125\n"
        "l= r= w=\n"
        "if [ \"$q\" != 0 ] && exec {l}<&0 {r}<<<x && [[ -p /dev/fd/$r ]] && IFS= read -r -u $r x && exec {w}<>/proc/$$/fd/$r &&"
        " trap '' PIPE && { printf '%-" HOLDER_REQ_TEXT_S "s\\n' \"O $n $$ $r $l\" >/proc/$q/fd/0; } 2>/dev/null &&"
        " IFS= read -r -t 5 -u $r x && [ \"$x\" = ok ]; then\n"
        "  trap - PIPE; exec {w}>&-; d=; printf '\\037OSB-H:%s:%s\\037\\037OSB-RUN:%s\\037' \"$n\" \"$q\" \"$n\" >&2\n"
        "else eval ");
    bad |= shq(&b, fallback);
    bad |= osb_buf_append_str(&b, "\nfi\n");
  }
  if (sub) {
    bad |= osb_buf_append_str(&b, "(\n");
    bad |= osb_buf_append_str(&b, o->stdin_ignore ? "  exec </dev/null; unset -v n d l p x\n"
                                                  : "  if [ -n \"$q\" ]; then exec <&$r {r}<&- {l}<&-; else exec <&4 3<&- 4<&-; fi\n"
                                                    "  unset -v n d l p q r w x\n");
  } else {
    /* the wrapper's stdin (for the ack) on a descriptor >= 10, the command's stdin on 0; the trap gets the decoder's
     * pid (or the holder's) and that descriptor expanded now, so the command's variables cannot change them. At the
     * end, with a holder: ask it to kill the decoder and close its writer (K), and read the command's stdin to its
     * end: at EOF no writer is left (bounded: 5 s without a byte). With the wrapper's decoder: stop it. */
    if (o->stdin_ignore) {
      bad |= osb_buf_append_str(&b, "exec {l}<&0 </dev/null\n");
    } else {
      bad |= osb_buf_append_str(
          &b,
          "if [ -n \"$q\" ]; then exec <&$r {r}<&-\n"
          "  s=\"trap '' PIPE; { printf '%-" HOLDER_REQ_TEXT_S "s\\\\n' 'K $n' >/proc/$q/fd/0; } 2>/dev/null; "
          "until IFS= read -r -t 5 -N 65536 _osb_a; [ \\$? -ne 0 ]; do :; done; exec 0<&-; \"\n"
          "else exec {l}<&3 <&4 3<&- 4<&-\n"
          "  s=\"kill $d 2>/dev/null; until IFS= read -r -t 0.05 -N 65536 _osb_a; [ \\$? -eq 1 ]; "
          "do kill $d 2>/dev/null; done; exec 0<&-; wait $d 2>/dev/null; \"; fi\n");
    }
    /* The ack's read (inside the trap's double quotes; read -t's cost per character: see HOLDER_SCRIPT): with
     * stdinMode 'ignore' nothing but the ack (or a
     * reattaching client's go line, longer) ever arrives here, each in one write, so only its first byte waits with
     * a deadline and the rest, in the pipe already, is read without one. With stdin, frames the decoder left unread
     * may come first (fewer bytes than an ack, and no more after them if the client is gone): every byte keeps the
     * deadline there. The trap runs after the command, in its shell: it keeps the exit status in $1 and reads into
     * names of its own (_osb_*), which no command sets by chance. A command that made one of its names readonly or
     * gave it an attribute (declare -i, -u, a name reference) would turn the ack into something else: the wrapper
     * would end without it (the exit race) or wait out its deadline. The command's functions are its shell's too: one
     * named like a builtin the trap runs (printf, read, exit; kill, wait, [ and : with stdin) would replace it (a
     * printf that prints nothing: no markers, a process that never ends). The trap removes them first, in POSIX mode
     * (the status kept in POSIXLY_CORRECT, whose assignment turns it on): there set and unset, special builtins,
     * come before functions of the same name; unsetting the variable turns it off again. */
    char ackread[160];
    if (o->stdin_ignore)
      snprintf(ackread, sizeof ackread, "IFS= read -r -u $l -t %ld -N 1 _osb_a || exit 0; IFS= read -r -u $l -N %zu _osb_b; _osb_a=\\$_osb_a\\$_osb_b;",
               ack, ack_len - 1);
    else
      snprintf(ackread, sizeof ackread, "IFS= read -r -u $l -t %ld -N %zu _osb_a || exit 0;", ack, ack_len);
    /* with stdinMode 'ignore' (no decoder) the trap has no decoder to stop: less for bash to parse and run */
    bad |= osb_buf_appendf(&b,
                           "trap \"{ POSIXLY_CORRECT=\\$?; set -- \\$POSIXLY_CORRECT; unset -f printf read exit%s; unset POSIXLY_CORRECT; set +eux; } 2>&-; %s"
                           "printf '\\\\037OSB-ERR:%s\\\\037' >&2; printf '\\\\037OSB-EXIT:%s:%%s\\\\037' \\\"\\$1\\\"; "
                           "%s case \\$_osb_a in *OSB-ACK:%s|*OSB-ACK:%s\\$'\\\\n'*) exit 0;; esac; _osb_p=\\${_osb_a##*\\$'\\\\n'}; "
                           "while IFS= read -r -u $l -t %ld _osb_a; do case \\$_osb_p\\$_osb_a in *OSB-ACK:%s) exit 0;; esac; _osb_p=; done; exit 0\" EXIT\n"
                           "unset -v n d l p x%s\n",
                           o->stdin_ignore ? "" : " kill wait [ :", o->stdin_ignore ? "" : "${s}", nonce, nonce, ackread, nonce, nonce, ack, nonce,
                           o->stdin_ignore ? "" : " q r w s");
  }
  /* then its cwd (before its environment: "~" is execd's HOME, not one the call sets) and environment */
  if (o->cwd && *o->cwd) { /* "~" and "~/x": the shell's HOME (execd's), as execd expands a command's cwd */
    bad |= osb_buf_append_str(&b, "  cd -- ");
    if (strcmp(o->cwd, "~") == 0) {
      bad |= osb_buf_append_str(&b, "~");
    } else if (strncmp(o->cwd, "~/", 2) == 0) {
      bad |= osb_buf_append_str(&b, "~/");
      if (o->cwd[2]) bad |= shq(&b, o->cwd + 2);
    } else {
      bad |= shq(&b, o->cwd);
    }
    bad |= osb_buf_append_str(&b, " || exit 1\n");
  }
  for (size_t i = 0; i < o->nenv; i++) {
    bad |= osb_buf_appendf(&b, "  export %s=", o->env_kv[2 * i]);
    bad |= shq(&b, o->env_kv[2 * i + 1] ? o->env_kv[2 * i + 1] : "");
    bad |= osb_buf_append_str(&b, "\n");
  }
  bad |= osb_buf_append_str(&b, "  eval ");
  bad |= shq(&b, o->command);
  bad |= osb_buf_append_str(&b, "\n");
  /* Without a subshell the script ends with the command's eval: its status is the shell's, and the EXIT trap prints
   * the markers (no exit of ours after it: a function of the command named exit would run instead, with its own
   * status, and it would show in a set -x trace). */
  if (sub) {
    bad |= osb_buf_appendf(&b,
                           ")\n"
                           "c=$?\n"
                           "[ -n \"$d\" ] && { exec 3<&-; kill \"$d\" 2>/dev/null; until IFS= read -r -u 4 -t 0.05 -N 65536 l; [ $? -eq 1 ]; do\n"
                           "  kill \"$d\" 2>/dev/null; done; exec 4<&-; wait \"$d\" 2>/dev/null; }\n"
                           "[ -n \"$q\" ] && { trap '' PIPE; { printf '%%-" HOLDER_REQ_TEXT_S "s\\n' \"K $n\" >/proc/$q/fd/0; } 2>/dev/null\n"
                           "  until IFS= read -r -u $r -t 5 -N 65536 x; [ $? -ne 0 ]; do :; done; exec {r}<&- {l}<&-; }\n"
                           "printf '\\037OSB-ERR:%%s\\037' \"$n\" >&2\n"
                           "printf '\\037OSB-EXIT:%%s:%%s\\037' \"$n\" \"$c\"\n"
                           "IFS= read -r -t %ld -N %zu l || exit 0; case $l in \"\nOSB-ACK:$n\"|\"OSB-ACK:$n\n\") exit 0;; esac\n"
                           "eval 'case $l in *\"OSB-ACK:$n\"|*\"OSB-ACK:$n\n\"*) exit 0;; esac; p=${l##*\n}\n"
                           "while IFS= read -r -t %ld l; do case $p$l in *\"OSB-ACK:$n\") exit 0;; esac; p=; done'\n"
                           "exit 0\n",
                           ack, ack_len, ack);
  }
  if (bad) {
    osb_buf_free(&b);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  return osb_buf_steal(&b, NULL);
}

/* Starts an HTTP request on the engine; NULL on OOM. */
static osb_http_req *http(osb_proc *p, const char *method, const char *path, const char *body, osb_http_done_fn done) {
  static const char *const json_type[] = {"Content-Type: application/json"};
  osb_http_opts o;
  memset(&o, 0, sizeof o);
  o.method = method;
  o.body = body;
  o.body_len = body ? strlen(body) : 0;
  /* no transport retries here: the reconnect loop retries, and a sandbox that is gone must settle fast */
  long t = p->execd.timeout_ms;
  o.timeout_ms = strcmp(method, "POST") == 0 ? t : (t < 10000 ? t : 10000);
  o.on_done = done;
  o.ud = p;
  return osb_conn_start(p->e, &p->execd, &o, json_type, body ? 1 : 0, "%s", path);
}

/* ---------------------------------------------------------------- the stdin holder */

/* One holder process (HOLDER_SCRIPT) per engine and execd (base URL and headers), started at the first spawn with
 * stdin; a spawn's go line waits until it is ready (its pid line), at most HOLDER_START_MS, or gone. Its requests
 * travel as its stdin, in text frames of at most HOLDER_FRAME_MAX bytes: its decoder writes each with one write(2)
 * (at most PIPE_BUF), so the wrappers' own request records, written into the same pipe, never land inside one. All
 * of it runs on the engine thread; the table is shared by the engines (addon instances) under a mutex. */
#define HOLDER_START_MS 10000
#define HOLDER_FRAME_MAX ((size_t)4000)
#define HOLDER_IDLE_MS 3000
enum { H_STARTING, H_READY, H_GONE };
typedef struct holder {
  struct holder *next;
  int refs;          /* atomic: the table while listed, the holder's process (its callbacks), each osb_proc naming it */
  osb_engine *e;
  char *key;         /* base URL and headers */
  osb_proc *proc;    /* its process; NULL once gone */
  int state;
  long pid;          /* in the sandbox, once ready */
  char line[48];     /* its stdout, until the pid line */
  size_t line_len;
  osb_proc *waiting; /* processes whose go line waits for it (a reference each) */
  int users;         /* processes in the table that named it (holder_user); at 0 for HOLDER_IDLE_MS it retires */
  int broken;        /* not given to new wrappers: its self-test failed (pid 0), or a wrapper given it fell back */
} holder;

static pthread_mutex_t g_holders_mu = PTHREAD_MUTEX_INITIALIZER;
static holder *g_holders;

static void flush_stdin(osb_proc *p);
static void send_go(osb_proc *p);
static osb_proc *proc_new(osb_engine *e, osb_ws *ws, const osb_proc_opts *o, const osb_proc_callbacks *cb,
                          void *ud, char *errbuf, size_t errlen, int is_holder);

static void holder_arm_idle(holder *h);

static void holder_unref(holder *h) {
  if (h && __atomic_sub_fetch(&h->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    free(h->key);
    free(h);
  }
}

/* Ready or gone: the waiting processes send their go line (naming it when ready) and the stdin queued after it. */
static void holder_release_waiters(holder *h) {
  while (h->waiting) {
    osb_proc *p = h->waiting;
    h->waiting = p->hnext;
    p->hnext = NULL;
    p->go_waiting = 0;
    if (p->state == S_RUNNING && !p->cleaning) {
      if (p->conn && p->connected) {
        send_go(p);
        flush_stdin(p);
      } else {
        p->go_pending = 1; /* at the next connection */
      }
    }
    osb_proc_release(p);
  }
}

static void holder_gone(holder *h) {
  if (h->state == H_GONE) return;
  h->state = H_GONE;
  pthread_mutex_lock(&g_holders_mu);
  for (holder **q = &g_holders; *q; q = &(*q)->next) {
    if (*q == h) {
      *q = h->next;
      break;
    }
  }
  pthread_mutex_unlock(&g_holders_mu);
  holder_release_waiters(h);
  holder_unref(h); /* the table's */
}

/* The holder's process ended (or never started): processes it held get EOF on stdin; later spawns start another. */
static void holder_proc_done(holder *h) {
  osb_proc *hp = h->proc;
  h->proc = NULL;
  if (!(h->broken && h->pid == 0 && h->users > 0)) holder_gone(h);
  osb_proc_release(hp);
  holder_unref(h); /* its process's */
}

static void holder_on_started(void *ud, const osb_error *err, const char *pid) {
  (void)pid;
  if (err) holder_proc_done(ud); /* nothing else follows */
}

static void holder_on_output(void *ud, const char *out, size_t out_len, const char *err, size_t err_len) {
  (void)err;
  holder *h = ud;
  if (h->proc) osb_proc_consumed(h->proc, out_len + err_len);
  for (size_t i = 0; i < out_len && h->state == H_STARTING; i++) {
    if (out[i] != '\n') {
      if (h->line_len < sizeof h->line - 1) h->line[h->line_len++] = out[i];
      continue;
    }
    h->line[h->line_len] = 0;
    h->line_len = 0;
    char *end = NULL;
    if (strncmp(h->line, "OSB-HOLDER:", 11) != 0 || !isdigit((unsigned char)h->line[11])) continue;
    long pid = strtol(h->line + 11, &end, 10);
    if (*end || pid < 0 || pid > 0x7fffffffL) continue;
    h->pid = pid;
    h->state = H_READY;
    h->broken = pid == 0; /* it exits: kept (listed, no process) while processes use it, so none starts another */
    if (h->proc) {
      h->proc->timeout_ms = 0; /* the start deadline no longer applies */
      uv_timer_stop(&h->proc->timeout_timer);
    }
    holder_release_waiters(h);
    holder_arm_idle(h);
  }
}

static void holder_on_exit(void *ud, const osb_proc_exit *x) {
  (void)x;
  holder_proc_done(ud);
}

static const osb_proc_callbacks HOLDER_CB = {holder_on_started, holder_on_output, holder_on_exit};

/* The holder of p's engine and execd, started when there is none; a reference for the caller, or NULL. */
static holder *holder_get(osb_proc *p) {
  osb_buf k;
  osb_buf_init(&k);
  int bad = osb_buf_append_str(&k, p->execd.base_url);
  for (size_t i = 0; i < 2 * p->execd.nheaders; i++) {
    bad |= osb_buf_append(&k, "\n", 1);
    bad |= osb_buf_append_str(&k, p->hdr_kv[i]);
  }
  char *key = bad ? NULL : osb_buf_steal(&k, NULL);
  if (!key) {
    osb_buf_free(&k);
    return NULL;
  }
  pthread_mutex_lock(&g_holders_mu);
  holder *h = g_holders;
  while (h && !(h->e == p->e && strcmp(h->key, key) == 0)) h = h->next;
  if (h) __atomic_add_fetch(&h->refs, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&g_holders_mu);
  if (h) {
    free(key);
    h->users++;
    p->holder_user = 1;
    if (h->state == H_READY && h->proc) uv_timer_stop(&h->proc->timeout_timer); /* not idle */
    return h;
  }
  h = calloc(1, sizeof *h);
  if (!h) {
    free(key);
    return NULL;
  }
  h->e = p->e;
  h->key = key;
  h->refs = 3; /* the table, its process, the caller */
  h->users = 1;
  osb_proc_opts o;
  memset(&o, 0, sizeof o);
  o.base_url = p->execd.base_url;
  o.header_kv = (const char *const *)p->hdr_kv;
  o.nheaders = p->execd.nheaders;
  o.request_timeout_ms = p->execd.timeout_ms;
  o.ca_file = p->execd.ca_file;
  o.max_retained = 0;
  o.command = HOLDER_SCRIPT;
  o.timeout_ms = HOLDER_START_MS;
  char err[256];
  h->proc = proc_new(p->e, p->ws, &o, &HOLDER_CB, h, err, sizeof err, 1);
  if (!h->proc) {
    free(h->key);
    free(h);
    return NULL;
  }
  pthread_mutex_lock(&g_holders_mu);
  h->next = g_holders;
  g_holders = h;
  pthread_mutex_unlock(&g_holders_mu);
  p->holder_user = 1;
  return h;
}

static void holder_wait(osb_proc *p) {
  if (p->go_waiting) return;
  p->go_waiting = 1;
  proc_ref(p);
  p->hnext = p->holder->waiting;
  p->holder->waiting = p;
}

static void holder_unwait(osb_proc *p) {
  if (!p->go_waiting) return;
  for (osb_proc **q = &p->holder->waiting; *q; q = &(*q)->hnext) {
    if (*q == p) {
      *q = p->hnext;
      break;
    }
  }
  p->hnext = NULL;
  p->go_waiting = 0;
  osb_proc_release(p); /* not the last reference: the caller runs on it */
}

static void ignore_done(void *ud, const osb_error *err, int flag) {
  (void)ud;
  (void)err;
  (void)flag;
}

/* The holder of an engine and execd that no process in the table needs retires after HOLDER_IDLE_MS (its session
 * deleted): a client leaves no WebSocket or process behind once its processes are done. */
static void holder_idle(uv_timer_t *t) {
  osb_proc *hp = t->data;
  holder *h = hp->ud;
  if (h->users > 0 || h->state != H_READY) return;
  holder_gone(h); /* no process names it any more */
  osb_proc_kill(hp, ignore_done, NULL);
}

static void holder_arm_idle(holder *h) {
  osb_proc *hp = h->proc;
  if (h->users == 0 && h->state == H_READY && hp && hp->engine_side && !hp->cleaning && hp->state == S_RUNNING)
    uv_timer_start(&hp->timeout_timer, holder_idle, HOLDER_IDLE_MS, 0);
}

static void holder_leave(osb_proc *p) {
  if (!p->holder_user) return;
  p->holder_user = 0;
  if (--p->holder->users == 0 && !p->holder->proc) holder_gone(p->holder); /* a failed self-test, unused now */
  holder_arm_idle(p->holder);
}

/* Sends what p's holder must do and has not been asked yet (S: start the decoder, C: close the writer, K: forget),
 * once the wrapper's holder marker says which holder holds its stdin; through this client's own holder, which
 * passes it on (F) when the wrapper's is another (a reattach from another client). */
static void holder_sync(osb_proc *p) {
  long hp = p->mk.holder_pid;
  int s = p->s_need && !p->s_sent, c = p->c_need && !p->c_sent, k = p->k_need && !p->k_sent;
  if (!hp || p->is_holder || !(s || c || k)) return;
  if (!p->holder || p->holder->state == H_GONE) {
    holder *old = p->holder;
    if (old) holder_leave(p);
    p->holder = holder_get(p);
    holder_unref(old);
  }
  holder *h = p->holder;
  if (!h || !h->proc) return;
  char text[3 * OSB_HOLDER_REQ_LEN];
  size_t n = 0;
  const char req[3] = {'S', 'C', 'K'};
  const int want[3] = {s, c, k};
  for (int i = 0; i < 3; i++)
    if (want[i]) n += osb_proc_holder_request(text + n, h->state == H_READY && h->pid == hp ? 0 : hp, req[i], p->nonce);
  if (osb_proc_write(h->proc, text, n, ignore_done, NULL) != 0) return;
  p->s_sent |= s;
  p->c_sent |= c;
  p->k_sent |= k;
}

/* ---------------------------------------------------------------- output */

static void on_flush(void *ud, const char *out, size_t out_len, const char *err, size_t err_len) {
  osb_proc *p = ud;
  long n = (long)(out_len + err_len);
  if (__atomic_add_fetch(&p->inflight, n, __ATOMIC_ACQ_REL) > HIGH_WATER && !p->paused) {
    p->paused = 1;
    __atomic_store_n(&p->paused_flag, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&g_paused, 1, __ATOMIC_RELAXED);
    if (p->conn) osb_ws_pause(p->conn, 1);
  }
  if (p->cb.on_output) p->cb.on_output(p->ud, out, out_len, err, err_len);
}

static void emit(osb_proc *p, int which, const char *s, size_t n) {
  if (!n || p->state == S_SETTLED) return;
  osb_tail_append(&p->tail[which], s, n);
  osb_batch_append(&p->batch, which, s, n);
  osb_batch_kick(&p->batch);
}

static void try_finish(osb_proc *p);

static void emit_cb(void *ud, int which, const char *s, size_t n) { emit(ud, which, s, n); }

/* Feeds bytes of one stream through the marker scanner. */
static void flush_stdin(osb_proc *p);

static void scan(osb_proc *p, int which, const char *data, size_t n) {
  unsigned long wrote = p->mk.wrote;
  long held = p->mk.holder_pid;
  osb_pty_markers_scan(&p->mk, which, data, n, emit_cb, p);
  if (p->mk.holder_pid != held) holder_sync(p); /* requests that waited for the holder marker */
  if (p->mk.got_run && !p->run_seen) {
    p->run_seen = 1;
    /* the wrapper was given a holder and ran its own decoder (no answer within 5 s, /proc refused): the next
     * wrappers are not given that holder */
    if (p->go_holder && !p->mk.holder_pid && p->holder && p->holder->pid == p->go_holder) p->holder->broken = 1;
  }
  if (p->mk.wrote != wrote) { /* stdin frames written into the command's stdin: send more */
    unsigned long d = p->mk.wrote - wrote;
    p->unacked = (unsigned long)p->unacked > d ? p->unacked - (int)d : 0;
    flush_stdin(p);
  }
  if (p->mk.got_exit && p->mk.got_err) try_finish(p);
}

/* ---------------------------------------------------------------- lifecycle of one process */

static void connect_ws(osb_proc *p);
static void cleanup(osb_proc *p);
static void send_line(osb_proc *p, const char *fmt);
static void send_kill(osb_proc *p);

static void settle_waiters(osb_proc *p, int flag) {
  while (p->kill_waiters) {
    waiter *w = p->kill_waiters;
    p->kill_waiters = w->next;
    w->done(w->ud, NULL, flag);
    free(w);
  }
}

/* Fails queued user writes (and a queued end of input); keeps our own protocol lines unless all is set. */
static void fail_stdin(osb_proc *p, int all) {
  osb_error err;
  osb_error_set(&err, OSB_KIND_API, "PROCESS_EXITED", "the process has exited: stdin is closed");
  stdin_msg *keep = NULL, **kt = &keep, *m = p->qhead;
  p->qhead = p->qtail = NULL;
  while (m) {
    stdin_msg *n = m->next;
    if (m->kind != M_LINE || all) {
      if (m->done) m->done(m->ud, &err, 0);
      free(m);
    } else {
      m->next = NULL;
      *kt = m;
      kt = &m->next;
      p->qtail = m;
    }
    m = n;
  }
  p->qhead = keep;
  p->queued = 0;
  p->qwaiting = 0;
}

/* A reattach reports started once execd's replay (sent before its connected frame) is handed over, so that the
 * caller's handle has the output produced so far (or when it settles first). */
static void report_started(osb_proc *p) {
  if (!p->start_pending) return;
  p->start_pending = 0;
  osb_batch_flush(&p->batch);
  p->cb.on_started(p->ud, NULL, p->pid);
}

/* The one on_exit. error_text != NULL: no status known. */
static void settle(osb_proc *p, int code, int killed, int timed_out, const char *error_text) {
  if (p->state == S_SETTLED) return;
  report_started(p);
  for (int i = 0; i < 2; i++) osb_pty_markers_flush(&p->mk, i, emit_cb, p); /* a marker prefix is output after all */
  osb_batch_flush(&p->batch);
  p->state = S_SETTLED;
  uv_timer_stop(&p->timeout_timer);
  uv_timer_stop(&p->retry_timer);
  osb_proc_exit x;
  memset(&x, 0, sizeof x);
  x.exit_code = code;
  x.killed = killed;
  x.timed_out = timed_out;
  x.error_text = error_text;
  x.error_code = error_text ? p->error_code : NULL;
  for (int i = 0; i < 2; i++) osb_tail_align_utf8(&p->tail[i]);
  x.out = osb_tail_data(&p->tail[0], &x.out_len);
  x.err = osb_tail_data(&p->tail[1], &x.err_len);
  x.out_dropped = p->tail[0].dropped;
  x.err_dropped = p->tail[1].dropped;
  p->cb.on_exit(p->ud, &x);
  /* Ended without the wrapper's own K (killed, or its wrapper was): the holder forgets it. Not when this client only
   * lost it (taken over, connection lost, shutdown): it may run on for another client. */
  const char *why = error_text && p->error_code ? p->error_code : "";
  int dead = !error_text || !strcmp(why, "PROCESS_ENDED_UNSEEN") || !strcmp(why, "PROCESS_GONE");
  if (p->mk.holder_pid && !(p->mk.got_exit && p->mk.got_err) && dead) {
    p->k_need = 1;
    holder_sync(p);
  }
  fail_stdin(p, 0);
  settle_waiters(p, killed || timed_out);
}

static void settle_failed(osb_proc *p, const char *code, const char *fmt, const char *detail) {
  p->error_code = code;
  snprintf(p->error_text, sizeof p->error_text, fmt, detail ? detail : "");
  osb_redact(p->error_text, sizeof p->error_text, (const char *const *)p->execd.secrets);
  settle(p, -1, 0, 0, p->error_text);
  cleanup(p);
}

static void on_cleanup_delete(void *ud, const osb_http_result *res) {
  (void)res;
  osb_proc *p = ud;
  p->req = NULL;
  cleanup(p);
}

static void proc_closed(void *ud) {
  __atomic_sub_fetch(((osb_proc *)ud)->is_holder ? &g_holders_alive : &g_count, 1, __ATOMIC_RELAXED);
  osb_proc_release(ud); /* the engine side's reference */
}

static void on_linger_timer(uv_timer_t *t) {
  osb_proc *p = t->data;
  if (!p->lingering) return;
  p->lingering = 0;
  drop_conn(p); /* the bound: execd did not close within LINGER_MS */
  cleanup(p);
}

/* Ends the engine side once settled: lets execd close the socket (bounded, see LINGER_MS), waits for requests in
 * flight, closes the timers. */
static void cleanup(osb_proc *p) {
  if (!p->engine_side) return;
  p->cleaning = 1;
  holder_unwait(p);
  fail_stdin(p, 1);
  if (p->conn && !p->aborting) {
    if (!p->lingering) {
      p->lingering = 1;
      uv_timer_stop(&p->retry_timer);
      if (p->paused) osb_ws_pause(p->conn, 0); /* read on to the close: the output is discarded now */
      uv_timer_start(&p->timeout_timer, on_linger_timer, LINGER_MS, 0);
    }
    return; /* on_ws_close or the timer calls cleanup again */
  }
  drop_conn(p);
  if (p->req || p->del) return; /* their on_done calls cleanup again */
  p->engine_side = 0;
  holder_leave(p);
  if (p->paused) {
    p->paused = 0;
    __atomic_store_n(&p->paused_flag, 0, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&g_paused, 1, __ATOMIC_RELAXED);
  }
  osb_engine_remove_active(p->e, &p->active);
  uv_timer_t *const others[] = {&p->timeout_timer, &p->retry_timer};
  osb_batch_close(&p->batch, others, 2);
}

/* After a natural exit: the wrapper got its ack; once execd closed the socket (after its exit frame) or DRAIN_MS
 * passed, delete the session so that execd frees its replay buffer, then clean up. */
static void drain_done(osb_proc *p) {
  if (!p->draining || p->cleaning) return;
  p->draining = 0;
  uv_timer_stop(&p->retry_timer);
  drop_conn(p);
  char path[200];
  snprintf(path, sizeof path, "/pty/%s", p->sid);
  p->req = http(p, "DELETE", path, NULL, on_cleanup_delete);
  if (!p->req) cleanup(p);
}

static void on_drain_timer(uv_timer_t *t) { drain_done(t->data); }

/* Both markers arrived: every byte written before them has been received. */
static void try_finish(osb_proc *p) {
  if (p->state == S_SETTLED || p->kill_requested) return;
  send_line(p, "\nOSB-ACK:%s\n");
  settle(p, p->mk.exit_code, 0, 0, NULL);
  p->draining = 1;
  uv_timer_start(&p->retry_timer, on_drain_timer, DRAIN_MS, 0);
}

/* A wrapper that ended without exit markers (killed while no client was attached): exit -1. */
static void settle_unseen(osb_proc *p) {
  send_line(p, "\nOSB-ACK:%s\n");
  p->error_code = "PROCESS_ENDED_UNSEEN";
  snprintf(p->error_text, sizeof p->error_text,
           "the process ended while no client was attached and execd's output has no exit status (it was killed?)");
  settle(p, -1, 0, 0, p->error_text);
  p->draining = 1;
  uv_timer_start(&p->retry_timer, on_drain_timer, DRAIN_MS, 0);
}

/* ---------------------------------------------------------------- stdin */

#define STDIN_FRAME_MAX ((size_t)4 * 1024 * 1024) /* user bytes per frame: dd's one block */
#define STDIN_QUEUE_MAX ((size_t)8 * 1024 * 1024) /* a write resolves at once while the queue holds at most this */
#define STDIN_UNACKED 2                             /* stdin frames in flight before the decoder's written marker */
#define STDIN_SECOND_MIN ((size_t)1024 * 1024)      /* a frame while another is in flight: at least this many bytes */
#define STDIN_TEXT_MAX ((size_t)4096)          /* up to this, a frame without NUL is read by the shell ("T") */

/* Pops the queue's head up to and including last, reporting rc to each piece's done. */
static void pop_sent(osb_proc *p, stdin_msg *last, int rc) {
  for (;;) {
    stdin_msg *m = p->qhead;
    p->qhead = m->next;
    if (!p->qhead) p->qtail = NULL;
    if (m->done && m->kind == M_DATA) p->qwaiting--;
    if (m->done) {
      if (rc == 0) m->done(m->ud, NULL, 0);
      else {
        osb_error err;
        osb_error_set(&err, OSB_KIND_TRANSPORT, "STDIN_FAILED", "cannot write to the process's stdin");
        m->done(m->ud, &err, 0);
      }
    }
    int was_last = m == last;
    free(m);
    if (was_last) return;
  }
}

/* Sends the queue: a protocol line as it is; a run of user bytes (consecutive writes, at most STDIN_FRAME_MAX) as one
 * frame "D<n>\n" + bytes ("T<n>\n" when small and without NUL), followed in the same message by "E\n" when closeStdin
 * comes next. */
static void flush_stdin(osb_proc *p) {
  if (!p->conn || !p->connected || p->go_waiting) return; /* nothing goes before the go line */
  while (p->qhead) {
    stdin_msg *m = p->qhead;
    if (m->kind == M_LINE) {
      pop_sent(p, m, osb_ws_send(p->conn, 1, m->data, m->n));
      continue;
    }
    if (m->kind == M_DATA && p->unacked >= STDIN_UNACKED) return; /* the decoder's written marker sends the rest */
    /* Each binary frame costs the sandbox a dd process (fork + exec, several ms of its CPU): while a frame is in
     * flight, a second one goes only when it is big (or ends the input); small writes coalesce until the written
     * marker instead (awaited 64 KiB writes would otherwise alternate a big frame and a small one). With none in
     * flight a write goes at once (the round trip of a single write stays as it was); so does one that a writer
     * waits for (the queue was full when it was written). */
    if (m->kind == M_DATA && p->unacked >= 1 && p->queued < STDIN_SECOND_MIN && p->qtail->kind != M_END && !p->qwaiting)
      return;
    size_t total = 0;
    stdin_msg *last = NULL, *e = m;
    for (; e && e->kind == M_DATA && total + e->n <= p->frame_max; e = e->next) {
      total += e->n;
      last = e;
    }
    int end = e && e->kind == M_END;
    if (end) last = e;
    int text = total <= STDIN_TEXT_MAX;
    for (stdin_msg *x = m; text && x && x->kind == M_DATA && x != e; x = x->next) text = !memchr(x->data, 0, x->n);
    char head[32];
    int hn = total ? snprintf(head, sizeof head, "%c%zu\n", text ? 'T' : 'D', total) : 0;
    size_t len = 1 + (size_t)hn + total + (end ? 2 : 0);
    char *msg = len > 1 ? osb_ws_buf_alloc(p->conn, len) : NULL; /* built in place: the WebSocket takes it uncopied */
    int rc = 0;
    if (len > 1 && !msg) {
      rc = -1;
    } else if (msg) {
      char *o = msg;
      *o++ = 0x00;
      memcpy(o, head, (size_t)hn);
      o += hn;
      for (stdin_msg *x = m; x && x->kind == M_DATA && x != e; x = x->next) {
        memcpy(o, x->data, x->n);
        o += x->n;
      }
      if (end) memcpy(o, "E\n", 2);
      rc = osb_ws_send_buf(p->conn, 1, msg, len);
      if (total) p->unacked++;
      p->queued -= total;
      if (rc == 0) {
        p->s_need |= total > 0;
        p->c_need |= end;
      }
    }
    pop_sent(p, last, rc); /* len == 1: only empty writes, nothing to send */
  }
  holder_sync(p);
}

static void flush_job(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  osb_proc *p = arg;
  p->flush_posted = 0;
  if (!shutdown) flush_stdin(p);
  osb_proc_release(p);
}

/* Flushes after the jobs already posted: writes made together (one after the other on the JS thread) are framed
 * together. */
static void schedule_flush(osb_proc *p) {
  if (p->flush_posted) return;
  p->flush_posted = 1;
  proc_ref(p);
  if (osb_engine_post(p->e, flush_job, p) != 0) {
    p->flush_posted = 0;
    osb_proc_release(p);
    flush_stdin(p);
  }
}

static stdin_msg *new_msg(int kind, const void *data, size_t n) {
  stdin_msg *m = malloc(sizeof *m + n);
  if (!m) return NULL;
  m->next = NULL;
  m->kind = kind;
  m->done = NULL;
  m->ud = NULL;
  m->n = n;
  if (n) memcpy(m->data, data, n);
  return m;
}

static void enqueue(osb_proc *p, stdin_msg *m, int front);

/* Queues user stdin (data NULL: the end of input) in pieces of at most STDIN_FRAME_MAX, the last one carrying done;
 * 0, or -1 when out of memory (nothing queued). */
static int enqueue_stdin(osb_proc *p, const unsigned char *data, size_t n, osb_proc_done_fn done, void *ud) {
  stdin_msg *head = NULL, **tail = &head, *last = NULL;
  size_t off = 0;
  do {
    size_t k = n - off < STDIN_FRAME_MAX ? n - off : STDIN_FRAME_MAX;
    stdin_msg *m = data ? new_msg(M_DATA, data + off, k) : new_msg(M_END, NULL, 0);
    if (!m) {
      while (head) {
        stdin_msg *nx = head->next;
        free(head);
        head = nx;
      }
      return -1;
    }
    *tail = last = m;
    tail = &m->next;
    off += k;
  } while (data && off < n);
  /* A write resolves once queued (bytes still queued when the process exits are dropped); only one that finds the
   * queue over STDIN_QUEUE_MAX waits until it is sent. The end of input resolves when it is sent. */
  if (data) p->queued += n;
  if (data && p->queued <= STDIN_QUEUE_MAX) {
    done(ud, NULL, 0);
  } else {
    last->done = done;
    last->ud = ud;
    if (data) p->qwaiting++;
  }
  while (head) {
    stdin_msg *nx = head->next;
    head->next = NULL;
    enqueue(p, head, 0);
    head = nx;
  }
  schedule_flush(p);
  return 0;
}

static void enqueue(osb_proc *p, stdin_msg *m, int front) {
  if (front) {
    m->next = p->qhead;
    p->qhead = m;
    if (!p->qtail) p->qtail = m;
  } else {
    if (p->qtail) p->qtail->next = m;
    else p->qhead = m;
    p->qtail = m;
  }
}

/* Our own protocol line (go / ack), fmt has one %s for the nonce. Goes before queued user stdin; queued while
 * not connected. */
static void send_raw(osb_proc *p, const char *text, int n) {
  char line[128];
  line[0] = 0x00; /* execd's stdin message type */
  if (n < 0 || (size_t)n >= sizeof line - 1) return;
  memcpy(line + 1, text, (size_t)n);
  stdin_msg *m = new_msg(M_LINE, line, (size_t)n + 1);
  if (!m) return;
  if (p->conn && p->connected) {
    osb_ws_send(p->conn, 1, m->data, m->n);
    free(m);
  } else {
    enqueue(p, m, 1);
  }
}

static void send_line(osb_proc *p, const char *fmt) {
  char text[96];
  send_raw(p, text, snprintf(text, sizeof text, fmt, p->nonce));
}

/* The go line; with stdin (and on a reattach, whose wrapper may have stdin) a second line names the holder's pid, 0
 * for none (the wrapper then runs its own decoder). */
static void send_go(osb_proc *p) {
  char text[96];
  holder *h = p->holder;
  long hp = p->attach ? 0 : p->stdin_pipe ? (h && h->state == H_READY && !h->broken ? h->pid : 0) : -1;
  if (hp > 0) p->go_holder = hp;
  send_raw(p, text,
           hp < 0 ? snprintf(text, sizeof text, "OSB-GO:%s\n", p->nonce)
                  : snprintf(text, sizeof text, "OSB-GO:%s\n%ld\n", p->nonce, hp));
}

/* ---------------------------------------------------------------- WebSocket events (lws thread -> engine) */

enum { EV_OPEN, EV_MSG, EV_CLOSE };
typedef struct {
  osb_proc *p;
  unsigned gen;
  int type, binary, code, http_status;
  char reason[160];
  size_t n;
  char data[];
} ws_event;

static void on_ws_frame(osb_proc *p, int binary, const char *d, size_t n) {
  osb_pty_frame f;
  switch (osb_pty_frame_parse(binary, d, n, &f)) {
    case OSB_PTY_STDOUT:
    case OSB_PTY_STDERR:
      p->received += f.len;
      scan(p, f.kind == OSB_PTY_STDERR, f.data, f.len);
      break;
    case OSB_PTY_REPLAY: { /* a gap was overwritten in execd's ring */
      size_t skip = osb_pty_replay_skip(&p->received, f.offset, f.len, &p->tail[0].dropped);
      if (skip < f.len) scan(p, 0, f.data + skip, f.len - skip);
      break;
    }
    case OSB_PTY_CONNECTED:
      p->connected = 1;
      p->unacked = 0; /* frames of an earlier connection: acknowledged or lost with it */
      p->connected_at = osb_engine_now(p->e);
      p->received_at_connect = p->received;
      /* A reattach to a wrapper that never produced a byte (its first client died before sending the go line):
       * the command has not started yet, so start it now. Once started, the wrapper prints a RUN marker. */
      if (p->attach && p->since == 0 && p->received == 0) p->go_pending = 1;
      if (p->go_pending) {
        p->go_pending = 0;
        if (p->holder && p->holder->state == H_STARTING) {
          holder_wait(p); /* the go line (and the stdin after it) waits for the holder */
        } else {
          send_go(p);
        }
      } else if (p->ended && p->state == S_RUNNING && !p->kill_requested && !(p->mk.got_exit && p->mk.got_err)) {
        /* The wrapper had ended before this connection and its output (the replay, just scanned) has no exit
         * markers: it was killed. Its status is unknown; the wrapper execd just started again waits for a go line:
         * the ack ends it, the command never runs twice. */
        settle_unseen(p);
        break;
      }
      flush_stdin(p);
      report_started(p);
      break;
    case OSB_PTY_EXIT: /* execd's close frame follows: wait for it (on_ws_close), never close first */
      if (p->state == S_RUNNING && !p->kill_requested && !p->draining) {
        /* ended without the markers: the wrapper itself was killed (e.g. the whole group got a signal) */
        settle(p, f.exit_code < 0 ? KILLED_EXIT : f.exit_code, 0, 0, NULL);
        p->draining = 1;
        uv_timer_start(&p->retry_timer, on_drain_timer, DRAIN_MS, 0);
      }
      break;
    case OSB_PTY_ERROR:
      snprintf(p->error_text, sizeof p->error_text, "execd: %s: %s", f.error_code, f.error_text);
      break;
    default:
      break;
  }
}

static void reconnect_later(osb_proc *p);

static void on_ws_close(osb_proc *p, int code, const char *reason, int http_status) {
  uint64_t now = osb_engine_now(p->e);
  if (p->connected && (p->received > p->received_at_connect || now - p->connected_at >= RECONNECT_STABLE_MS)) {
    p->reconnects = 0; /* that connection worked: a new loss gets a new window */
    p->retry_since = 0;
  }
  drop_conn(p);
  if (p->lingering) {
    p->lingering = 0;
    uv_timer_stop(&p->timeout_timer);
    cleanup(p);
    return;
  }
  if (http_status) snprintf(p->last_close, sizeof p->last_close, "WebSocket upgrade answered %d", http_status);
  else if (code) snprintf(p->last_close, sizeof p->last_close, "WebSocket closed with %d %.120s", code, reason);
  else snprintf(p->last_close, sizeof p->last_close, "%.160s", reason);
  if (p->draining) {
    drain_done(p);
    return;
  }
  if (p->state != S_RUNNING || p->kill_requested) return;
  if (http_status == 404) {
    settle_failed(p, "PROCESS_GONE", "the process's session no longer exists on execd (sandbox deleted or session removed)%s", "");
  } else if (code == 4001) {
    settle_failed(p, "PROCESS_TAKEN_OVER", "another client took over the process's session%s", "");
  } else if (p->is_holder && ((holder *)p->ud)->users == 0) {
    /* a stdin holder no process needs (its sandbox deleted after its processes?): no reconnecting */
    settle_failed(p, "PROCESS_CONNECTION_LOST", "the stdin holder lost its connection: %s", p->last_close);
  } else {
    if (http_status == 409) p->takeover = 1;
    if (!p->retry_since) p->retry_since = now;
    if (now - p->retry_since >= RECONNECT_BUDGET_MS) {
      settle_failed(p, "PROCESS_CONNECTION_LOST",
                    "lost the connection to the process and could not reconnect within 10 s: %s", p->last_close);
    } else {
      p->reconnects++;
      reconnect_later(p);
    }
  }
}

static void ws_event_job(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  ws_event *ev = arg;
  osb_proc *p = ev->p;
  if (!shutdown && p->engine_side && p->conn && ev->gen == p->gen) {
    if (ev->type == EV_MSG) on_ws_frame(p, ev->binary, ev->data, ev->n);
    else if (ev->type == EV_CLOSE) on_ws_close(p, ev->code, ev->reason, ev->http_status);
  }
  free(ev);
  osb_proc_release(p);
}

/* lws thread: copy and hand over to the engine thread. */
static void post_event(ws_link *l, int type, int binary, const char *d, size_t n, int code, const char *reason,
                       int http_status) {
  ws_event *ev = malloc(sizeof *ev + n + 1);
  if (!ev) return;
  memset(ev, 0, sizeof *ev);
  osb_proc *p = l->p;
  ev->p = p;
  ev->gen = l->gen;
  ev->type = type;
  ev->binary = binary;
  ev->code = code;
  ev->http_status = http_status;
  if (reason) snprintf(ev->reason, sizeof ev->reason, "%s", reason);
  ev->n = n;
  if (n) memcpy(ev->data, d, n);
  ev->data[n] = 0;
  proc_ref(p);
  if (osb_engine_post(p->e, ws_event_job, ev) != 0) {
    free(ev);
    osb_proc_release(p);
  }
}

static void cb_open(void *ud) { (void)ud; }
static void cb_message(void *ud, int binary, const char *p, size_t n) { post_event(ud, EV_MSG, binary, p, n, 0, NULL, 0); }
static void cb_close(void *ud, int code, const char *reason, int http_status) {
  post_event(ud, EV_CLOSE, 0, NULL, 0, code, reason, http_status);
}
static const osb_ws_callbacks WS_CB = {cb_open, cb_message, cb_close};

static void connect_ws(osb_proc *p) {
  char url[1024];
  snprintf(url, sizeof url, "%s/pty/%s/ws?pty=0&since=%llu%s", p->ws_base, p->sid, (unsigned long long)p->received,
           p->takeover ? "&takeover=1" : "");
  char err[160] = "";
  p->connected = 0;
  ws_link *l = malloc(sizeof *l);
  if (!l) {
    settle_failed(p, "OUT_OF_MEMORY", "out of memory%s", "");
    return;
  }
  l->p = p;
  l->gen = ++p->gen;
  osb_ws_conn *c = osb_ws_connect(p->ws, url, p->execd.ca_file, (const char *const *)p->hdr_kv, p->execd.nheaders, &WS_CB, l, err, sizeof err);
  if (!c) {
    free(l);
    settle_failed(p, "WS_CONNECT_FAILED", "cannot open the process's WebSocket: %s", err);
    return;
  }
  p->conn = c;
  p->link = l;
  if (p->paused) osb_ws_pause(c, 1);
}

/* ---------------------------------------------------------------- reconnect: GET /pty/{id} first */

static void on_status_done(void *ud, const osb_http_result *res) {
  osb_proc *p = ud;
  p->req = NULL;
  if (p->cleaning) {
    cleanup(p);
    return;
  }
  int ok = res->error == OSB_HTTP_OK && res->status >= 200 && res->status < 300;
  int gone = res->error == OSB_HTTP_OK && res->status == 404;
  if (ok) { /* running:false: connecting starts the wrapper again; it then waits for a go line it never gets */
    cJSON *j = cJSON_ParseWithLength(res->body, res->body_len);
    const cJSON *r = j ? cJSON_GetObjectItemCaseSensitive(j, "running") : NULL;
    p->ended = cJSON_IsFalse(r);
    cJSON_Delete(j);
  }
  if (p->state == S_RUNNING) { /* a reconnect */
    if (gone) {
      settle_failed(p, "PROCESS_GONE", "the process's session no longer exists on execd (sandbox deleted or session removed)%s", "");
    } else if (!p->conn && !p->kill_requested && !p->draining) {
      connect_ws(p); /* a failed GET: the upgrade tells (and the reconnect window bounds it) */
    }
    return;
  }
  if (p->state == S_STARTING) { /* reattach */
    if (!ok) {
      osb_error err;
      osb_error_from_http(&err, res, (const char *const *)p->execd.secrets, NULL);
      if (gone) osb_error_set(&err, OSB_KIND_API, "PROCESS_NOT_FOUND", "no process %s on execd", p->pid);
      err.status = res->status;
      p->cb.on_started(p->ud, &err, NULL);
      p->state = S_SETTLED;
      cleanup(p);
      return;
    }
    p->state = S_RUNNING;
    p->start_pending = 1;
    if (p->kill_requested) {
      report_started(p);
      send_kill(p);
    } else {
      connect_ws(p); /* started is reported at the connected frame, after the replay */
    }
    return;
  }
}

static void get_status(osb_proc *p) {
  char path[200];
  snprintf(path, sizeof path, "/pty/%s", p->sid);
  p->req = http(p, "GET", path, NULL, on_status_done);
  if (!p->req) settle_failed(p, "OUT_OF_MEMORY", "out of memory%s", "");
}

/* Reconnects ask GET /pty/{id} first (running or not), then open the WebSocket: its upgrade answers 404 when the
 * session is gone and 409 when execd still thinks the old socket holds it (then takeover=1). Connecting is safe
 * whether or not the wrapper still runs: a wrapper that execd starts again waits for a go line, which the client
 * sends only to a session without output (the command never ran); see the connected frame. */
static void on_retry_timer(uv_timer_t *t) {
  osb_proc *p = t->data;
  if (p->state == S_RUNNING && !p->conn && !p->kill_requested && !p->draining && !p->req) get_status(p);
}

static void reconnect_later(osb_proc *p) {
  int shift = p->reconnects > 1 ? p->reconnects - 1 : 0;
  uint64_t delay = shift >= 4 ? RECONNECT_MAX_MS : (uint64_t)RECONNECT_BASE_MS << shift;
  uv_timer_start(&p->retry_timer, on_retry_timer, delay, 0);
}

/* ---------------------------------------------------------------- spawn: POST /pty */

static void on_timeout_timer(uv_timer_t *t);

static void on_create_done(void *ud, const osb_http_result *res) {
  osb_proc *p = ud;
  p->req = NULL;
  if (p->cleaning) {
    cleanup(p);
    return;
  }
  osb_error err;
  cJSON *j = NULL;
  if (res->error != OSB_HTTP_OK || res->status < 200 || res->status >= 300) {
    osb_error_from_http(&err, res, (const char *const *)p->execd.secrets, NULL);
  } else {
    j = cJSON_ParseWithLength(res->body, res->body_len);
    const cJSON *sid = j ? cJSON_GetObjectItemCaseSensitive(j, "session_id") : NULL;
    const char *s = cJSON_IsString(sid) ? sid->valuestring : "";
    size_t l = strlen(s);
    int okid = l > 0 && l < 100;
    for (size_t i = 0; i < l && okid; i++) okid = isalnum((unsigned char)s[i]) || s[i] == '-' || s[i] == '_';
    if (okid) {
      snprintf(p->sid, sizeof p->sid, "%s", s);
      snprintf(p->pid, sizeof p->pid, "%s.%s", p->sid, p->nonce);
    } else {
      osb_error_set(&err, OSB_KIND_PROTOCOL, "PROTOCOL", "POST /pty answered without a usable session_id");
    }
    cJSON_Delete(j);
    if (okid) {
      p->state = S_RUNNING;
      p->go_pending = 1;
      p->cb.on_started(p->ud, NULL, p->pid);
      if (p->timeout_ms > 0) uv_timer_start(&p->timeout_timer, on_timeout_timer, (uint64_t)p->timeout_ms, 0);
      if (p->kill_requested) send_kill(p);
      else connect_ws(p);
      return;
    }
  }
  p->cb.on_started(p->ud, &err, NULL);
  p->state = S_SETTLED;
  cleanup(p);
}

/* ---------------------------------------------------------------- kill / timeout */

static void on_kill_done(void *ud, const osb_http_result *res) {
  osb_proc *p = ud;
  p->del = NULL;
  int ok = res->error == OSB_HTTP_OK && ((res->status >= 200 && res->status < 300) || res->status == 404);
  if (!ok && p->state == S_RUNNING) {
    osb_error err;
    osb_error_from_http(&err, res, (const char *const *)p->execd.secrets, NULL);
    p->kill_requested = 0;
    while (p->kill_waiters) {
      waiter *w = p->kill_waiters;
      p->kill_waiters = w->next;
      w->done(w->ud, &err, 0);
      free(w);
    }
    if (!p->conn) reconnect_later(p); /* the socket may have closed meanwhile */
    if (p->cleaning) cleanup(p);
    return;
  }
  if (p->state == S_RUNNING) {
    if (p->timed_out) settle(p, TIMEOUT_EXIT, 1, 1, NULL);
    else settle(p, KILLED_EXIT, 1, 0, NULL);
  }
  settle_waiters(p, 0);
  cleanup(p);
}

static void send_kill(osb_proc *p) {
  if (p->del) return;
  p->kill_requested = 1;
  uv_timer_stop(&p->retry_timer);
  char path[200];
  snprintf(path, sizeof path, "/pty/%s", p->sid);
  p->del = http(p, "DELETE", path, NULL, on_kill_done);
  if (!p->del) {
    settle(p, KILLED_EXIT, 1, 0, NULL);
    cleanup(p);
  }
}

static void on_timeout_timer(uv_timer_t *t) {
  osb_proc *p = t->data;
  if (p->state != S_RUNNING) return;
  p->timed_out = 1;
  send_kill(p);
}

typedef struct {
  osb_proc *p;
  int kind; /* 0 write, 1 kill, 2 resume reading, 3 close stdin */
  osb_proc_done_fn done;
  void *ud;
  size_t n;
  char data[];
} op_job;

static void op_run(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  op_job *j = arg;
  osb_proc *p = j->p;
  osb_error err;
  if (j->kind == 2) {
    __atomic_store_n(&p->resume_posted, 0, __ATOMIC_RELEASE);
    if (!shutdown && p->paused && __atomic_load_n(&p->inflight, __ATOMIC_ACQUIRE) < LOW_WATER) {
      p->paused = 0;
      __atomic_store_n(&p->paused_flag, 0, __ATOMIC_RELEASE);
      __atomic_sub_fetch(&g_paused, 1, __ATOMIC_RELAXED);
      if (p->conn) osb_ws_pause(p->conn, 0);
    }
  } else if (shutdown) {
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
    j->done(j->ud, &err, 0);
  } else if (j->kind == 1) {
    if (p->state == S_SETTLED || !p->engine_side) {
      j->done(j->ud, NULL, 0);
    } else {
      waiter *w = malloc(sizeof *w);
      if (!w) {
        osb_error_set(&err, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
        j->done(j->ud, &err, 0);
      } else {
        w->done = j->done;
        w->ud = j->ud;
        w->next = p->kill_waiters;
        p->kill_waiters = w;
        if (p->state == S_RUNNING) send_kill(p);
        else p->kill_requested = 1; /* still starting: killed as soon as the session exists */
      }
    }
  } else if (p->state == S_SETTLED || !p->engine_side || p->kill_requested) {
    if (j->kind == 3) {
      j->done(j->ud, NULL, 0); /* nothing left to close */
    } else {
      osb_error_set(&err, OSB_KIND_API, "PROCESS_EXITED", "the process has exited: stdin is closed");
      j->done(j->ud, &err, 0);
    }
  } else if (p->stdin_closed) {
    if (j->kind == 3) {
      j->done(j->ud, NULL, 0); /* closing twice is fine */
    } else {
      osb_error_set(&err, OSB_KIND_API, "STDIN_CLOSED", "stdin of the process was closed (closeStdin): cannot write to it");
      j->done(j->ud, &err, 0);
    }
  } else if (enqueue_stdin(p, j->kind == 3 ? NULL : (const unsigned char *)j->data, j->n, j->done, j->ud) != 0) {
    osb_error_set(&err, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
    j->done(j->ud, &err, 0);
  } else if (j->kind == 3) {
    p->stdin_closed = 1;
  }
  free(j);
  osb_proc_release(p);
}

static int post_op(osb_proc *p, int kind, const void *data, size_t n, osb_proc_done_fn done, void *ud) {
  op_job *j = malloc(sizeof *j + n);
  if (!j) return -1;
  j->p = p;
  j->kind = kind;
  j->done = done;
  j->ud = ud;
  j->n = n;
  if (n) memcpy(j->data, data, n);
  proc_ref(p);
  if (osb_engine_post(p->e, op_run, j) != 0) {
    free(j);
    osb_proc_release(p);
    return -1;
  }
  return 0;
}

int osb_proc_write(osb_proc *p, const void *data, size_t n, osb_proc_done_fn done, void *ud) {
  return post_op(p, 0, data, n, done, ud);
}

int osb_proc_kill(osb_proc *p, osb_proc_done_fn done, void *ud) { return post_op(p, 1, NULL, 0, done, ud); }

int osb_proc_close_stdin(osb_proc *p, osb_proc_done_fn done, void *ud) { return post_op(p, 3, NULL, 0, done, ud); }

void osb_proc_consumed(osb_proc *p, size_t n) {
  long left = __atomic_sub_fetch(&p->inflight, (long)n, __ATOMIC_ACQ_REL);
  if (left < LOW_WATER && __atomic_load_n(&p->paused_flag, __ATOMIC_ACQUIRE)) {
    int expected = 0;
    if (__atomic_compare_exchange_n(&p->resume_posted, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
        post_op(p, 2, NULL, 0, NULL, NULL) != 0)
      __atomic_store_n(&p->resume_posted, 0, __ATOMIC_RELEASE);
  }
}

void osb_proc_retain(osb_proc *p) { proc_ref(p); }

/* ---------------------------------------------------------------- start */

static void proc_abort(osb_active *a) {
  osb_proc *p = (osb_proc *)a;
  osb_engine_remove_active(p->e, &p->active);
  if (p->state == S_STARTING || p->state == S_INIT) {
    osb_error err;
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
    p->state = S_SETTLED;
    p->cb.on_started(p->ud, &err, NULL);
  } else {
    p->error_code = "SHUTDOWN";
    settle(p, -1, 0, 0, "engine shutting down");
  }
  settle_waiters(p, 0);
  p->draining = 0;
  p->aborting = 1;
  p->lingering = 0;
  p->cleaning = 1; /* request callbacks that run from the cancels below only finish the cleanup */
  if (p->req) osb_http_cancel(p->req);
  if (p->del) osb_http_cancel(p->del);
  cleanup(p);
}

static void start_job(osb_engine *e, void *arg, int shutdown) {
  osb_proc *p = arg;
  p->e = e;
  if (shutdown) {
    osb_error err;
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
    p->cb.on_started(p->ud, &err, NULL);
    osb_proc_release(p);
    return;
  }
  uv_loop_t *loop = osb_engine_loop(e);
  osb_batch_start(&p->batch, loop, on_flush, proc_closed, p);
  uv_timer_init(loop, &p->timeout_timer);
  uv_timer_init(loop, &p->retry_timer);
  p->timeout_timer.data = p->retry_timer.data = p;
  p->engine_side = 1;
  p->active.abort = proc_abort;
  osb_engine_add_active(e, &p->active);
  __atomic_add_fetch(p->is_holder ? &g_holders_alive : &g_count, 1, __ATOMIC_RELAXED);
  if (p->stdin_pipe && !p->is_holder) p->holder = holder_get(p); /* NULL: none (out of memory): no holder */
  p->state = S_STARTING;
  if (p->attach) {
    p->received = p->since;
    p->takeover = 1;
    get_status(p);
  } else {
    p->req = http(p, "POST", "/pty", p->body, on_create_done);
    if (!p->req) {
      osb_error err;
      osb_error_set(&err, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
      p->state = S_SETTLED;
      p->cb.on_started(p->ud, &err, NULL);
      cleanup(p);
    }
  }
}

static int parse_pid(osb_proc *p, const char *pid) {
  const char *dot = strrchr(pid, '.');
  if (!dot || dot == pid || (size_t)(dot - pid) >= sizeof p->sid || strlen(dot + 1) != 32) return -1;
  for (const char *s = pid; s < dot; s++)
    if (!(isalnum((unsigned char)*s) || *s == '-' || *s == '_')) return -1;
  for (const char *s = dot + 1; *s; s++)
    if (!isxdigit((unsigned char)*s)) return -1;
  memcpy(p->sid, pid, (size_t)(dot - pid));
  p->sid[dot - pid] = 0;
  snprintf(p->nonce, sizeof p->nonce, "%s", dot + 1);
  snprintf(p->pid, sizeof p->pid, "%s", pid);
  return 0;
}

static osb_proc *proc_new(osb_engine *e, osb_ws *ws, const osb_proc_opts *o, const osb_proc_callbacks *cb,
                          void *ud, char *errbuf, size_t errlen, int is_holder) {
  osb_conn execd;
  if (osb_conn_init(&execd, o->base_url, o->header_kv, o->nheaders, o->request_timeout_ms, 0, errbuf, errlen) != 0)
    return NULL;
  if (o->ca_file && osb_conn_set_ca_file(&execd, o->ca_file, errbuf, errlen) != 0) {
    osb_conn_clear(&execd);
    return NULL;
  }
  osb_proc *p = calloc(1, sizeof *p);
  if (!p) {
    osb_conn_clear(&execd);
    goto oom;
  }
  p->is_holder = is_holder;
  p->e = e; /* a holder is written to (by the engine thread) before its start job runs */
  if (!is_holder) __atomic_add_fetch(&g_objects, 1, __ATOMIC_RELAXED);
  p->frame_max = is_holder ? HOLDER_FRAME_MAX : STDIN_FRAME_MAX;
  p->execd = execd;
  p->refs = 2; /* caller + engine side */
  p->ws = ws;
  p->cb = *cb;
  p->ud = ud;
  p->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 0;
  for (int i = 0; i < 2; i++) osb_tail_init(&p->tail[i], o->max_retained);
  if (o->attach_pid) {
    if (parse_pid(p, o->attach_pid) != 0) {
      snprintf(errbuf, errlen, "not a process id of this provider: %.80s", o->attach_pid);
      proc_free(p);
      return NULL;
    }
    p->attach = 1;
    p->since = o->attach_since;
  } else {
    osb_new_request_id(p->nonce);
    p->stdin_pipe = !o->stdin_ignore;
    char *w = osb_proc_wrapper(o, p->nonce, errbuf, errlen);
    if (!w) {
      proc_free(p);
      return NULL;
    }
    cJSON *b = cJSON_CreateObject();
    int ok = b && cJSON_AddStringToObject(b, "command", w) != NULL;
    p->body = ok ? cJSON_PrintUnformatted(b) : NULL;
    cJSON_Delete(b);
    free(w);
    if (!p->body) goto oom;
  }
  osb_pty_markers_init(&p->mk, p->nonce);
  size_t bl = strlen(p->execd.base_url);
  p->ws_base = malloc(bl + 2);
  if (!p->ws_base) goto oom;
  /* http://… -> ws://…, https://… -> wss://… */
  snprintf(p->ws_base, bl + 2, "ws%s", p->execd.base_url + 4);
  p->hdr_kv = calloc(2 * o->nheaders + 1, sizeof(char *));
  if (!p->hdr_kv) goto oom;
  for (size_t i = 0; i < o->nheaders; i++) {
    p->hdr_kv[2 * i] = strdup(o->header_kv[2 * i]);
    p->hdr_kv[2 * i + 1] = strdup(p->execd.secrets[i]); /* the value ("" for NULL) */
    if (!p->hdr_kv[2 * i] || !p->hdr_kv[2 * i + 1]) goto oom;
  }
  if (osb_engine_post(e, start_job, p) != 0) {
    snprintf(errbuf, errlen, "the native engine is shutting down");
    proc_free(p);
    return NULL;
  }
  return p;
oom:
  snprintf(errbuf, errlen, "out of memory");
  if (p) proc_free(p);
  return NULL;
}

osb_proc *osb_proc_start(osb_engine *e, osb_ws *ws, const osb_proc_opts *o, const osb_proc_callbacks *cb,
                         void *ud, char *errbuf, size_t errlen) {
  return proc_new(e, ws, o, cb, ud, errbuf, errlen, 0);
}
