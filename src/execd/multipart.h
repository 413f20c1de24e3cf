/* multipart/form-data bodies of POST /files/upload read as they arrive, the way the real execd reads them (gin's
 * c.MultipartForm: Go's mime/multipart Reader + ReadForm): the parts named "metadata" and "file" that carry a non-empty
 * filename are handed on in order, their bytes as they come; every other part is read and dropped. What Go's reader
 * accepts is accepted: a preamble, transport padding after a delimiter, LF-only lines (decided at the first delimiter),
 * folded header lines, RFC 2231 parameters (name*=, filename*=, continuations), a delimiter-like line inside content
 * (CRLF--boundary followed by a byte that is not '-', space, tab, CR or LF is content), a part with no headers.
 * A part with Content-Transfer-Encoding: quoted-printable is decoded as Go's NextPart decodes it.
 * What Go's reader refuses is XD_MP_BAD (execd answers every one of them 400 "multipart form is empty"): a body cut
 * short, a line where a delimiter was expected, a header line that is not one, more than XD_MP_MAX_PARTS parts, more
 * than XD_MP_VALUE_LIMIT bytes of plain fields, a quoted-printable part Go's decoder refuses. Differences from Go's:
 * a part's header block over XD_MP_HEAD_LIMIT is XD_MP_BAD (Go allows 10 MiB); only ASCII whitespace is trimmed
 * around a disposition's type.
 *
 * Ownership: an xd_mp is its creator's; the bytes handed to callbacks are borrowed for the call. Not thread-safe. */
#ifndef XD_MULTIPART_H
#define XD_MULTIPART_H
#include <stddef.h>

enum {
  XD_MP_OK = 0,
  XD_MP_NOT_MULTIPART = 1, /* no multipart/form-data Content-Type with a boundary: "multipart form is empty" */
  XD_MP_BAD = 2,           /* Go's reader fails on this body: "multipart form is empty" */
  XD_MP_NOMEM = -1,
};

/* Most parts a form may have (Go's ReadForm: the 1,001st part is an error). */
#define XD_MP_MAX_PARTS 1000
/* Most bytes of plain form fields (parts without a filename) a form may have: Go's ReadForm with gin's 32 MiB
 * maxMemory keeps 10 MiB more for them. */
#define XD_MP_VALUE_LIMIT (32u * 1024u * 1024u + 10u * 1024u * 1024u)
/* Largest header block of one part read here. */
#define XD_MP_HEAD_LIMIT (64u * 1024u)
/* Longest line before the first delimiter or between parts (Go's 4 KiB bufio buffer: a longer one is an error). */
#define XD_MP_LINE_LIMIT 4096u

typedef struct {
  /* a part kept begins: kind 1 "metadata", 0 "file" */
  int (*on_part)(void *arg, int kind);
  /* bytes of the part kept (borrowed for the call) */
  int (*on_data)(void *arg, const char *data, size_t len);
  /* its end */
  int (*on_part_end)(void *arg);
} xd_mp_callbacks; /* each returns 0, or non-zero to stop the reader (xd_mp_feed returns XD_MP_NOMEM) */

typedef struct xd_mp xd_mp;

/* A reader for a body whose Content-Type header is content_type ("" when absent): XD_MP_OK with *out, or
 * XD_MP_NOT_MULTIPART / XD_MP_NOMEM (*out NULL). */
int xd_mp_new(const char *content_type, const xd_mp_callbacks *cb, void *arg, xd_mp **out);
/* Reads len more bytes of the body (any split). XD_MP_OK, XD_MP_BAD (the form failed; later calls return it too and
 * call nothing) or XD_MP_NOMEM. Bytes after the final delimiter are ignored. */
int xd_mp_feed(xd_mp *m, const char *data, size_t len);
/* The body ended: XD_MP_OK when the form ended with its final delimiter, else XD_MP_BAD (or XD_MP_NOMEM). */
int xd_mp_finish(xd_mp *m);
void xd_mp_free(xd_mp *m);

#endif
