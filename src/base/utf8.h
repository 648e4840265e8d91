/*
 * utf8.h - UTF-8 as the JSON reader needs it: well-formed means no
 * overlongs, no surrogates, nothing above U+10FFFF. Pure.
 */
#ifndef CHARGE_UTF8_H
#define CHARGE_UTF8_H

#include <stddef.h>

/* Length of the UTF-8 sequence that starts p[0..n) (p[0] >= 0x80); 0 if none. */
size_t utf8_seq(const unsigned char *p, size_t n);

/* 1 when s[0..n) is well-formed UTF-8 (no overlongs, no surrogates). */
int utf8_valid(const char *s, size_t n);

/* Writes code point cp (<= U+10FFFF) as UTF-8 to out[0..4); returns its length. */
size_t utf8_put(char *out, unsigned long cp);

#endif
