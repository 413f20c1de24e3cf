/* multipart/form-data bodies of POST /files/upload as the Node execd reads them (busboy, in
 * lib/dev-server/execd/files-upload.js): the parts named "metadata" and "file" that carry a filename, in order.
 * A strict reader: what it does not read exactly as busboy does (a preamble, folded or non-ASCII header lines,
 * headers other than Content-Disposition and Content-Type, RFC 2231 parameters, backslashes in quoted strings, an
 * empty filename, a body cut short, more than 1,000 parts, a metadata part over 1 MiB) is XD_MP_OTHER, for the
 * caller to decline the request (the server's 404). Pure function over caller-owned bytes; no state. */
#ifndef XD_MULTIPART_H
#define XD_MULTIPART_H
#include <stddef.h>

typedef struct {
  int is_metadata;  /* 1: a "metadata" part, 0: a "file" part */
  const char *data; /* the part's bytes, inside the body given */
  size_t len;
} xd_mp_part;

enum {
  XD_MP_OK = 0,
  XD_MP_NOT_MULTIPART = 1, /* the Content-Type does not start with multipart/form-data: "multipart form is empty" */
  XD_MP_OTHER = 2,         /* not read here (see above) */
  XD_MP_NOMEM = -1,
};

/* Most parts a form may have (Go's ReadForm; the Node execd's busboy partsLimit). */
#define XD_MP_MAX_PARTS 1000
/* Largest metadata part (files-upload.js METADATA_LIMIT). */
#define XD_MP_METADATA_LIMIT (1024u * 1024u)

/* Reads body (len bytes) of a request whose Content-Type header is content_type ("" when absent). XD_MP_OK with
 * *parts (malloc'd array, the caller frees; NULL when none) and *nparts; any other value leaves both NULL/0. */
int xd_multipart_parse(const char *content_type, const char *body, size_t len, xd_mp_part **parts, size_t *nparts);

#endif
