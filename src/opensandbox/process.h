/* The process table: remote background processes run as execd PTY sessions in pipe mode (POST /pty, WebSocket
 * GET /pty/{id}/ws?pty=0), one osb_proc per process. HTTP runs on the engine thread (http.h), the WebSocket on
 * the lws thread (ws.h); every event is handed to the engine thread, where all state lives.
 *
 * The command runs inside a wrapper shell script that designs out execd's two PTY hazards:
 *  - exit race (the tail of a fast-exiting process lost on the live socket): after the user command ends, the
 *    wrapper prints an end marker with a random nonce on stderr, then one with the exit status on stdout, and waits
 *    (bounded) for an ack line on stdin. The client strips the markers, settles once both arrived (so every byte
 *    written before them has been received), sends the ack, and the session exits only then.
 *  - re-run on reconnect (connecting to an exited session starts the command again): the wrapper starts the command
 *    only on a "go" line, which the client sends to a session without output only (the command never ran). A run
 *    started again by a reconnect sees the client's ack instead and exits; its status comes from the markers in
 *    execd's replay, or is unknown (-1, PROCESS_ENDED_UNSEEN) when GET /pty/{id} said running:false before the
 *    connection and the replay has no markers. Nothing is written in the sandbox's file system.
 * stdin: the user's bytes travel as frames "D<n>\n" + n raw bytes (writes queued together share one frame and one
 *    message, at most 4 MiB of bytes per frame) and end of input as "E\n" (osb_proc_close_stdin); a decoder (bash
 *    reads the header line, dd of coreutils or busybox copies the frame) feeds them through a pipe to the command and
 *    closes it at "E", so programs reading to EOF (wc, sort, compilers) finish. Binary-safe. The decoder is started
 *    at the first frame by the sandbox's stdin holder (one long-lived bash per engine and execd, which holds a
 *    writer of every command's stdin pipe: no fork per process until it is written to), or runs in the wrapper
 *    from the start where the holder cannot be used (see process.c and docs/processes.md).
 *    osb_proc_write's done runs once the bytes are queued (only a write finding more than 8 MiB queued waits until
 *    it is sent; bytes queued at the exit are dropped); at most 2 frames are unacknowledged (the decoder prints a
 *    frame-written marker on stderr after each), what is queued meanwhile is coalesced into the next frame.
 * The go line also keeps output out of the merged replay buffer until the client is attached. The pid is "<session id>.<nonce>": enough for a new process
 * (after a restart) to reattach, replay from a byte offset, send stdin and kill.
 *
 * Output: stdout (0x01) and stderr (0x02) are kept apart; replayed bytes (0x03, stdout and stderr merged by execd)
 * count as stdout. Batches are coalesced per process (every FLUSH ms or 64 KiB) and retained per stream (newest
 * max_retained bytes) in C. Entry points are thread-safe; callbacks run on the engine thread.
 *
 * The WebSocket is never closed while execd may still write to it (its exit and close frames after an exit, a kill
 * or a timeout): the client waits for execd's close, bounded; the real execd relays the SIGPIPE of a write to a
 * closed socket to its foreground command. */
#ifndef OSB_PROCESS_H
#define OSB_PROCESS_H
#include <stddef.h>
#include <stdint.h>
#include "core/engine.h"
#include "core/ws.h"
#include "opensandbox/error.h"

typedef struct osb_proc osb_proc;

typedef struct {
  const char *base_url;           /* execd base URL, http(s)://host:port[/prefix] */
  const char *const *header_kv;   /* 2*nheaders strings: endpoint headers (+ X-EXECD-ACCESS-TOKEN) */
  size_t nheaders;
  long request_timeout_ms;        /* per HTTP request; 0 = 30000 */
  const char *ca_file;            /* PEM CA bundle for https/wss; NULL = osb_tls_default_ca() (tls_ca.h) */
  int64_t max_retained;           /* per stream; < 0 = unbounded */
  /* spawn (attach_pid == NULL) */
  const char *command;            /* non-empty */
  const char *cwd;                /* NULL = execd's default */
  const char *const *env_kv;      /* 2*nenv strings; names must be shell identifiers */
  size_t nenv;
  int stdin_ignore;               /* the command's stdin is /dev/null */
  long timeout_ms;                /* 0 = none; on expiry the process group is killed, exit 124 */
  long ack_wait_s;                /* how long the ended wrapper waits for the client; 0 = 600 */
  /* reattach */
  const char *attach_pid;         /* a pid from osb_proc's on_started (maybe from another process) */
  uint64_t attach_since;          /* replay from this byte offset of the merged output */
} osb_proc_opts;

/* Borrowed during on_exit only. */
typedef struct {
  int exit_code;                  /* the command's status; 124 timed out; 137 killed; -1 unknown (failed) */
  int killed, timed_out;
  const char *error_text;         /* why no exit status is known (session gone, taken over, …), else NULL */
  const char *error_code;         /* with error_text: PROCESS_GONE (session 404), PROCESS_TAKEN_OVER (4001),
                                   * PROCESS_CONNECTION_LOST (no working connection within the 10 s reconnect
                                   * window), WS_CONNECT_FAILED, OUT_OF_MEMORY or SHUTDOWN */
  const char *out, *err;          /* retained output */
  size_t out_len, err_len;
  uint64_t out_dropped, err_dropped;
} osb_proc_exit;

typedef struct {
  /* Exactly once: err == NULL with the pid, or err (then nothing else follows). A reattach reports it after the
   * output execd replays (its replay frame precedes its connected frame), which on_output got first. */
  void (*on_started)(void *ud, const osb_error *err, const char *pid);
  /* Batches in arrival order, every byte (before retention). */
  void (*on_output)(void *ud, const char *out, size_t out_len, const char *err, size_t err_len);
  /* Exactly once after a successful start. Output batches all come before it. */
  void (*on_exit)(void *ud, const osb_proc_exit *x);
} osb_proc_callbacks;

/* err NULL = success. Called once, on the engine thread. */
typedef void (*osb_proc_done_fn)(void *ud, const osb_error *err, int flag);

/* Spawns (or reattaches to) a process. Returns a handle with one reference for the caller, or NULL + errbuf
 * (bad input; no callback then). */
osb_proc *osb_proc_start(osb_engine *e, osb_ws *ws, const osb_proc_opts *o, const osb_proc_callbacks *cb,
                         void *ud, char *errbuf, size_t errlen);
/* Writes to the process's stdin (queued while (re)connecting). done(err, 0) once handed to the socket; err when
 * the process has exited (code PROCESS_EXITED). Returns -1 when the engine is stopping (done not called). */
int osb_proc_write(osb_proc *p, const void *data, size_t n, osb_proc_done_fn done, void *ud);
/* Ends the process's stdin (the wrapper closes the command's stdin pipe after every byte written before): done(NULL,
 * 0) once the end-of-input frame is handed to the socket, or at once when the process has exited or stdin is
 * already closed. Later writes fail with code STDIN_CLOSED. Returns -1 when the engine is stopping. */
int osb_proc_close_stdin(osb_proc *p, osb_proc_done_fn done, void *ud);
/* Kills the process group (DELETE /pty/{id}, confirmed by the server). done(NULL, 1) when it was running and is
 * now killed (on_exit reports killed), done(NULL, 0) when it had already exited. */
int osb_proc_kill(osb_proc *p, osb_proc_done_fn done, void *ud);
/* Flow control, thread-safe: the consumer of on_output reports each batch's bytes (out_len + err_len) once it has
 * processed them. Above 8 MiB handed out and not consumed, the process's socket stops being read (execd then stops
 * reading the process's pipes, which blocks the writer); below 1 MiB it resumes. */
void osb_proc_consumed(osb_proc *p, size_t n);
/* Thread-safe reference counting (osb_proc_start's handle holds one). */
void osb_proc_retain(osb_proc *p);
void osb_proc_release(osb_proc *p);
/* Processes alive in the table (started and not yet cleaned up), process-wide (all addon instances). */
long osb_proc_count(void);
/* Process objects not yet freed (still referenced, e.g. by a JS handle; each keeps its retained output), process-wide. */
long osb_proc_object_count(void);
/* Processes whose socket is paused by flow control, process-wide. */
long osb_proc_paused_count(void);
/* stdin holders (process.c) alive in the table, process-wide: not counted in osb_proc_count. */
long osb_proc_holder_count(void);

/* ---- exposed for tests ---- */
/* Builds the wrapper script (malloc'd) for a command; NULL + err on bad input. nonce: 32 hex chars. */
char *osb_proc_wrapper(const osb_proc_opts *o, const char *nonce, char *err, size_t errlen);
/* The stdin holder's script (static; see process.c and docs/processes.md): bash -c it, its stdin the request pipe. */
const char *osb_proc_holder_script(void);
/* A request to the holder is a record of OSB_HOLDER_REQ_LEN bytes (its text padded with spaces, then a newline).
 * Writes the record of request req ('S', 'C' or 'K') for the process with nonce (32 hex chars) into out (no NUL),
 * passed on by the holder to holder pid forward_to when that is not 0 ("F <pid> <req> <nonce>"); its length, or 0. */
#define OSB_HOLDER_REQ_LEN 64
size_t osb_proc_holder_request(char out[OSB_HOLDER_REQ_LEN], long forward_to, char req, const char *nonce);

#endif
