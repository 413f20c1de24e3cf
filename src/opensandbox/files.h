/* execd file upload: POST /files/upload with many (metadata, file) multipart pairs in one request. The metadata
 * part is a file part named "metadata" (execd rejects a plain field), the file part is binary. The multipart body
 * is built on the caller's thread; the request runs on the engine through the shared HTTP module with a deadline
 * and can be cancelled. Errors are osb_error values (execd's {"error": …} bodies included). */
#ifndef OSB_FILES_H
#define OSB_FILES_H
#include <stddef.h>
#include "core/engine.h"
#include "opensandbox/error.h"

typedef struct osb_upload osb_upload;

typedef struct {
  const char *path; /* absolute path inside the sandbox, UTF-8 */
  int mode;         /* octal digits as a decimal integer (644 = 0644); 0 = execd's default */
  const char *data; /* bytes, copied */
  size_t len;
} osb_upload_file;

/* err NULL = success. Called exactly once, on the engine thread; err is borrowed. */
typedef void (*osb_upload_done_fn)(void *ud, const osb_error *err);

/* Starts the upload of n >= 1 files to `${base_url}/files/upload` with the endpoint headers (2*nheaders strings;
 * their values are treated as secrets in error messages). ca_file: PEM CA bundle for https (NULL = the default,
 * core/tls_ca.h). timeout_ms: whole request (0 = none). Returns a handle holding one reference for the caller
 * (osb_upload_release), or NULL with errbuf set (done never called). */
osb_upload *osb_upload_start(osb_engine *e, const char *base_url, const char *const *header_kv, size_t nheaders,
                             const char *ca_file, const osb_upload_file *files, size_t n, long timeout_ms,
                             osb_upload_done_fn done, void *ud, char *errbuf, size_t errlen);
/* Thread-safe: ends the upload early; done then reports a cancelled error (no-op once finished). */
void osb_upload_cancel(osb_engine *e, osb_upload *u);
void osb_upload_release(osb_upload *u);

/* Is mode execd's octal-digits-as-decimal form (0..7777, no digit 8 or 9)? Also used by fileops.c. */
int osb_mode_valid(long mode);

#endif
