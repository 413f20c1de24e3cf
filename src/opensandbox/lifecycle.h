/* Lifecycle client: the OpenSandbox sandboxes API (POST/GET/DELETE /sandboxes…, pause, resume, renew,
 * endpoints, metadata) and its snapshots (POST /sandboxes/{id}/snapshots, GET/DELETE /snapshots/{id}, GET /snapshots). Requests carry OPEN-SANDBOX-API-KEY (only here, never to execd), an X-Request-ID we
 * generate, Accept/Content-Type JSON. Idempotent GETs retry connection failures within the deadline.
 * Thread-safe entry points: each call copies what it needs and posts a job to the engine. */
#ifndef OSB_LIFECYCLE_H
#define OSB_LIFECYCLE_H
#include <stddef.h>
#include "core/engine.h"
#include "opensandbox/error.h"

typedef struct osb_lc osb_lc;

/* Returns a client (caller frees with osb_lc_free) or NULL with a message in err. base_url must be http(s)://…;
 * api_key may be NULL. Nothing is kept borrowed. */
osb_lc *osb_lc_new(const char *base_url, const char *api_key, long timeout_ms, char *err, size_t errlen);
void osb_lc_free(osb_lc *lc);
/* https: trust the PEM CA bundle at path (copied) instead of the default CAs (core/tls_ca.h). Returns 0, or -1 (message)
 * when the file is not readable. Call before the first request. */
int osb_lc_set_ca_file(osb_lc *lc, const char *path, char *err, size_t errlen);

/* Called once on the engine thread. On success err is NULL and json is the response body (malloc'd,
 * NUL-terminated; the callee owns it and must free it) or NULL for routes without a body. On failure err is
 * set (borrowed) and json is NULL. date (borrowed, NULL when none) is the response's HTTP Date header, success or
 * failure: the server clock at the answer, to the second. */
typedef void (*osb_lc_done_fn)(void *ud, const osb_error *err, char *json, const char *date);

/* All return 0 when the call was queued (done will be called), -1 when it could not be queued (message in
 * errbuf; done is not called). */
int osb_lc_create(osb_engine *e, const osb_lc *lc, const char *request_json, osb_lc_done_fn done, void *ud,
                  char *errbuf, size_t errlen);
int osb_lc_get(osb_engine *e, const osb_lc *lc, const char *id, osb_lc_done_fn done, void *ud, char *errbuf,
               size_t errlen);
/* meta_kv: 2*nmeta strings (k0, v0, k1, v1, …); states: nstates strings; page/page_size 0 = omitted. */
int osb_lc_list(osb_engine *e, const osb_lc *lc, const char *const *meta_kv, size_t nmeta,
                const char *const *states, size_t nstates, long page, long page_size, osb_lc_done_fn done,
                void *ud, char *errbuf, size_t errlen);
int osb_lc_delete(osb_engine *e, const osb_lc *lc, const char *id, osb_lc_done_fn done, void *ud, char *errbuf,
                  size_t errlen);
int osb_lc_pause(osb_engine *e, const osb_lc *lc, const char *id, osb_lc_done_fn done, void *ud, char *errbuf,
                 size_t errlen);
int osb_lc_resume(osb_engine *e, const osb_lc *lc, const char *id, osb_lc_done_fn done, void *ud, char *errbuf,
                  size_t errlen);
int osb_lc_renew(osb_engine *e, const osb_lc *lc, const char *id, const char *expires_at, osb_lc_done_fn done,
                 void *ud, char *errbuf, size_t errlen);
int osb_lc_endpoint(osb_engine *e, const osb_lc *lc, const char *id, long port, int use_server_proxy,
                    osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen);
/* patch_json: a JSON merge patch object built by the caller ({"k":"v","gone":null}). */
int osb_lc_patch_metadata(osb_engine *e, const osb_lc *lc, const char *id, const char *patch_json,
                          osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen);

/* Snapshots. create: POST /sandboxes/{sandbox_id}/snapshots with {"name": name} ({} when name is NULL; "" is
 * refused), resolves the 202 Snapshot (state Creating). get: GET /snapshots/{id}. delete: DELETE (204, no body).
 * list: GET /snapshots, sandbox_id NULL = every sandbox, states OR-ed, page/page_size 0 = omitted. */
int osb_lc_snapshot_create(osb_engine *e, const osb_lc *lc, const char *sandbox_id, const char *name,
                           osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen);
int osb_lc_snapshot_get(osb_engine *e, const osb_lc *lc, const char *snapshot_id, osb_lc_done_fn done, void *ud,
                        char *errbuf, size_t errlen);
int osb_lc_snapshot_delete(osb_engine *e, const osb_lc *lc, const char *snapshot_id, osb_lc_done_fn done,
                           void *ud, char *errbuf, size_t errlen);
int osb_lc_snapshot_list(osb_engine *e, const osb_lc *lc, const char *sandbox_id, const char *const *states,
                         size_t nstates, long page, long page_size, osb_lc_done_fn done, void *ud, char *errbuf,
                         size_t errlen);

/* Shared with the execd client: a random request id (32 hex chars + NUL). */
void osb_new_request_id(char out[33]);
/* URL-escapes s (malloc'd result, NULL on OOM). */
char *osb_url_escape(const char *s);
/* Validates a base URL: http:// or https://, no whitespace/control characters. Returns 0 or -1 (message). */
int osb_check_base_url(const char *url, char *err, size_t errlen);
/* Checks that a CA file is readable. Returns 0 or -1 (message). */
int osb_check_ca_file(const char *path, char *err, size_t errlen);
/* Validates a header name/value pair (no CR/LF/NUL, token name). Returns 0 or -1. */
int osb_check_header(const char *name, const char *value, char *err, size_t errlen);

#endif
