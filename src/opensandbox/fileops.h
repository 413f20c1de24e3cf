/* execd's files and directories API beyond the upload (files.h): info, remove, move, permissions, search (glob),
 * replace, directory list/create/remove, and download (Range) into one buffer; and the egress sidecar's /policy
 * calls (get, patch rules, delete rules), the same one-request shape on another endpoint. Each call is one HTTP request on
 * the engine with a deadline and can be cancelled. The URL (query parameters percent-encoded here) and the JSON
 * bodies (cJSON) are built on the caller's thread; JSON answers are checked with cJSON before they are handed on.
 * Ownership: the request copies every string it is given; the answer handed to `done` (JSON text or file bytes)
 * is malloc'd and belongs to the callback from then on (free() it). Errors are osb_error values (execd's
 * {"code","message"} bodies included). */
#ifndef OSB_FILEOPS_H
#define OSB_FILEOPS_H
#include <stddef.h>
#include "core/buf.h"
#include "core/engine.h"
#include "opensandbox/conn.h"
#include "opensandbox/error.h"

typedef enum {
  OSB_FOP_INFO,     /* GET /files/info?path=…(npaths)          -> JSON object {"<path>": FileInfo} */
  OSB_FOP_REMOVE,   /* DELETE /files?path=…(npaths)            -> nothing */
  OSB_FOP_LIST,     /* GET /directories/list?path=&depth=num   -> JSON array [FileInfo] */
  OSB_FOP_SEARCH,   /* GET /files/search?path=&pattern=text    -> JSON array [FileInfo] (text NULL = every file) */
  OSB_FOP_MKDIR,    /* POST /directories {"<path>":{"mode":num}} (mkdir -p; num 0 = execd's default) */
  OSB_FOP_RMDIR,    /* DELETE /directories?path=…(npaths)      (rm -rf) */
  OSB_FOP_MOVE,     /* POST /files/mv [{"src":paths[0],"dest":paths[1]}] */
  OSB_FOP_CHMOD,    /* POST /files/permissions {"<path>":{"mode":num}} */
  OSB_FOP_REPLACE,  /* POST /files/replace?verbose=true {"<path>":{"old":text,"new":text2}} -> JSON object */
  OSB_FOP_DOWNLOAD, /* GET /files/download?path= (+ Range: bytes=range_start-range_end) -> the bytes */
  /* The egress sidecar's /policy API (upstream components/egress) on a sandbox's port 18080 endpoint (conn: that
   * endpoint and its OPENSANDBOX-EGRESS-AUTH header), here because it is the same one-request shape: */
  OSB_FOP_POLICY_GET,    /* GET /policy                             -> the answer's "policy" object (JSON) */
  OSB_FOP_POLICY_PATCH,  /* PATCH /policy [{"action":paths[2i],"target":paths[2i+1]}] (npaths even, >= 2) */
  OSB_FOP_POLICY_DELETE  /* DELETE /policy ["<paths[i]>"…] (targets, npaths >= 1) */
} osb_fop_kind;

typedef struct {
  osb_fop_kind kind;
  const char *const *paths; /* absolute paths inside the sandbox; INFO/REMOVE/RMDIR: npaths >= 1, MOVE: 2, else 1;
                               the POLICY kinds: rule actions/targets or targets (see above), not paths */
  size_t npaths;
  const char *text;  /* SEARCH pattern, REPLACE old */
  const char *text2; /* REPLACE new */
  long num;          /* LIST depth (>= 0), MKDIR/CHMOD mode as octal digits (755) */
  long long range_start; /* DOWNLOAD: first byte; < 0 = the whole file */
  long long range_end;   /* DOWNLOAD: last byte (inclusive); < 0 = to the end */
  size_t size_hint;  /* DOWNLOAD: expected length, reserved up front; else the response's Content-Length (within
                        max_bytes) is: one allocation for the whole file either way */
  size_t max_bytes;  /* DOWNLOAD: more than this fails with RESPONSE_TOO_LARGE; 0 = no limit */
  long timeout_ms;   /* whole request; 0 = none */
} osb_fop_req;

typedef struct osb_fop osb_fop;

/* err NULL = success, then data/len is the answer (JSON text NUL-terminated, or the downloaded bytes with a NUL
 * after them; NULL/0 for kinds without an answer); the callback owns data. Called exactly once, on the engine
 * thread; err is borrowed. */
typedef void (*osb_fop_done_fn)(void *ud, const osb_error *err, char *data, size_t len);

/* Starts one operation over conn (copied). Returns a handle holding one reference for the caller
 * (osb_fop_release), or NULL with errbuf set on bad input (done never called). */
osb_fop *osb_fop_start(osb_engine *e, const osb_conn *conn, const osb_fop_req *req, osb_fop_done_fn done, void *ud,
                       char *errbuf, size_t errlen);
/* Thread-safe: ends the operation early; done then reports a cancelled error (no-op once finished). */
void osb_fop_cancel(osb_engine *e, osb_fop *op);
void osb_fop_release(osb_fop *op);

/* Percent-encodes s for a query value into b (RFC 3986 unreserved characters kept). Returns 0 or -1 (OOM). */
int osb_query_escape(osb_buf *b, const char *s);

#endif
