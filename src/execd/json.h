/* Go-compatible JSON text for the C execd (json.c): xd_json_str (declared in xd.h) writes a string literal the way
 * Go's encoding/json does; xd_js_number writes a double the way JavaScript's String(number) does (the Node execd's
 * texts that the C execd must reproduce: an env value given as a number, a logs cursor echoed back). Both append to
 * a caller-owned osb_buf and return 0, or -1 when out of memory. No state; not thread-affine. */
#ifndef XD_JSON_H
#define XD_JSON_H
#include <stddef.h>
#include "core/buf.h"
#include "xd.h"

/* JavaScript's JSON.stringify of the string Node decodes from these bytes (no <>& escaping; an invalid UTF-8 byte
 * becomes U+FFFD itself): the quoted names inside the Node execd's messages. */
int xd_js_json_str(osb_buf *out, const char *s, size_t len);

/* Shortest round-trip decimal text of v as JavaScript writes it: "3", "-0" as "0", "1.5", "1e+21", "1e-7",
 * "123456789012345680000", "NaN", "Infinity". */
int xd_js_number(osb_buf *out, double v);

/* True when v is an integer value (finite, no fraction): JavaScript's Number.isInteger. */
int xd_is_integer(double v);

/* The strict JSON grammar (RFC 8259) over a whole body, only whitespace after the value, at most 512 levels deep:
 * XD_JSON_OK; XD_JSON_EOF when the input ended early (a Go decoder's "unexpected EOF"); XD_JSON_OTHER for anything
 * else, and for what JavaScript and cJSON read differently (invalid UTF-8, \u0000, surrogate escapes): a module
 * that does not read those as Go does declines them (the server's 404). */
enum { XD_JSON_OK = 0, XD_JSON_EOF = 1, XD_JSON_OTHER = 2 };
int xd_json_check(const char *s, size_t n);

/* The member `name` of a cJSON object (the last one, as JavaScript reads it); *dup set to 1 when it appears more
 * than once (cJSON and JavaScript then disagree on its place). Borrowed from obj. */
struct cJSON;
const struct cJSON *xd_json_member(const struct cJSON *obj, const char *name, int *dup);
/* JavaScript's Number() of the n bytes at s (an id field of /etc/passwd or /etc/group), when it is an integer:
 * 1 and *out, else 0 (NaN, a fraction, beyond 2^53). */
int xd_js_number_int(const char *s, size_t n, long long *out);

/* A key JavaScript enumerates first, in numeric order: an array index ("0" .. "4294967294", no leading zero). */
int xd_js_array_index(const char *k);

#endif
