/* The server side of the WebSocket protocol (RFC 6455) for the C execd's PTY API (wsproto.c), as the `ws` npm library
 * (v8) behaves with the Node execd's options (no permessage-deflate, maxPayload 16 MiB): the handshake's key check and
 * Sec-WebSocket-Accept, the headers and close bodies of the server's (unmasked) frames, and an incremental parser of
 * the client's (masked) frames. A pure module: bytes in, callbacks and bytes out; no I/O, no libuv, no threads.
 *
 * Ownership: the parser's only allocation is the data message being assembled (grown as its bytes arrive, never to
 * more than the payload its frames announced, at most XD_WS_MAX_PAYLOAD; up to 64 KiB kept for the next message),
 * owned by the parser and released by xd_ws_parser_free, an error or the close frame, unless on_buffer supplied it or
 * xd_ws_take_message took it). Data passed to a callback is
 * the parser's: valid only during the call. One thread at a time. */
#ifndef XD_WSPROTO_H
#define XD_WSPROTO_H
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"

/* A message (all its fragments) larger than this: close 1009 (the Node execd's maxPayload). */
#define XD_WS_MAX_PAYLOAD (16u * 1024u * 1024u)

/* ws's key check: exactly 22 base64 chars [+/0-9A-Za-z] followed by "==". 1 valid, 0 not (NULL is not). */
int xd_ws_key_valid(const char *key);
/* Sec-WebSocket-Accept for a client key (non-NULL, any length): base64(SHA-1(key +
 * "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")), NUL-terminated into out (28 chars + NUL). */
void xd_ws_accept(const char *key, char out[29]);
/* Header of one unmasked server frame with FIN set: writes 2, 4 or 10 bytes into out, returns how many. */
size_t xd_ws_frame_header(unsigned char out[10], int opcode, uint64_t payload_len);
/* Close frame payload: code (big-endian) + reason (NULL = none; <= 123 bytes: a longer one is cut at 123, back to the
 * start of a UTF-8 character it would split); returns its length. 0 when code is 0 or 1005: a close frame with no
 * body, as ws sends for code 1005 (which never goes on the wire). */
size_t xd_ws_close_payload(unsigned char out[125], unsigned code, const char *reason);

/* Incremental parser of CLIENT frames (masked). A NULL callback is skipped. A callback must not free the parser
 * (set stop, then free it after xd_ws_parse returned). */
typedef struct {
  /* a whole (defragmented) text/binary message */
  void (*on_message)(void *ud, int binary, const unsigned char *data, size_t len);
  void (*on_ping)(void *ud, const unsigned char *data, size_t len);
  void (*on_pong)(void *ud, const unsigned char *data, size_t len);
  /* code 1005 when the frame had no body */
  void (*on_close)(void *ud, unsigned code, const unsigned char *reason, size_t len);
  /* optional: a data message announcing more than 64 KiB starts and the parser holds no buffer of that size: the
   * owner may put a reusable buffer of its own into msg (len 0, any cap; the parser grows it when too small) */
  void (*on_buffer)(void *ud, osb_buf *msg, uint64_t announced);
} xd_ws_callbacks;

typedef struct xd_ws_parser {
  /* public */
  int stop;        /* set by a callback: xd_ws_parse returns 0 right after it; while set, feeds consume nothing */
  size_t consumed; /* read-only: bytes of the last xd_ws_parse's input parsed (all of them unless stop was set, an
                      error came or the close frame ended the stream) */
  /* private */
  int state;                /* 0 frame header, 1 frame payload, 2 done (error or close frame seen) */
  unsigned char hdr[14];    /* the frame header so far: 2 bytes, 0/2/8 length bytes, the 4 mask bytes */
  size_t hdr_len;
  int opcode;               /* of the current frame (a continuation's: the message's) */
  int fin;
  int frag_opcode;          /* 1 or 2 while a fragmented message is open, else 0 */
  uint64_t remaining;       /* payload bytes of the current frame still to come */
  unsigned mask_pos;        /* payload bytes of the current frame seen, modulo 4 */
  uint64_t msg_total;       /* payload the open message's frames announced so far */
  osb_buf msg;              /* the open data message, unmasked */
  unsigned char ctl[125];   /* the current control frame's payload, unmasked */
  size_t ctl_len;
} xd_ws_parser;

/* Feeds len bytes. Returns 0, or a close code on a protocol error (1002 protocol error: unmasked frame, RSV bits,
 * unknown opcode, fragmented or >125-byte control frame, continuation without a start, new data frame inside a
 * fragmented message, close body of 1 byte, invalid close code; 1007: text message or close reason not valid UTF-8;
 * 1009: message larger than XD_WS_MAX_PAYLOAD, found from the frame headers before any of its payload is stored),
 * or -1 on out of memory. After an error or after on_close the parser ignores further input (returns 0). Callbacks
 * may be called several times per feed; data pointers are valid only during the callback. A callback may set
 * p->stop = 1 to make the parser stop consuming (it returns 0 at once; p->consumed says how far it got, so the rest
 * can be fed again after clearing stop). */
int xd_ws_parse(xd_ws_parser *p, const unsigned char *data, size_t len, const xd_ws_callbacks *cb, void *ud);
/* Only inside on_message: moves the message's buffer (data pointer as passed, len, cap) to the caller, who then owns
 * it (no copy of a big stdin write); the parser starts the next message with an empty buffer. */
void xd_ws_take_message(xd_ws_parser *p, osb_buf *out);
/* Releases the message buffer; the parser is then as zero-initialised (reusable). */
void xd_ws_parser_free(xd_ws_parser *p);

#endif
