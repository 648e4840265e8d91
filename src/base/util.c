/*
 * util.c - leaf helpers shared by several modules.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

void
util_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	if (vsnprintf(err, errlen, fmt, ap) < 0)
		err[0] = '\0';
	va_end(ap);
}

int
util_read_file(const char *path, size_t max, char **out, size_t *outlen,
    char *err, size_t errlen)
{
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	ssize_t n;
	int fd = -1, rc = -1;

	*out = NULL;
	*outlen = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 ||
	    fstat(fd, &st) != 0) {
		util_err(err, errlen, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		util_err(err, errlen, "%s: not a regular file", path);
		goto fail;
	}
	if ((buf = malloc(max + 1)) == NULL) {
		util_err(err, errlen, "%s: out of memory", path);
		goto fail;
	}
	/* read to EOF, not to st_size: the file may change while we read */
	for (;;) {
		n = read(fd, buf + len, max + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			util_err(err, errlen, "%s: %s", path, strerror(errno));
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max) {
			util_err(err, errlen, "%s: larger than %zu bytes", path,
			    max);
			goto fail;
		}
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	buf = NULL;
	rc = 0;
fail:
	free(buf);
	if (fd >= 0)
		(void)close(fd);
	return rc;
}

int
util_grow(char **p, size_t *cap, size_t need, size_t first, size_t max)
{
	size_t c = *cap ? *cap : first;
	char *q;

	if (need <= *cap)
		return 0;
	if (need > max)
		return -1;
	while (c < need)
		c = c > max / 2 ? max : 2 * c;
	if ((q = realloc(*p, c)) == NULL)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

int
util_write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

void
util_buf_init(struct util_buf *b, char *mem, size_t cap)
{
	b->p = mem;
	b->len = 0;
	b->cap = cap;
	b->overflow = cap == 0;
	if (cap > 0)
		mem[0] = '\0';
}

void
util_buf_put(struct util_buf *b, const char *s, size_t n)
{
	if (b->overflow || n >= b->cap - b->len) {
		b->overflow = 1;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void
util_buf_str(struct util_buf *b, const char *s)
{
	util_buf_put(b, s, strlen(s));
}

void
util_buf_ull(struct util_buf *b, unsigned long long v)
{
	char tmp[24];
	size_t i = sizeof(tmp);

	do
		tmp[--i] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	util_buf_put(b, tmp + i, sizeof(tmp) - i);
}

void
util_buf_ll(struct util_buf *b, long long v)
{
	if (v < 0) {
		util_buf_put(b, "-", 1);
		/* -(v + 1) + 1: no overflow at LLONG_MIN */
		util_buf_ull(b, (unsigned long long)(-(v + 1)) + 1);
	} else
		util_buf_ull(b, (unsigned long long)v);
}

long
util_buf_len(const struct util_buf *b)
{
	return b->overflow ? -1 : (long)b->len;
}

long
util_lltoa(long long v, char *out, size_t outlen)
{
	struct util_buf b;

	util_buf_init(&b, out, outlen);
	util_buf_ll(&b, v);
	return util_buf_len(&b);
}

int
util_is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

void
util_lines_init(struct util_lines *it, const char *text, size_t len)
{
	it->text = text;
	it->len = len;
	it->pos = 0;
	it->lineno = 0;
}

int
util_lines_next(struct util_lines *it, const char **line, size_t *n)
{
	while (it->pos < it->len) {
		const char *p = it->text + it->pos, *nl;
		size_t ll, i;

		nl = memchr(p, '\n', it->len - it->pos);
		ll = nl != NULL ? (size_t)(nl - p) : it->len - it->pos;
		it->pos += ll + (nl != NULL);
		it->lineno++;
		if (memchr(p, '\0', ll) != NULL)
			return -1;
		for (i = 0; i < ll && util_is_space(p[i]); i++)
			;
		if (i == ll || p[i] == '#')
			continue;
		*line = p + i;
		*n = ll - i;
		return 1;
	}
	return 0;
}

enum util_dec
util_decimal(const char *s, size_t n, unsigned long long max,
    unsigned long long *out)
{
	unsigned long long v = 0, d;
	int over = 0;
	size_t i;

	if (n == 0)
		return UTIL_DEC_BAD;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return UTIL_DEC_BAD;
		d = (unsigned long long)(s[i] - '0');
		/* past max: keep checking the syntax, stop computing */
		if (over || v > (max - d) / 10 || d > max)
			over = 1;
		else
			v = v * 10 + d;
	}
	*out = over ? max : v;
	return over ? UTIL_DEC_OVER : UTIL_DEC_OK;
}

int
util_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int
util_is_hex(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		        (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

size_t
util_utf8_prefix(const char *s, size_t max)
{
	size_t n = strnlen(s, max + 1);

	if (n <= max)
		return n;
	n = max;
	/* s[n] is the first byte left out: never cut before a continuation */
	while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
		n--;
	return n;
}
