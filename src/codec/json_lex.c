/*
 * json_lex.c - the tokens of the strict JSON reader (json.c): the parser's
 * whitespace, failures and problem marks, string tokens (decoded once into
 * the scratch buffer) and number tokens. What is accepted, and the byte each
 * error names, follow cJSON 1.7.15's parser: see json.c.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json_lex.h"
#include "utf8.h"
#include "util.h"

#define INT_SATURATE 1000000000000000LL /* 10^15 */
#define NO_ERROR SIZE_MAX

int
is_json_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int
is_digit(unsigned char c)
{
	return c >= '0' && c <= '9';
}

static int
is_num_char(unsigned char c)
{
	return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' ||
	    c == 'E';
}

cJSON *
syntax_error(struct parser *ps, size_t at, size_t resume)
{
	ps->fail = FAIL_SYNTAX;
	ps->fail_at = at;
	ps->resume = resume;
	return NULL;
}

cJSON *
abandon(struct parser *ps, enum parse_fail why)
{
	ps->fail = why;
	return NULL;
}

void
skip_ws(struct parser *ps)
{
	while (ps->i < ps->len && ps->s[ps->i] <= 0x20) {
		if (!ps->bad && !is_json_ws(ps->s[ps->i])) {
			ps->bad = 1;
			ps->bad_at = ps->i;
		}
		ps->i++;
	}
}

int
mark(struct parser *ps, size_t seq, unsigned char flags)
{
	if (ps->nmarks == ps->markcap) {
		size_t cap = ps->markcap ? ps->markcap * 2 : 8;
		struct json_mark *m = realloc(ps->marks, cap * sizeof(*m));

		if (m == NULL)
			return -1;
		ps->marks = m;
		ps->markcap = cap;
	}
	if (ps->nmarks > 0 && ps->marks[ps->nmarks - 1].seq > seq)
		ps->unsorted = 1;
	ps->marks[ps->nmarks].seq = seq;
	ps->marks[ps->nmarks].flags = flags;
	ps->nmarks++;
	return 0;
}

/* Room for n more bytes after the first used of the scratch buffer. */
static int
scratch_room(struct parser *ps, size_t used, size_t n)
{
	size_t cap = ps->bufcap;
	char *p;

	if (n <= cap - used)
		return 0;
	while (n > cap - used)
		cap *= 2;
	if (ps->buf == ps->stack) {
		if ((p = malloc(cap)) != NULL)
			memcpy(p, ps->buf, used);
	} else
		p = realloc(ps->buf, cap);
	if (p == NULL)
		return -1;
	ps->buf = p;
	ps->bufcap = cap;
	return 0;
}

/* 1 and *v when p[0..4) are hex digits. */
static int
hex4(const unsigned char *p, unsigned *v)
{
	unsigned h = 0;

	for (int k = 0; k < 4; k++) {
		int d = util_hex_digit((char)p[k]);

		if (d < 0)
			return 0;
		h = h << 4 | (unsigned)d;
	}
	*v = h;
	return 1;
}

/* cJSON's parse_hex4(): 0 for anything that is not four hex digits. */
static unsigned
cjson_hex4(const unsigned char *p)
{
	unsigned v;

	return hex4(p, &v) ? v : 0;
}

/*
 * Where cJSON's decoding of s[d..end) fails (end is the closing quote), or
 * NO_ERROR. cJSON decodes a \u escape with a non-hex digit as U+0000 and goes
 * on six bytes later, which may be out of step with where escapes start for
 * everybody else; only in that case is the rest of a string read a second
 * time, here, to name the byte cJSON names.
 */
static size_t
resync_error(const unsigned char *s, size_t d, size_t end)
{
	unsigned code;

	while (d < end) {
		if (s[d] != '\\') {
			d++;
			continue;
		}
		switch (s[d + 1]) {
		case 'b':
		case 'f':
		case 'n':
		case 'r':
		case 't':
		case '"':
		case '\\':
		case '/': d += 2; break;
		case 'u':
			if (end - d < 6)
				return d;
			code = cjson_hex4(s + d + 2);
			if (code >= 0xdc00 && code <= 0xdfff)
				return d;
			if (code >= 0xd800 && code <= 0xdbff) {
				if (end < d + 12 || s[d + 6] != '\\' ||
				    s[d + 7] != 'u')
					return d;
				code = cjson_hex4(s + d + 8);
				if (code < 0xdc00 || code > 0xdfff)
					return d;
				d += 12;
			} else
				d += 6;
			break;
		default: return d;
		}
	}
	return NO_ERROR;
}

/*
 * Decodes the escape at s[i] (a backslash, s[i + 1] exists) to buf + *out.
 * Returns the bytes it takes, 0 when cJSON rejects it, -1 when its \u has
 * four characters that are not all hex digits (decoded as U+0000 by cJSON),
 * -2 on ENOMEM.
 */
static int
decode_escape(struct parser *ps, size_t i, size_t *out, unsigned char *f)
{
	const unsigned char *s = ps->s;
	unsigned hi, lo;

	if (scratch_room(ps, *out, 4) == -1)
		return -2;
	switch (s[i + 1]) {
	case 'b': ps->buf[(*out)++] = '\b'; return 2;
	case 'f': ps->buf[(*out)++] = '\f'; return 2;
	case 'n': ps->buf[(*out)++] = '\n'; return 2;
	case 'r': ps->buf[(*out)++] = '\r'; return 2;
	case 't': ps->buf[(*out)++] = '\t'; return 2;
	case '"':
	case '\\':
	case '/': ps->buf[(*out)++] = (char)s[i + 1]; return 2;
	case 'u': break;
	default: return 0;
	}
	if (ps->len - i < 6)
		return 0;
	if (!hex4(s + i + 2, &hi))
		return -1;
	if (hi >= 0xdc00 && hi <= 0xdfff)
		return 0;
	if (hi >= 0xd800 && hi <= 0xdbff) {
		if (ps->len - i < 12 || s[i + 6] != '\\' || s[i + 7] != 'u' ||
		    !hex4(s + i + 8, &lo) || lo < 0xdc00 || lo > 0xdfff)
			return 0;
		*out += utf8_put(ps->buf + *out,
		    0x10000 +
		        (((unsigned long)(hi & 0x3ff) << 10) | (lo & 0x3ff)));
		return 12;
	}
	if (hi == 0)
		*f |= MARK_NUL;
	*out += utf8_put(ps->buf + *out, hi);
	return 6;
}

/*
 * After an escape cJSON rejects or reads differently: the end of the string
 * from s[i] as everybody finds it (its '"', or len), still noting the raw
 * problems in *f, decoding nothing more.
 */
static size_t
string_end(const unsigned char *s, size_t len, size_t i, unsigned char *f)
{
	size_t k;

	while (i < len) {
		if (s[i] >= 0x80) {
			if ((k = utf8_seq(s + i, len - i)) == 0) {
				*f |= MARK_BAD_UTF8;
				k = 1;
			}
			i += k;
			continue;
		}
		if (s[i] == '"')
			break;
		if (s[i] < 0x20)
			*f |= MARK_CTRL;
		if (s[i] == '\\') {
			if (i + 1 >= len)
				break;
			if (len - i > 5 && memcmp(s + i + 1, "u0000", 5) == 0)
				*f |= MARK_NUL;
			if (s[++i] >= 0x80)
				continue; /* escaped, but still UTF-8 */
		}
		i++;
	}
	return i;
}

/*
 * Reads the string whose quote is at ps->i into the scratch buffer
 * (NUL-terminated) and past its closing quote; *f gets its MARK_* problems.
 * 0, or -1 with ps->fail set.
 */
static int
scan_string(struct parser *ps, unsigned char *f)
{
	const unsigned char *s = ps->s;
	size_t len = ps->len, q = ps->i, i = q + 1, out = 0, j, k;
	size_t bad_escape = NO_ERROR, resync = NO_ERROR;
	int r;

	*f = 0;
	/* decoding, while escapes start where everybody agrees they do */
	for (;;) {
		for (j = i; j < len && s[j] >= 0x20 && s[j] < 0x80 &&
		     s[j] != '"' && s[j] != '\\';
		     j++)
			;
		if (scratch_room(ps, out, j - i + 4) == -1)
			goto nomem;
		memcpy(ps->buf + out, s + i, j - i);
		out += j - i;
		i = j;
		if (i >= len)
			goto unterminated;
		if (s[i] == '"')
			goto closed;
		if (s[i] == '\\') {
			if (i + 1 >= len)
				goto unterminated;
			r = decode_escape(ps, i, &out, f);
			if (r > 0) {
				i += (size_t)r;
				continue;
			}
			if (r == -2)
				goto nomem;
			if (r == 0)
				bad_escape = i;
			else
				resync = i;
			ps->buf[out] = '\0'; /* cJSON's U+0000 ends it */
			break;
		}
		if (s[i] >= 0x80) {
			if ((k = utf8_seq(s + i, len - i)) == 0) {
				*f |= MARK_BAD_UTF8;
				k = 1;
			}
			memcpy(ps->buf + out, s + i, k);
			out += k;
			i += k;
		} else {
			*f |= MARK_CTRL;
			ps->buf[out++] = (char)s[i++];
		}
	}
	i = string_end(s, len, i, f);
	if (*f & MARK_BAD_UTF8)
		ps->not_utf8 = 1;
	if (i >= len || s[i] != '"')
		goto unterminated;
	if (resync != NO_ERROR)
		bad_escape = resync_error(s, resync, i);
	if (bad_escape != NO_ERROR) {
		syntax_error(ps, bad_escape, i + 1);
		return -1;
	}
	ps->i = i + 1;
	return 0;
closed:
	ps->buf[out] = '\0';
	if (*f & MARK_BAD_UTF8)
		ps->not_utf8 = 1;
	ps->i = i + 1;
	return 0;
unterminated:
	if (*f & MARK_BAD_UTF8)
		ps->not_utf8 = 1;
	syntax_error(ps, q + 1, len); /* the lexer stops here too */
	return -1;
nomem:
	abandon(ps, FAIL_NOMEM);
	return -1;
}

int
string_token(struct parser *ps)
{
	size_t seq = ps->seq++;
	unsigned char f;

	if (scan_string(ps, &f) == -1)
		return -1;
	if (f != 0 && mark(ps, seq, f) == -1) {
		abandon(ps, FAIL_NOMEM);
		return -1;
	}
	return 0;
}

/* Length of the prefix of a number token that strtod() reads; 0 if none. */
static size_t
strtod_prefix(const unsigned char *p, size_t n)
{
	size_t i = 0, digits = 0, j;

	if (i < n && (p[i] == '-' || p[i] == '+'))
		i++;
	for (; i < n && is_digit(p[i]); i++)
		digits++;
	if (i < n && p[i] == '.')
		for (i++; i < n && is_digit(p[i]); i++)
			digits++;
	if (digits == 0)
		return 0;
	if (i < n && (p[i] == 'e' || p[i] == 'E')) {
		j = i + 1;
		if (j < n && (p[j] == '-' || p[j] == '+'))
			j++;
		if (j < n && is_digit(p[j])) {
			while (j < n && is_digit(p[j]))
				j++;
			i = j;
		}
	}
	return i;
}

/* -?(0|[1-9][0-9]*) */
static int
is_plain_int(const unsigned char *p, size_t n)
{
	size_t i = p[0] == '-';

	if (i == n)
		return 0;
	if (p[i] == '0')
		return i + 1 == n;
	for (; i < n; i++)
		if (!is_digit(p[i]))
			return 0;
	return 1;
}

cJSON *
parse_number(struct parser *ps)
{
	const unsigned char *p = ps->s + ps->i;
	size_t n = 0, used;
	long long v = 0;
	cJSON *num;

	while (n < ps->len - ps->i && is_num_char(p[n]))
		n++;
	if ((used = strtod_prefix(p, n)) == 0)
		return syntax_error(ps, ps->i, ps->i + n);
	if (is_plain_int(p, n)) {
		for (size_t k = p[0] == '-'; k < n && v < INT_SATURATE; k++)
			v = v * 10 + (p[k] - '0');
		if (v > INT_SATURATE)
			v = INT_SATURATE;
		/* "-0" is the value 0, not -0.0: it validates, echoes and
		 * fingerprints as "0" (docs/API.md §7.1) */
		num = cJSON_CreateNumber(
		    p[0] == '-' && v != 0 ? -(double)v : (double)v);
	} else {
		if (scratch_room(ps, 0, used + 1) == -1)
			return abandon(ps, FAIL_NOMEM);
		memcpy(ps->buf, p, used);
		ps->buf[used] = '\0';
		num = cJSON_CreateRaw(ps->buf);
	}
	if (num == NULL)
		return abandon(ps, FAIL_NOMEM);
	ps->i += used;
	return num;
}
