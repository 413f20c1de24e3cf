/* Code interpreter client: execd's /code API (Jupyter-style contexts). Contexts are created, listed, fetched
 * and deleted with plain JSON requests; a cell runs as an event stream (POST /code) that is DONE ONLY AT END OF
 * STREAM (a real Jupyter-backed execd can send execution_complete before the output). Output is parsed and
 * bounded here: the first max_output bytes per stream (stdout, stderr) are kept and forwarded in batches, the
 * rest is counted and discarded while the stream is still drained to its end; result MIME bundles are kept up
 * to max_results bytes. Every call has a deadline: plain requests the client's request timeout, a cell the idle
 * watchdog (execd pings every 3 s) plus an optional cell timeout that interrupts the kernel
 * (DELETE /code?id=<context>). A bare {code,message} object in the stream (busy context) fails the run with a
 * stream error. Headers are the endpoint's (never the lifecycle API key). Entry points are thread-safe;
 * callbacks run on the engine thread. */
#ifndef OSB_CODE_H
#define OSB_CODE_H
#include <stddef.h>
#include <stdint.h>
#include "core/engine.h"
#include "opensandbox/conn.h"
#include "opensandbox/error.h"

/* The client is an execd connection: make it with osb_conn_new (header_kv: 2*nheaders strings, copied;
 * timeout_ms: deadline of plain requests, default 30000; idle_timeout_ms: stream watchdog, default 10000), trust a
 * CA bundle with osb_conn_set_ca_file, free it with osb_conn_free. */
typedef struct osb_conn osb_code;
typedef struct osb_code_run osb_code_run;

/* Called once on the engine thread. Success: err NULL and json = the response body (malloc'd, NUL-terminated,
 * owned by the callee; "" when the server answered with an empty body). Failure: err set (borrowed), json NULL. */
typedef void (*osb_code_done_fn)(void *ud, const osb_error *err, char *json);

/* Plain requests. All return 0 when queued (done will be called once), -1 with errbuf set otherwise.
 * timeout_ms <= 0 = the client's request timeout. */
/* POST /code/context {"language","cwd"?} -> {"id","language"} */
int osb_code_create_context(osb_engine *e, const osb_code *x, const char *language, const char *cwd,
                            long timeout_ms, osb_code_done_fn done, void *ud, char *errbuf, size_t errlen);
/* GET /code/contexts[?language=] -> [{"id","language"}]; language NULL/"" = all */
int osb_code_list_contexts(osb_engine *e, const osb_code *x, const char *language, osb_code_done_fn done,
                           void *ud, char *errbuf, size_t errlen);
/* GET /code/contexts/{id} -> {"id","language"} (404 when unknown) */
int osb_code_get_context(osb_engine *e, const osb_code *x, const char *id, osb_code_done_fn done, void *ud,
                         char *errbuf, size_t errlen);
/* DELETE /code/contexts/{id} (404 when unknown) */
int osb_code_delete_context(osb_engine *e, const osb_code *x, const char *id, osb_code_done_fn done, void *ud,
                            char *errbuf, size_t errlen);
/* DELETE /code/contexts?language= */
int osb_code_delete_contexts(osb_engine *e, const osb_code *x, const char *language, osb_code_done_fn done,
                             void *ud, char *errbuf, size_t errlen);
/* DELETE /code?id= : interrupts the cell running in a context */
int osb_code_interrupt(osb_engine *e, const osb_code *x, const char *id, osb_code_done_fn done, void *ud,
                       char *errbuf, size_t errlen);

typedef struct {
  const char *code;       /* required, non-empty */
  const char *language;   /* required, non-empty (without it execd would run the code as a shell command) */
  const char *context_id; /* NULL/"" = the server's default context for the language */
  long timeout_ms;        /* cell timeout; 0 = none (the idle watchdog still applies) */
  int64_t max_output;     /* bytes kept per stream (stdout, stderr); < 0 = unbounded */
  int64_t max_results;    /* bytes of result bundles (JSON text) kept; < 0 = unbounded */
  int64_t max_event_bytes; /* bytes of one stream event parsed whole (0 = OSB_EVENTS_DEFAULT_MAX_LINE); a larger
                            * stdout/stderr event keeps the start of its text (the rest counted as dropped), any
                            * other larger event is counted (results) or reported (error) */
} osb_code_run_opts;

/* Borrowed during on_result only. */
typedef struct {
  const char *context_id;        /* init.text, "" if none arrived */
  long execution_count;          /* -1 if none arrived */
  double execution_time_ms;      /* execution_complete's execution_time, else our wall clock */
  int completed;                 /* an execution_complete event arrived */
  const char *status;            /* last status event text ("error"), NULL if none */
  const char *out, *err;         /* kept stdout/stderr (UTF-8, cut on a character boundary) */
  size_t out_len, err_len;
  uint64_t out_dropped, err_dropped; /* bytes received beyond max_output */
  const char *results_json;      /* JSON array of the kept result bundles ("[]" when none) */
  size_t results_count;          /* bundles kept */
  size_t results_dropped;        /* bundles dropped over max_results */
  int has_error;                 /* an error event arrived */
  const char *ename, *evalue;    /* error: "" when absent */
  const char *const *traceback;  /* error: lines */
  size_t ntraceback;
  int timed_out;                 /* the cell timeout elapsed (the kernel was interrupted) */
  int interrupted;               /* osb_code_run_interrupt was called */
  int stream_cut;                /* we closed the stream ourselves (the server did not end it after an interrupt) */
} osb_code_result;

typedef struct {
  /* A batch of kept output, in arrival order. Either part may be empty. */
  void (*on_output)(void *ud, const char *out, size_t out_len, const char *err, size_t err_len);
  /* Exactly once: err == NULL with res, or err with res == NULL. Output batches all come before it. */
  void (*on_result)(void *ud, const osb_error *err, const osb_code_result *res);
} osb_code_callbacks;

/* Starts a cell. Returns a handle holding one reference for the caller (release with osb_code_run_release),
 * or NULL with errbuf set (callbacks never called). */
osb_code_run *osb_code_run_start(osb_engine *e, const osb_code *x, const osb_code_run_opts *o,
                                 const osb_code_callbacks *cb, void *ud, char *errbuf, size_t errlen);
/* Interrupts the cell: DELETE /code?id=<context> (at init when it has not arrived yet), then waits for the end
 * of the stream (bounded). done(ud, err) is called once the DELETE was answered (err NULL when it was sent and
 * answered 2xx, or the run was already settled). Returns 0, or -1 when the engine is stopping. */
int osb_code_run_interrupt(osb_engine *e, osb_code_run *r, void (*done)(void *ud, const osb_error *err), void *ud);
/* Thread-safe. */
void osb_code_run_release(osb_code_run *r);

#endif
