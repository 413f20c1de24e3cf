/* The framing readers of the C execd's reverse proxy (proxy.c, `ANY /proxy/{port}/{path}`), exposed for its test and
 * fuzz target: an incremental chunked-body decoder (requests from the client, answers from the sandbox's service)
 * and the reader of an answer head from the service, which also writes the head the client gets. Both read bytes
 * from the network: every length and count is bounded, nothing is trusted.
 *
 * Ownership: an xd_chunked is the caller's (no allocation inside); xd_proxy_answer_head appends to the caller's
 * osb_buf and points *why at static text or the caller's buffer. */
#ifndef XD_PROXY_H
#define XD_PROXY_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/buf.h"

/* A chunk-size or trailer line may not exceed this; the trailer section in all XD_PROXY_HEAD_LIMIT (server.c's
 * rules for the request bodies it reads itself). */
#define XD_PROXY_LINE_LIMIT 4096u
/* An answer head from the service larger than this is refused (Node's HTTP client: HPE_HEADER_OVERFLOW at 16 KiB). */
#define XD_PROXY_HEAD_LIMIT (16u * 1024u)

typedef struct {
  int state;
  uint64_t size; /* the chunk size being read, then what is left of the chunk's data */
  int digits;
  size_t line;   /* bytes of the current size or trailer line */
  size_t trailer; /* bytes of the trailer section */
} xd_chunked;

/* A fresh decoder (all zero is one too). */
void xd_chunked_init(xd_chunked *d);
/* Feeds n bytes: each piece of chunk data goes to on_data(arg, data, len) (data points into p). Returns how many bytes
 * belong to the body (it stops after the terminating chunk and its trailer: the rest is the next message's), or -1 on
 * bad framing (a malformed size line, a chunk not followed by CRLF, a line over XD_PROXY_LINE_LIMIT, a trailer section
 * over XD_PROXY_HEAD_LIMIT, a size over 2^56). */
ssize_t xd_chunked_feed(xd_chunked *d, const char *p, size_t n, void (*on_data)(void *arg, const char *data, size_t len),
                        void *arg);
/* The body ended (the terminating chunk and its trailer are read). */
int xd_chunked_done(const xd_chunked *d);

/* How the body of an answer ends */
enum { XD_PROXY_NONE, XD_PROXY_LENGTH, XD_PROXY_CHUNKED, XD_PROXY_CLOSE };

typedef struct {
  int status;        /* 0..999 */
  int informational; /* a 1xx answer: not passed on, the real answer follows it */
  int framing;       /* XD_PROXY_*: how the service's body ends (XD_PROXY_NONE: it has none) */
  uint64_t length;   /* XD_PROXY_LENGTH: its Content-Length */
  int chunk_out;     /* the client's answer is sent chunked (a body whose length is not known in advance) */
  size_t head_len;   /* bytes of the head in the input */
} xd_proxy_head;

/* Reads the answer head at buf[0..len) from the service. Returns
 *   1  complete: *h set; unless it is informational, the client's head is appended to *out: the status line with the
 *      service's reason phrase (Node's standard text when it has none), the service's headers in order without the
 *      hop-by-hop ones, then `Date: <date>` when it sent none, `Connection: close` when `close`, and
 *      `Transfer-Encoding: chunked` when h->chunk_out;
 *   0  incomplete (no error so far);
 *  -1  not HTTP (*why: the code Node's HTTP client gives, e.g. "HPE_INVALID_STATUS", "HPE_HEADER_OVERFLOW");
 *  -2  out of memory;
 *  -3  HTTP that Node's server cannot pass on (*why e.g. "Invalid status code: 99", written into whybuf).
 * head_request: the request was a HEAD (the answer has no body whatever it says). */
int xd_proxy_answer_head(const char *buf, size_t len, int head_request, int close, const char *date, xd_proxy_head *h,
                         osb_buf *out, const char **why, char *whybuf, size_t whycap);

#endif
