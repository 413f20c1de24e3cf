/* idfile.c: the C execd's one reader of the sandbox's own /etc/passwd and /etc/group (no NSS: osb-execd is linked
 * statically against musl and runs in any root file system, whose users are those files). The lines are read as the
 * Node execd's files-info.js idTable reads them: `name:x:id:...`, '#' lines and lines with an empty name skipped, the
 * id the third field read like JavaScript's Number() and an integer. Owner names by id (files.c), ids by name (fsops.c
 * xd_owner_resolve) and the home directory of `~` (cmdreq.c, where glibc's getpwuid went through NSS) all come from
 * here. No state; reading a file blocks (the files modules call it on libuv's thread pool). */
#ifndef XD_IDFILE_H
#define XD_IDFILE_H
#include <stddef.h>
#include "core/buf.h"

#define XD_IDFILE_PASSWD "/etc/passwd"
#define XD_IDFILE_GROUP "/etc/group"
/* A larger file is treated as unreadable (bounded memory; a sandbox's files are a few KiB). */
#define XD_IDFILE_MAX (16u * 1024u * 1024u)

/* One line that has a name and an integer id. The pointers are into the text given to xd_idfile_scan. */
typedef struct {
  const char *name;
  size_t name_len;
  long long id;
  size_t line;         /* its line number from 0 (the first line of a name or an id counts) */
  const char *fields;  /* the whole line, without its newline */
  size_t fields_len;
} xd_idline;

/* Calls fn on every such line of text (len bytes, NUL bytes allowed), in file order, until fn returns nonzero.
 * Returns what fn returned last (0 when every line was seen). */
int xd_idfile_scan(const char *text, size_t len, int (*fn)(const xd_idline *l, void *arg), void *arg);

/* The field number `index` (from 0) of a line: 1 with *f and *n, 0 when the line has fewer fields. */
int xd_idline_field(const xd_idline *l, unsigned index, const char **f, size_t *n);

/* Reads the whole file into out (replacing its contents): 0, or -1 (missing, unreadable, not a regular file, larger
 * than XD_IDFILE_MAX, out of memory; out is then empty). */
int xd_idfile_read(const char *file, osb_buf *out);

/* The id of name's first line in file: 1 and *id, 0 when not found or the file cannot be read. */
int xd_idfile_id_of(const char *file, const char *name, long long *id);

/* The home directory (the sixth field) of the first line of /etc/passwd whose id is uid, appended to out: 1, 0 when
 * there is none (or the file cannot be read), -1 when out of memory. */
int xd_idfile_home_of(long long uid, osb_buf *out);

#endif
