/*
 * util.h - leaf helpers shared by several modules: file reading and writing,
 * error buffers, hex checks.
 */
#ifndef CHARGE_UTIL_H
#define CHARGE_UTIL_H

#include <stddef.h>

/* printf into the caller's error buffer (bounded; NULL/0 ignored). */
void util_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Reads the regular file at path, at most max bytes, into *out (malloc'd,
 * NUL-terminated; caller frees), its length in *outlen. 0, or -1 with err
 * naming path (missing, not a regular file, larger than max, read error).
 */
int util_read_file(const char *path, size_t max, char **out, size_t *outlen,
    char *err, size_t errlen);

/* Writes all of p[0..n) to fd, resuming after short writes and EINTR. 0 or -1. */
int util_write_all(int fd, const char *p, size_t n);

/*
 * The length of the longest prefix of the NUL-terminated s that is at most
 * max bytes and does not end inside a UTF-8 sequence.
 */
size_t util_utf8_prefix(const char *s, size_t max);

/* Space inside a line of a text file: blank, tab, CR. */
int util_is_space(char ch);

/*
 * The one reader of line-oriented files (charge.conf, api-keys): yields
 * each line that is neither blank nor a '#' comment, with its leading
 * space skipped. Lines end at '\n'; the last one needs none.
 */
struct util_lines {
	const char *text;
	size_t len, pos;
	size_t lineno;          /* of the line last returned */
};

void util_lines_init(struct util_lines *it, const char *text, size_t len);

/*
 * 1 with the next content line in *line / *n, 0 at the end, -1 when the
 * line holds a NUL byte (it->lineno names it).
 */
int util_lines_next(struct util_lines *it, const char **line, size_t *n);

enum util_dec { UTIL_DEC_OK, UTIL_DEC_OVER, UTIL_DEC_BAD };

/*
 * The one decimal parser: s[0..n) as an unsigned integer, digits only (no
 * sign, no space, not empty). UTIL_DEC_OK with *out; UTIL_DEC_OVER when the
 * digits are valid but the value exceeds max (*out = max); UTIL_DEC_BAD
 * otherwise (*out untouched).
 */
enum util_dec util_decimal(const char *s, size_t n, unsigned long long max,
    unsigned long long *out);

/* 1 when s[0..n) are all lower-case hex digits. */
int util_is_hex(const char *s, size_t n);

#endif
