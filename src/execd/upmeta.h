/* upmeta.c: the metadata part of POST /files/upload read as the real execd reads it (upstream filesystem_upload.go:
 * json.Unmarshal into model.FileMetadata, then ChmodFile's strconv.ParseUint of the mode), with Go's error texts:
 * encoding/json's syntax errors ("invalid character 'x' looking for beginning of value", "unexpected end of JSON
 * input"), its type errors ("json: cannot unmarshal string into Go struct field FileMetadata.mode of type int"),
 * "metadata path is empty", strconv's "parsing \"8\": invalid syntax". Pure functions over caller-owned bytes; no
 * state; thread-safe (upload.c calls them on the thread pool). */
#ifndef XD_UPMETA_H
#define XD_UPMETA_H
#include <stddef.h>
#include "core/buf.h"

typedef struct {
  char *path, *owner, *group; /* malloc'd; NULL when absent, null or "" */
  int has_mode;               /* a non-zero integer mode was given */
  long long mode;             /* as written in decimal (its digits are read as octal by xd_upmeta_octal) */
} xd_upmeta;

/* json.Unmarshal of the len bytes at text into FileMetadata (fields matched case-insensitively, the last one given
 * wins, null leaves a field alone), then the path check. 0 with *md filled; 1 with the 400's message appended to msg
 * ("invalid metadata format. ..." or "metadata path is empty"); -1 OOM. Free *md with xd_upmeta_free either way. */
int xd_upmeta_read(const char *text, size_t len, xd_upmeta *md, osb_buf *msg);
void xd_upmeta_free(xd_upmeta *md);

/* encoding/json's checkValid of the whole text: 0 valid JSON for Go, 1 with Go's SyntaxError text appended to msg,
 * -1 OOM. */
int xd_go_json_check(const char *text, size_t len, osb_buf *msg);

/* strconv.ParseUint(s, 8, 32): 0 with *v, 1 with Go's error text appended to msg, -1 OOM. */
int xd_upmeta_octal(const char *s, unsigned long *v, osb_buf *msg);

#endif
