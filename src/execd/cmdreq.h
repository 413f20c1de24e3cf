/* execd's commands API in C (commands.c, whose module functions xd_commands_* are declared in xd.h; its request
 * rules in cmdreq.c): POST /command (foreground event stream or background start), GET /command/status/{id},
 * GET /command/{id}/logs?cursor=, DELETE /command?id=, with exactly the Node execd's observable behaviour
 * (lib/dev-server/execd/commands.js). Commands run as `bash -c` (else `sh`) in a new session (setsid), started with
 * vfork (no copy of page tables), reaped on SIGCHLD (a uv_signal handle) with waitpid on their own pids only.
 * Foreground output: two pipes read by libuv, split into line events (lines.h), not read while the client's buffer
 * is full; background output: one Unix socket pair (stdout and stderr merged in write order) into a bounded log
 * (logring.h). Finished records stay answerable: the newest 1,000, with at most 16 MiB of logs, for at most 24 h.
 * The module needs the loop to run on after xd_commands_close until its handles are closed (then it frees itself).
 *
 * This header: the module's pure request rules (cmdreq.c), also run by the unit tests (test/c/test_execd_cmd.c).
 * Ownership: every osb_buf is the caller's; cJSON trees returned are the caller's (cJSON_Delete). */
#ifndef XD_CMDREQ_H
#define XD_CMDREQ_H
#include <stddef.h>
#include <cjson/cJSON.h>
#include "core/buf.h"

/* The prefix of the 400 answers of the validator ("invalid request, validation error "). */
extern const char XD_INVALID_REQUEST[];

/* The member `key` of a JSON object as JSON.parse keeps it (the last of duplicates), or NULL. */
const cJSON *xd_json_get(const cJSON *obj, const char *key);

/* A JSON member that is there and not null (JavaScript's `!= null`). */
int xd_json_present(const cJSON *v);

/* execd's `time.Duration(timeoutMs) * time.Millisecond` (Go): int64 nanoseconds, wrapping on overflow. Returns the
 * duration in milliseconds, or 0 when it is not positive (no deadline), e.g. 1e13 ms wraps negative. timeout_ms is
 * an integer value with |timeout_ms| <= 2^63 (what xd_cmd_parse lets through). */
double xd_go_duration_ms(double timeout_ms);

/* Parses and validates a RunCommandRequest body like execd (the Node execd's wording): 0 and *out set, or -1 with
 * the message of the 400 INVALID_REQUEST_BODY answer in msg ("error parsing request, MAYBE invalid body format. ..."
 * or "invalid request, validation error ..."; "out of memory" when that happened). A string with NUL characters
 * (\u0000) keeps them as a 4-byte character the body does not contain otherwise: nul gets its UTF-8 text (NUL-
 * terminated), or "" when no string has a NUL. */
int xd_cmd_parse(const char *body, size_t len, cJSON **out, char nul[5], osb_buf *msg);

/* Appends s with every occurrence of the nul marker (xd_cmd_parse) as a NUL byte; returns how many there were
 * (-1: out of memory). nul "" copies s as it is. */
long xd_unmark_nul(const char *s, const char *nul, osb_buf *out);

/* Node's util.inspect of a string (the `Received ...` part of its argument errors): quoted with ' (or " or ` when
 * the text has quotes), control characters as \xHH (\b \t \n \f \r), at most 10000 characters. */
int xd_js_inspect_str(const char *s, size_t len, osb_buf *out);

/* A variable lookup for xd_expand_path: envp-style "NAME=value" strings, NULL-terminated. */
const char *xd_env_get(char *const *envp, const char *name, size_t name_len);

/* execd's path expansion (files-paths.js expandPath): `$$` removed, `$VAR` / `${VAR}` from envp, then a leading `~`
 * (alone or `~/...`) as the home directory. 0 with the result in out, or -1 with
 * "path references undefined environment variables: A,B" (sorted, each once) in err. */
int xd_expand_path(const char *p, char *const *envp, osb_buf *out, osb_buf *err);

/* files-paths.js expandAbsPath: xd_expand_path, then path.resolve(workspace, result). 0 with *abs (malloc'd), 1 with
 * the 400 text of its undefined variables in *err (malloc'd), -1 on OOM (nothing set). */
int xd_expand_abs_path(const char *p, char *const *envp, const char *workspace, char **abs, char **err);

/* Node's path.normalize (keep_trailing: a trailing '/' stays) / path.resolve against the working directory. */
int xd_path_normalize(const char *p, int keep_trailing, osb_buf *out);
int xd_path_resolve(const char *p, osb_buf *out);

/* A path segment with its %XX escapes decoded (a malformed escape stays as it is), malloc'd (NULL on OOM). */
char *xd_decode_segment(const char *s, size_t len);

/* JSON.parse of a whole body (only whitespace after the value): 0 with *out (the caller's, cJSON_Delete), or -1 with
 * the text of Go's decoder appended to msg ("unexpected EOF", "invalid character 'x' in JSON at offset N"). */
int xd_json_parse(const char *body, size_t len, cJSON **out, osb_buf *msg);

/* 16 random bytes for the ids of commands and PTY sessions (getrandom; the clock, pid and a counter where it is
 * refused: still unique within the process). */
void xd_random16(unsigned char b[16]);

#endif
