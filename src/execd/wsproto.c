/* The server side of the WebSocket protocol (wsproto.h): ws v8's receiver rules (lib/receiver.js, validation.js) for
 * a server without permessage-deflate; SHA-1 (FIPS 180-4) and base64 (RFC 4648) for the handshake. */
#include "wsproto.h"

#include <string.h>

#include "utf8.h"

/* ---- handshake ---- */

int xd_ws_key_valid(const char *key) {
  if (!key) return 0;
  for (int i = 0; i < 22; i++) {
    char c = key[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/'))
      return 0; /* also the end of a shorter key */
  }
  return key[22] == '=' && key[23] == '=' && key[24] == '\0';
}

typedef struct {
  uint32_t h[5];
  unsigned char block[64];
  size_t blen;    /* bytes in block */
  uint64_t total; /* bytes hashed */
} sha1_ctx;

static uint32_t rol32(uint32_t x, unsigned n) { return (x << n) | (x >> (32 - n)); }

static void sha1_block(uint32_t h[5], const unsigned char *b) {
  uint32_t w[80];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)b[4 * t] << 24 | (uint32_t)b[4 * t + 1] << 16 | (uint32_t)b[4 * t + 2] << 8 | b[4 * t + 3];
  for (int t = 16; t < 80; t++) w[t] = rol32(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
  uint32_t a = h[0], bb = h[1], c = h[2], d = h[3], e = h[4];
  for (int t = 0; t < 80; t++) {
    uint32_t f, k;
    if (t < 20) f = (bb & c) | (~bb & d), k = 0x5a827999u;
    else if (t < 40) f = bb ^ c ^ d, k = 0x6ed9eba1u;
    else if (t < 60) f = (bb & c) | (bb & d) | (c & d), k = 0x8f1bbcdcu;
    else f = bb ^ c ^ d, k = 0xca62c1d6u;
    uint32_t tmp = rol32(a, 5) + f + e + k + w[t];
    e = d;
    d = c;
    c = rol32(bb, 30);
    bb = a;
    a = tmp;
  }
  h[0] += a, h[1] += bb, h[2] += c, h[3] += d, h[4] += e;
}

static void sha1_init(sha1_ctx *s) {
  static const uint32_t iv[5] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u, 0xc3d2e1f0u};
  memcpy(s->h, iv, sizeof iv);
  s->blen = 0;
  s->total = 0;
}

static void sha1_update(sha1_ctx *s, const unsigned char *p, size_t n) {
  s->total += n;
  while (n) {
    size_t take = 64 - s->blen < n ? 64 - s->blen : n;
    memcpy(s->block + s->blen, p, take);
    s->blen += take, p += take, n -= take;
    if (s->blen == 64) {
      sha1_block(s->h, s->block);
      s->blen = 0;
    }
  }
}

static void sha1_final(sha1_ctx *s, unsigned char out[20]) {
  uint64_t bits = s->total * 8;
  static const unsigned char one = 0x80, zero = 0;
  sha1_update(s, &one, 1);
  while (s->blen != 56) sha1_update(s, &zero, 1);
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
  sha1_update(s, len, 8);
  for (int i = 0; i < 20; i++) out[i] = (unsigned char)(s->h[i / 4] >> (24 - 8 * (i % 4)));
}

/* RFC 4648 base64 (with padding) of n bytes into out (4 * ceil(n / 3) chars + NUL). */
static void base64(const unsigned char *p, size_t n, char *out) {
  static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
    out[o++] = al[v >> 18 & 63];
    out[o++] = al[v >> 12 & 63];
    out[o++] = i + 1 < n ? al[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? al[v & 63] : '=';
  }
  out[o] = '\0';
}

void xd_ws_accept(const char *key, char out[29]) {
  static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  sha1_ctx s;
  unsigned char digest[20];
  sha1_init(&s);
  sha1_update(&s, (const unsigned char *)key, strlen(key));
  sha1_update(&s, (const unsigned char *)guid, sizeof guid - 1);
  sha1_final(&s, digest);
  base64(digest, sizeof digest, out);
}

/* ---- the server's frames ---- */

size_t xd_ws_frame_header(unsigned char out[10], int opcode, uint64_t payload_len) {
  out[0] = (unsigned char)(0x80 | (opcode & 0x0f));
  if (payload_len < 126) {
    out[1] = (unsigned char)payload_len;
    return 2;
  }
  if (payload_len <= 0xffff) {
    out[1] = 126;
    out[2] = (unsigned char)(payload_len >> 8);
    out[3] = (unsigned char)payload_len;
    return 4;
  }
  out[1] = 127;
  for (int i = 0; i < 8; i++) out[2 + i] = (unsigned char)(payload_len >> (56 - 8 * i));
  return 10;
}

size_t xd_ws_close_payload(unsigned char out[125], unsigned code, const char *reason) {
  if (code == 0 || code == 1005) return 0;
  out[0] = (unsigned char)(code >> 8);
  out[1] = (unsigned char)code;
  size_t n = reason ? strlen(reason) : 0;
  if (n > 123) n = xd_utf8_cut((const unsigned char *)reason, 123);
  if (n) memcpy(out + 2, reason, n);
  return 2 + n;
}

/* ---- the client's frames ---- */

enum { ST_HEADER, ST_PAYLOAD, ST_DONE };
/* a message buffer up to this size is kept for the next message, a larger one released */
#define KEEP_BUF (64u * 1024u)

/* ws's isValidStatusCode: the codes a close frame may carry. */
static int valid_close_code(unsigned c) {
  return (c >= 1000 && c <= 1014 && c != 1004 && c != 1005 && c != 1006) || (c >= 3000 && c <= 4999);
}

/* Bytes of extended payload length the frame header announces (its first two bytes are there). */
static size_t ext_len(const xd_ws_parser *p) {
  unsigned l = p->hdr[1] & 0x7f;
  return l == 126 ? 2 : l == 127 ? 8 : 0;
}

/* ws's getInfo: the checks of a frame's first two bytes, in its order. Returns 0 or 1002. */
static int check_info(xd_ws_parser *p) {
  unsigned b0 = p->hdr[0], b1 = p->hdr[1];
  if (b0 & 0x70) return 1002; /* RSV2/RSV3, and RSV1 without permessage-deflate */
  int fin = (b0 & 0x80) != 0, op = (int)(b0 & 0x0f);
  unsigned len7 = b1 & 0x7f;
  if (op == 0) {
    if (!p->frag_opcode) return 1002; /* a continuation without a start */
    p->opcode = p->frag_opcode;
  } else if (op == 1 || op == 2) {
    if (p->frag_opcode) return 1002; /* a new message inside a fragmented one */
    p->opcode = op;
    if (!fin) p->frag_opcode = op;
  } else if (op >= 8 && op <= 10) {
    if (!fin) return 1002;
    if (len7 > 125 || (op == 8 && len7 == 1)) return 1002;
    p->opcode = op;
  } else {
    return 1002;
  }
  if (!(b1 & 0x80)) return 1002; /* a client's frame must be masked */
  p->fin = fin;
  return 0;
}

/* ws's getPayloadLength64 and haveLength: the frame's length, and the message's so far against the limit, before
 * any of the payload arrives. Returns 0 or 1009. */
static int check_length(xd_ws_parser *p) {
  unsigned l = p->hdr[1] & 0x7f;
  uint64_t n = l;
  if (l == 126) n = (uint64_t)p->hdr[2] << 8 | p->hdr[3];
  else if (l == 127) {
    n = 0;
    for (int i = 0; i < 8; i++) n = n << 8 | p->hdr[2 + i];
    if (n >> 53) return 1009; /* above JavaScript's safe integers: ws's own bound, and the sum below cannot wrap */
  }
  if (n && p->opcode < 8) {
    p->msg_total += n; /* <= XD_WS_MAX_PAYLOAD + 2^53: no overflow */
    if (p->msg_total > XD_WS_MAX_PAYLOAD) return 1009;
  }
  p->remaining = n;
  return 0;
}

/* dst = src XOR the mask, starting pos bytes into it. */
static void unmask_copy(unsigned char *dst, const unsigned char *src, size_t n, const unsigned char *mask,
                        unsigned pos) {
  unsigned char m[4];
  for (unsigned k = 0; k < 4; k++) m[k] = mask[(pos + k) & 3];
  uint32_t m32;
  memcpy(&m32, m, 4);
  uint64_t m64 = (uint64_t)m32 << 32 | m32;
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    uint64_t w;
    memcpy(&w, src + k, 8);
    w ^= m64;
    memcpy(dst + k, &w, 8);
  }
  for (; k < n; k++) dst[k] = src[k] ^ m[k & 3];
}

/* Room for n more bytes of the open message: grown at least twofold, never beyond what its frames announced; a big
 * message first asks the owner for a reusable buffer (on_buffer). */
static int msg_room(xd_ws_parser *p, size_t n, const xd_ws_callbacks *cb, void *ud) {
  size_t need = p->msg.len + n;
  if (need < p->msg.cap) return 0; /* cap counts osb_buf's NUL */
  if (p->msg.len == 0 && p->msg_total > KEEP_BUF && cb->on_buffer) {
    osb_buf small = p->msg;
    memset(&p->msg, 0, sizeof p->msg);
    cb->on_buffer(ud, &p->msg, p->msg_total);
    if (p->msg.cap) {
      p->msg.len = 0;
      osb_buf_free(&small);
      if (need < p->msg.cap) return 0;
    } else {
      p->msg = small;
    }
  }
  size_t want = p->msg.cap ? p->msg.cap * 2 : 1024;
  if (want < need) want = need;
  if (want > p->msg_total) want = (size_t)p->msg_total; /* >= need */
  return osb_buf_reserve_exact(&p->msg, want - p->msg.len);
}

static void msg_reset(xd_ws_parser *p) {
  p->frag_opcode = 0;
  p->msg_total = 0;
  if (p->msg.cap > KEEP_BUF) osb_buf_free(&p->msg);
  else osb_buf_reset(&p->msg);
}

/* The current frame is complete. Returns 0 or a close code. */
static int frame_done(xd_ws_parser *p, const xd_ws_callbacks *cb, void *ud) {
  p->state = ST_HEADER;
  p->hdr_len = 0;
  if (p->opcode == 8) {
    p->state = ST_DONE;
    if (p->ctl_len == 0) {
      if (cb->on_close) cb->on_close(ud, 1005, (const unsigned char *)"", 0);
      return 0;
    }
    unsigned code = (unsigned)p->ctl[0] << 8 | p->ctl[1];
    if (!valid_close_code(code)) return 1002;
    if (!xd_utf8_valid(p->ctl + 2, p->ctl_len - 2)) return 1007;
    if (cb->on_close) cb->on_close(ud, code, p->ctl + 2, p->ctl_len - 2);
    return 0;
  }
  if (p->opcode == 9 || p->opcode == 10) {
    void (*fn)(void *, const unsigned char *, size_t) = p->opcode == 9 ? cb->on_ping : cb->on_pong;
    if (fn) fn(ud, p->ctl, p->ctl_len);
    return 0;
  }
  if (!p->fin) return 0;
  const unsigned char *data = p->msg.data ? (const unsigned char *)p->msg.data : (const unsigned char *)"";
  int binary = p->opcode == 2;
  if (!binary && !xd_utf8_valid(data, p->msg.len)) return 1007;
  if (cb->on_message) cb->on_message(ud, binary, data, p->msg.len);
  msg_reset(p);
  return 0;
}

int xd_ws_parse(xd_ws_parser *p, const unsigned char *data, size_t len, const xd_ws_callbacks *cb, void *ud) {
  static const xd_ws_callbacks none;
  if (!cb) cb = &none;
  size_t i = 0;
  int rc = 0;
  while (p->state != ST_DONE && !p->stop) {
    if (p->state == ST_HEADER) {
      size_t need = p->hdr_len < 2 ? 2 : 2 + ext_len(p) + 4;
      size_t check = p->hdr_len < 2 ? 2 : 2 + ext_len(p); /* where the length is complete */
      if (p->hdr_len < check) need = check;
      if (i == len) break;
      size_t n = need - p->hdr_len < len - i ? need - p->hdr_len : len - i;
      memcpy(p->hdr + p->hdr_len, data + i, n);
      p->hdr_len += n;
      i += n;
      if (p->hdr_len < need) break;
      if (need == 2) {
        if ((rc = check_info(p)) != 0) break;
        if (ext_len(p) == 0 && (rc = check_length(p)) != 0) break;
      } else if (need == check) {
        if ((rc = check_length(p)) != 0) break;
      } else {
        p->state = ST_PAYLOAD;
        p->mask_pos = 0;
        p->ctl_len = 0;
      }
      continue;
    }
    /* ST_PAYLOAD */
    if (p->remaining) {
      if (i == len) break;
      size_t n = p->remaining < len - i ? (size_t)p->remaining : len - i;
      unsigned char *dst;
      if (p->opcode >= 8) {
        dst = p->ctl + p->ctl_len;
        p->ctl_len += n;
      } else {
        if (msg_room(p, n, cb, ud) != 0) {
          rc = -1;
          break;
        }
        dst = (unsigned char *)p->msg.data + p->msg.len;
        p->msg.len += n;
        p->msg.data[p->msg.len] = 0;
      }
      unmask_copy(dst, data + i, n, p->hdr + p->hdr_len - 4, p->mask_pos);
      p->mask_pos = (unsigned)((p->mask_pos + n) & 3);
      p->remaining -= n;
      i += n;
      if (p->remaining) break;
    }
    if ((rc = frame_done(p, cb, ud)) != 0) break;
  }
  if (rc != 0) p->state = ST_DONE;
  if (p->state == ST_DONE) {
    osb_buf_free(&p->msg);
    p->msg_total = 0;
    p->frag_opcode = 0;
  }
  p->consumed = i;
  return rc;
}

void xd_ws_take_message(xd_ws_parser *p, osb_buf *out) {
  *out = p->msg;
  memset(&p->msg, 0, sizeof p->msg);
}

void xd_ws_parser_free(xd_ws_parser *p) {
  osb_buf_free(&p->msg);
  memset(p, 0, sizeof *p);
}
