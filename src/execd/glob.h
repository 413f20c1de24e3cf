/* glob.c: the glob patterns of execd's GET /files/search (lib/dev-server/execd/files-glob.js), matched against a
 * file's base name: `*` any run of non-`/` characters, `**` any run including `/` when it is a whole segment, `?` one
 * non-`/` character, `[abc]` `[a-z]` `[!x]` `[^x]` classes, `{a,b}` alternatives (nestable), `\x` a literal x.
 * Characters are code points (UTF-8; a byte that is not part of a valid sequence is one U+FFFD of its own, in the
 * pattern and in the name, as Go's utf8.DecodeRune reads it). A range whose ends are out of order matches nothing
 * (Go's doublestar; JavaScript's RegExp refused it with a V8 text).
 *
 * The pattern is compiled once to a small automaton and run over a name in one pass (a set of states per character,
 * no backtracking): O(name length x pattern length) whatever the pattern (`*a*a*a*a*b` included). Compiling is
 * iterative (nested braces use a heap stack, not the C stack). A network input: the fuzz target is
 * test/c/fuzz_glob.c.
 *
 * Ownership: an xd_glob is the caller's (xd_glob_free); it holds the scratch space of its matches, so one xd_glob is
 * used by one thread at a time. */
#ifndef XD_GLOB_H
#define XD_GLOB_H
#include <stddef.h>

typedef struct xd_glob xd_glob;

/* Longest pattern compiled (longer: a syntax error); a request target is at most 16 KiB anyway. */
#define XD_GLOB_MAX_PATTERN (64u * 1024u)

/* Compiles pattern[0..len) (any bytes). 0 with *out set, 1 when the pattern is malformed (files-glob.js's
 * "syntax error in pattern"), -1 out of memory. */
int xd_glob_compile(const char *pattern, size_t len, xd_glob **out);
/* 1 when name[0..len) matches the whole pattern, else 0. Allocates nothing. */
int xd_glob_match(xd_glob *g, const char *name, size_t len);
void xd_glob_free(xd_glob *g);

#endif
