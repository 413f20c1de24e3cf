/* UTF-8 checks shared by the C execd's modules (utf8.c): the strict rules of Go's utf8.DecodeRune, of Node's
 * buffer.isUtf8 and of ws's isValidUTF8 alike (no overlong form, no surrogate, nothing above U+10FFFF, no truncated
 * sequence). Pure functions over caller-owned bytes; no state. */
#ifndef XD_UTF8_H
#define XD_UTF8_H
#include <stddef.h>

/* Length (1 to 4) of the valid UTF-8 sequence at s (n > 0 bytes available), or 0 when the bytes there are not one. */
size_t xd_utf8_seq(const unsigned char *s, size_t n);
/* 1 when the n bytes at s are valid UTF-8 as a whole (n = 0 is), else 0. */
int xd_utf8_valid(const unsigned char *s, size_t n);
/* Where to cut b at most n bytes in (b has more than n bytes) so that no UTF-8 character is split (n when the bytes
 * there are not UTF-8). */
size_t xd_utf8_cut(const unsigned char *b, size_t n);

#endif
