/* idfile.c: the one reader of /etc/passwd and /etc/group (idfile.h). */
#include "idfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"

int xd_idfile_scan(const char *text, size_t len, int (*fn)(const xd_idline *l, void *arg), void *arg) {
  size_t line = 0;
  for (size_t at = 0; at < len; line++) {
    const char *l = text + at;
    const char *nl = memchr(l, '\n', len - at);
    size_t ll = nl ? (size_t)(nl - l) : len - at;
    at += ll + 1;
    if (ll == 0 || l[0] == '#') continue;
    const char *c1 = memchr(l, ':', ll);
    if (!c1 || c1 == l) continue;
    const char *c2 = memchr(c1 + 1, ':', (size_t)(l + ll - c1 - 1));
    if (!c2) continue; /* no third field: Number(undefined) is NaN */
    const char *c3 = memchr(c2 + 1, ':', (size_t)(l + ll - c2 - 1));
    xd_idline e = {l, (size_t)(c1 - l), 0, line, l, ll};
    if (!xd_js_number_int(c2 + 1, c3 ? (size_t)(c3 - c2 - 1) : (size_t)(l + ll - c2 - 1), &e.id)) continue;
    int r = fn(&e, arg);
    if (r) return r;
  }
  return 0;
}

int xd_idline_field(const xd_idline *l, unsigned index, const char **f, size_t *n) {
  const char *p = l->fields, *end = l->fields + l->fields_len;
  for (unsigned i = 0; i < index; i++) {
    const char *c = memchr(p, ':', (size_t)(end - p));
    if (!c) return 0;
    p = c + 1;
  }
  const char *c = memchr(p, ':', (size_t)(end - p));
  *f = p;
  *n = c ? (size_t)(c - p) : (size_t)(end - p);
  return 1;
}

int xd_idfile_read(const char *file, osb_buf *out) {
  osb_buf_reset(out);
  int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (off_t)XD_IDFILE_MAX) {
    close(fd);
    return -1;
  }
  char buf[16384];
  ssize_t r;
  int ok = 1;
  while (ok && (r = read(fd, buf, sizeof buf)) != 0) {
    if (r < 0 && errno == EINTR) continue;
    ok = r > 0 && out->len + (size_t)r <= XD_IDFILE_MAX && osb_buf_append(out, buf, (size_t)r) == 0;
  }
  close(fd);
  if (!ok) osb_buf_reset(out);
  return ok ? 0 : -1;
}

typedef struct {
  const char *name;
  size_t len;
  long long id;
} by_name;

static int match_name(const xd_idline *l, void *arg) {
  by_name *q = arg;
  if (l->name_len != q->len || memcmp(l->name, q->name, q->len) != 0) return 0;
  q->id = l->id;
  return 1;
}

int xd_idfile_id_of(const char *file, const char *name, long long *id) {
  osb_buf text = {0};
  by_name q = {name, strlen(name), 0};
  int found = xd_idfile_read(file, &text) == 0 && text.len > 0 && xd_idfile_scan(text.data, text.len, match_name, &q);
  osb_buf_free(&text);
  if (found) *id = q.id;
  return found;
}

typedef struct {
  long long uid;
  const char *home;
  size_t len;
} by_uid;

static int match_uid(const xd_idline *l, void *arg) {
  by_uid *q = arg;
  if (l->id != q->uid) return 0;
  if (!xd_idline_field(l, 5, &q->home, &q->len)) q->home = NULL;
  return 1; /* the first line of the id decides, with or without a home field */
}

int xd_idfile_home_of(long long uid, osb_buf *out) {
  osb_buf text = {0};
  by_uid q = {uid, NULL, 0};
  int rc = 0;
  if (xd_idfile_read(XD_IDFILE_PASSWD, &text) == 0 && text.len > 0 && xd_idfile_scan(text.data, text.len, match_uid, &q) &&
      q.home)
    rc = osb_buf_append(out, q.home, q.len) == 0 ? 1 : -1;
  osb_buf_free(&text);
  return rc;
}
