/* execd client: readiness (/ping loop) and foreground commands (/command event stream). A command is finished
 * at its final event (execution_complete or error): the result is delivered at once and the transfer closed,
 * never waiting for execd's 1 s idle tail. Output is reconstructed per line event ("\n" stays "\n", other text
 * gets "\n" appended), retained (newest maxRetainedBytes per stream) and forwarded in batches. Timeout and
 * cancel stop the remote command with DELETE /command?id=<id>. Headers are the endpoint's (never the
 * lifecycle API key). Entry points are thread-safe; callbacks run on the engine thread. */
#ifndef OSB_EXECD_H
#define OSB_EXECD_H
#include <stddef.h>
#include <stdint.h>
#include "core/engine.h"
#include "opensandbox/conn.h"
#include "opensandbox/error.h"

/* The client is an execd connection: make it with osb_conn_new (header_kv: 2*nheaders strings, copied;
 * timeout_ms: deadline of plain requests, default 30000; idle_timeout_ms: stream watchdog, default 10000), trust a
 * CA bundle with osb_conn_set_ca_file, free it with osb_conn_free. */
typedef struct osb_conn osb_exec;
typedef struct osb_exec_cmd osb_exec_cmd;

/* err NULL = success. Called once, on the engine thread; err is borrowed. */
typedef void (*osb_exec_done_fn)(void *ud, const osb_error *err);

/* GET /ping every 200 ms until a 2xx or the deadline (timeout kind, code READY_TIMEOUT). 401/403 fail at once.
 * Returns 0 when queued, -1 (errbuf) otherwise. */
int osb_exec_wait_ready(osb_engine *e, const osb_exec *x, long timeout_ms, osb_exec_done_fn done, void *ud,
                        char *errbuf, size_t errlen);

typedef struct {
  const char *command;          /* required, non-empty */
  const char *cwd;              /* NULL = execd's default */
  const char *const *env_kv;    /* 2*nenv strings */
  size_t nenv;
  long timeout_ms;              /* 0 = none */
  int64_t max_retained;         /* per stream; < 0 = unbounded */
  size_t output_high_water;     /* flow control: undelivered output above this pauses the stream; 0 = 8 MiB */
} osb_exec_run_opts;

/* Borrowed during on_result only. */
typedef struct {
  int exit_code;
  const char *out, *err;        /* retained stdout/stderr */
  size_t out_len, err_len;
  uint64_t out_dropped, err_dropped;
  double execution_time_ms;
  const char *command_id;       /* "" if execd sent no init */
  int timed_out, cancelled;
  const char *error_text;       /* NULL when none */
} osb_exec_result;

typedef struct {
  /* A batch of output, in arrival order, every byte (before retention). Either part may be empty. */
  void (*on_output)(void *ud, const char *out, size_t out_len, const char *err, size_t err_len);
  /* Exactly once: err == NULL with res, or err with res == NULL. Output batches all come before it. */
  void (*on_result)(void *ud, const osb_error *err, const osb_exec_result *res);
} osb_exec_callbacks;

/* Starts a command. Returns a handle holding one reference for the caller (release it with
 * osb_exec_cmd_release), or NULL with errbuf set (callbacks never called). */
osb_exec_cmd *osb_exec_run(osb_engine *e, const osb_exec *x, const osb_exec_run_opts *o,
                           const osb_exec_callbacks *cb, void *ud, char *errbuf, size_t errlen);
/* Cancels: DELETE /command?id=…, then the result resolves with cancelled=1 and the output so far. done is
 * called once the command is settled (immediately when it already was). Returns 0 or -1 (engine stopping). */
int osb_exec_cancel(osb_engine *e, osb_exec_cmd *c, osb_exec_done_fn done, void *ud);
/* Flow control, thread-safe: the consumer of on_output reports n bytes handled. Output handed to on_output and
 * not yet reported counts against output_high_water; above it the stream is paused (TCP backpressure on execd)
 * until the outstanding bytes drop to a quarter of it. A consumer that never reports makes a chatty command
 * stall: report every batch. */
void osb_exec_output_consumed(osb_engine *e, osb_exec_cmd *c, size_t n);
/* Thread-safe reference counting of the handle. */
void osb_exec_cmd_retain(osb_exec_cmd *c);
void osb_exec_cmd_release(osb_exec_cmd *c);

#endif
