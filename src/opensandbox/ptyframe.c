/* PTY WebSocket frames and the wrapper's output markers, parsed without side effects (see ptyframe.h). */
#include "ptyframe.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

/* ---- frames ---- */

static void copy_str(char *dst, size_t cap, const cJSON *v, const char *dflt) {
  snprintf(dst, cap, "%s", cJSON_IsString(v) ? v->valuestring : dflt);
}

int osb_pty_frame_parse(int binary, const char *d, size_t n, osb_pty_frame *f) {
  memset(f, 0, sizeof *f);
  f->exit_code = -1;
  if (binary) {
    if (n == 0) return f->kind = OSB_PTY_IGNORED;
    unsigned t = (unsigned char)d[0];
    if (t == 0x01 || t == 0x02) {
      f->kind = t == 0x01 ? OSB_PTY_STDOUT : OSB_PTY_STDERR;
      f->data = d + 1;
      f->len = n - 1;
    } else if (t == 0x03 && n >= 9) {
      f->kind = OSB_PTY_REPLAY;
      for (int i = 1; i <= 8; i++) f->offset = (f->offset << 8) | (unsigned char)d[i];
      f->data = d + 9;
      f->len = n - 9;
    }
    return f->kind;
  }
  cJSON *j = cJSON_ParseWithLength(d, n);
  const cJSON *type = j ? cJSON_GetObjectItemCaseSensitive(j, "type") : NULL;
  const char *t = cJSON_IsString(type) ? type->valuestring : "";
  if (!strcmp(t, "connected")) {
    f->kind = OSB_PTY_CONNECTED;
  } else if (!strcmp(t, "exit")) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "exit_code");
    f->kind = OSB_PTY_EXIT;
    f->exit_code = cJSON_IsNumber(c) ? c->valueint : -1;
  } else if (!strcmp(t, "error")) {
    f->kind = OSB_PTY_ERROR;
    copy_str(f->error_code, sizeof f->error_code, cJSON_GetObjectItemCaseSensitive(j, "code"), "error");
    copy_str(f->error_text, sizeof f->error_text, cJSON_GetObjectItemCaseSensitive(j, "error"), "");
  } else if (!strcmp(t, "pong")) {
    f->kind = OSB_PTY_PONG;
  }
  cJSON_Delete(j);
  return f->kind;
}

size_t osb_pty_replay_skip(uint64_t *received, uint64_t offset, size_t len, uint64_t *gap) {
  if (offset + len <= *received) return len;
  size_t skip = offset < *received ? (size_t)(*received - offset) : 0;
  if (offset > *received) *gap += offset - *received;
  *received = offset + len;
  return skip;
}

/* ---- markers ---- */

void osb_pty_markers_init(osb_pty_markers *m, const char *nonce) {
  memset(m, 0, sizeof *m);
  snprintf(m->pat_exit, sizeof m->pat_exit, "\x1fOSB-EXIT:%.32s:", nonce);
  snprintf(m->pat_err, sizeof m->pat_err, "\x1fOSB-ERR:%.32s\x1f", nonce);
  snprintf(m->pat_run, sizeof m->pat_run, "\x1fOSB-RUN:%.32s\x1f", nonce);
  snprintf(m->pat_wrote, sizeof m->pat_wrote, "\x1fOSB-W:%.32s\x1f", nonce);
  snprintf(m->pat_holder, sizeof m->pat_holder, "\x1fOSB-H:%.32s:", nonce);
}

/* Fixed marker pat at s: 1 whole, 0 proper prefix, -1 no. */
static int match_fixed(const char *pat, const char *s, size_t n) {
  size_t l = strlen(pat);
  if (memcmp(s, pat, n < l ? n : l) != 0) return -1;
  return n < l ? 0 : 1;
}

/* A marker with a number (pat, then at most 11 digits after an optional '-', then 0x1f) at s: 1 whole (its length
 * and the number), 0 a proper prefix, -1 no. */
static int match_num(const char *pat, const char *s, size_t n, size_t *mlen, long *num) {
  size_t xl = strlen(pat);
  if (memcmp(s, pat, n < xl ? n : xl) != 0) return -1;
  if (n < xl) return 0;
  size_t i = xl;
  if (i < n && s[i] == '-') i++;
  size_t d0 = i;
  while (i < n && i - d0 < 11 && isdigit((unsigned char)s[i])) i++;
  if (i == n) return i - d0 < 11 ? 0 : -1;
  if (s[i] != 0x1f || i == d0) return -1;
  char buf[16];
  size_t l = i - xl;
  memcpy(buf, s + xl, l);
  buf[l] = 0;
  *num = strtol(buf, NULL, 10);
  *mlen = i + 1;
  return 1;
}

/* 1: a whole marker at s (its length, kind, and for the exit and holder markers their number); 0: s is a proper
 * prefix of one; -1: no marker. */
static int match_marker(const osb_pty_markers *m, const char *s, size_t n, size_t *mlen, int *kind, long *code) {
  int r_err = match_fixed(m->pat_err, s, n), r_run = match_fixed(m->pat_run, s, n);
  int r_w = match_fixed(m->pat_wrote, s, n);
  if (r_err == 1 || r_run == 1 || r_w == 1) {
    *kind = r_err == 1 ? OSB_PTY_MARK_ERR : r_run == 1 ? OSB_PTY_MARK_RUN : OSB_PTY_MARK_WROTE;
    *mlen = strlen(r_err == 1 ? m->pat_err : r_run == 1 ? m->pat_run : m->pat_wrote);
    return 1;
  }
  int r_exit = match_num(m->pat_exit, s, n, mlen, code);
  if (r_exit == 1) {
    *kind = OSB_PTY_MARK_EXIT;
    return 1;
  }
  int r_h = match_num(m->pat_holder, s, n, mlen, code);
  if (r_h == 1) {
    *kind = OSB_PTY_MARK_HOLDER;
    return 1;
  }
  return (r_err == 0 || r_run == 0 || r_w == 0 || r_exit == 0 || r_h == 0) ? 0 : -1;
}

static void record(osb_pty_markers *m, int kind, long code) {
  if (kind == OSB_PTY_MARK_EXIT) {
    m->got_exit = 1;
    m->exit_code = code > INT_MAX ? INT_MAX : code < INT_MIN ? INT_MIN : (int)code;
  } else if (kind == OSB_PTY_MARK_HOLDER) {
    m->holder_pid = code > 0 && code <= INT_MAX ? code : 0;
  } else if (kind == OSB_PTY_MARK_ERR) {
    m->got_err = 1;
  } else if (kind == OSB_PTY_MARK_WROTE) {
    m->wrote++;
  } else {
    m->got_run = 1;
  }
}

static void out(osb_pty_emit_fn emit, void *ud, int which, const char *s, size_t n) {
  if (n) emit(ud, which, s, n);
}

/* Resolves the held-back prefix with the start of data: returns how many bytes of data it used (all of them when
 * the hold is still a prefix), adding stripped marker bytes to *stripped. */
static size_t resolve_hold(osb_pty_markers *m, int which, const char *data, size_t n, osb_pty_emit_fn emit, void *ud,
                           size_t *stripped) {
  char *h = m->hold[which];
  while (m->hold_len[which]) {
    size_t hl = m->hold_len[which], k = n < OSB_PTY_HOLD_MAX ? n : OSB_PTY_HOLD_MAX;
    char c[2 * OSB_PTY_HOLD_MAX];
    memcpy(c, h, hl);
    memcpy(c + hl, data, k);
    size_t mlen = 0;
    int kind = 0;
    long code = 0;
    int r = match_marker(m, c, hl + k, &mlen, &kind, &code);
    if (r == 1) { /* the marker ends in data: the hold was a proper prefix, so mlen > hl */
      record(m, kind, code);
      *stripped += mlen;
      m->hold_len[which] = 0;
      return mlen - hl;
    }
    if (r == 0 && hl + n <= OSB_PTY_HOLD_MAX) { /* still a proper prefix (shorter than any marker): data is used up */
      memcpy(h + hl, data, n);
      m->hold_len[which] = hl + n;
      return n;
    }
    /* h[0] starts no marker: it is output, up to the next candidate in the hold */
    const char *q = hl > 1 ? memchr(h + 1, 0x1f, hl - 1) : NULL;
    size_t e = q ? (size_t)(q - h) : hl;
    out(emit, ud, which, h, e);
    memmove(h, h + e, hl - e);
    m->hold_len[which] = hl - e;
  }
  return 0;
}

size_t osb_pty_markers_scan(osb_pty_markers *m, int which, const char *data, size_t n, osb_pty_emit_fn emit,
                            void *ud) {
  which = which ? 1 : 0;
  size_t stripped = 0;
  size_t used = resolve_hold(m, which, data, n, emit, ud, &stripped);
  const char *s = data + used;
  size_t len = n - used;
  if (m->hold_len[which]) return stripped; /* data went into the hold */
  size_t from = 0, i = 0;
  while (i < len) {
    const char *q = memchr(s + i, 0x1f, len - i);
    if (!q) break;
    size_t j = (size_t)(q - s), mlen = 0;
    int kind = 0;
    long code = 0;
    int r = match_marker(m, s + j, len - j, &mlen, &kind, &code);
    if (r == 1) {
      out(emit, ud, which, s + from, j - from);
      record(m, kind, code);
      stripped += mlen;
      from = i = j + mlen;
      continue;
    }
    if (r == 0 && len - j <= OSB_PTY_HOLD_MAX) { /* a proper prefix at the end (always shorter than the hold) */
      out(emit, ud, which, s + from, j - from);
      memcpy(m->hold[which], s + j, len - j);
      m->hold_len[which] = len - j;
      return stripped;
    }
    i = j + 1;
  }
  out(emit, ud, which, s + from, len - from);
  return stripped;
}

void osb_pty_markers_flush(osb_pty_markers *m, int which, osb_pty_emit_fn emit, void *ud) {
  which = which ? 1 : 0;
  out(emit, ud, which, m->hold[which], m->hold_len[which]);
  m->hold_len[which] = 0;
}
