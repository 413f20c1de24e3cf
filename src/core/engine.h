/* The engine: one per addon instance. A private uv_loop_t (Node's libuv, never Node's main loop) on its own
 * thread, a job queue under a mutex woken with uv_async_send, and the HTTP context (curl multi, see http.h).
 * Everything that owns loop handles registers itself as an "active" so that osb_engine_stop can abort it. */
#ifndef OSB_ENGINE_H
#define OSB_ENGINE_H
#include <stddef.h>
#include <uv.h>

typedef struct osb_engine osb_engine;
struct osb_http_ctx;

/* Runs on the engine thread. shutdown != 0: the engine is stopping; the job must only release what it owns
 * (and complete its caller with a "shutdown" error). */
typedef void (*osb_job_fn)(osb_engine *e, void *arg, int shutdown);

/* Starts the engine thread. Returns NULL (message in err) on failure. Caller owns the engine and must
 * osb_engine_stop it. Thread-safe; calls curl_global_init once per process. */
osb_engine *osb_engine_start(char *err, size_t errlen);
/* Thread-safe. Returns 0 when queued: fn is then called exactly once on the engine thread. Returns -1 when the
 * engine is stopping (fn is not called). Ownership of arg stays with the caller's protocol. */
int osb_engine_post(osb_engine *e, osb_job_fn fn, void *arg);
/* Stops the engine from any thread but its own: queued jobs run with shutdown=1, every active is aborted, the
 * HTTP context is torn down, the thread is joined and e is freed. */
void osb_engine_stop(osb_engine *e);

typedef struct {
  long requests_in_flight; /* HTTP transfers started and not finished */
  long sockets;            /* sockets currently open (including idle keep-alive connections) */
  long actives;            /* loop-thread objects alive (requests, commands, waits) */
  long paused;             /* transfers paused by flow control (output not yet consumed by JS) */
  long requests_started;   /* HTTP requests started since the engine started (a retried request counts once) */
} osb_engine_stats;
/* Thread-safe snapshot. */
void osb_engine_get_stats(osb_engine *e, osb_engine_stats *out);

/* ---- engine-thread only ---- */
uv_loop_t *osb_engine_loop(osb_engine *e);
struct osb_http_ctx *osb_engine_http(osb_engine *e);
/* Monotonic milliseconds of the engine loop. */
uint64_t osb_engine_now(osb_engine *e);

/* An object with loop handles. abort() must remove it (osb_engine_remove_active) and complete it. */
typedef struct osb_active {
  struct osb_active *next, *prev;
  void (*abort)(struct osb_active *a);
} osb_active;
void osb_engine_add_active(osb_engine *e, osb_active *a);
void osb_engine_remove_active(osb_engine *e, osb_active *a);

/* Counters kept by the HTTP layer (atomic). */
void osb_engine_count(osb_engine *e, int which, long delta);
enum { OSB_COUNT_REQUESTS = 0, OSB_COUNT_SOCKETS = 1, OSB_COUNT_PAUSED = 2, OSB_COUNT_STARTED = 3, OSB_COUNT_N = 4 };

#endif
