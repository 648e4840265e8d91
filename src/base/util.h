/*
 * util.h - leaf helpers shared by several modules: file reading and writing,
 * error buffers, hex checks and the one hex-digit parser.
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

/*
 * Makes the buffer *p (capacity *cap bytes) hold at least need bytes,
 * doubling from first, at most max; what it held is kept. 0, or -1 when
 * need exceeds max or on ENOMEM (*p and *cap unchanged).
 */
int util_grow(char **p, size_t *cap, size_t need, size_t first, size_t max);

/* Writes all of p[0..n) to fd, resuming after short writes and EINTR. 0 or -1. */
int util_write_all(int fd, const char *p, size_t n);

/*
 * The length of the longest prefix of the NUL-terminated s that is at most
 * max bytes and does not end inside a UTF-8 sequence.
 */
size_t util_utf8_prefix(const char *s, size_t max);

/*
 * A bounded text builder over the caller's buffer, for the lines written on
 * every request (response head, ledger line, Redis arguments): snprintf
 * parses its format each time, which measured at about 15 000 instructions
 * of a 100 000-instruction request. Once the text no longer fits, the
 * builder stops writing and util_buf_len() reports -1.
 */
struct util_buf {
	char *p;
	size_t len, cap;
	int overflow;
};

/* mem[cap] receives the text, always NUL-terminated when cap > 0. */
void util_buf_init(struct util_buf *b, char *mem, size_t cap);
void util_buf_put(struct util_buf *b, const char *s, size_t n);
void util_buf_str(struct util_buf *b, const char *s);
void util_buf_ull(struct util_buf *b, unsigned long long v);
void util_buf_ll(struct util_buf *b, long long v);
/* The length written, or -1 when the text did not fit. */
long util_buf_len(const struct util_buf *b);

/* v in decimal into out[outlen] (NUL-terminated); its length, or -1. */
long util_lltoa(long long v, char *out, size_t outlen);

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
	size_t lineno; /* of the line last returned */
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

/* The one hex-digit parser: c's value (0-9, a-f, A-F), or -1. */
int util_hex_digit(char c);

#endif
