/*
 * json.c - the strict JSON layer: one pass over a body's bytes lexes,
 * checks and parses it, decoding each string once into the cJSON node it
 * builds; afterwards, only when something was found, a walk of the tree
 * names the members the problems are in.
 *
 * Why not cJSON_Parse: cJSON is lenient (numbers become doubles, so "1.0",
 * "1e2" and "01" all read as 1; duplicate members, invalid UTF-8, raw control
 * characters, "\u0000", a BOM and any byte <= 0x20 as whitespace are all
 * accepted) and keeps no positions, so the raw text would need a second pass
 * of its own. The tree is cJSON's (cJSON_Create*, cJSON_Delete); only the
 * reading of the bytes is written here.
 *
 * What the parser accepts, and the byte each error names, are those of
 * cJSON 1.7.15's parser (the 400 bodies depend on them): any byte <= 0x20 is
 * whitespace to the grammar (the ones JSON does not allow are then reported
 * as JSON_BAD_BYTE), a BOM is skipped when at least two bytes follow it, a
 * missing member name is reported one byte after where its quote should be,
 * and a \u escape whose four characters are not hex digits decodes as U+0000
 * (see resync_error()).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defaults.h"
#include "json.h"
#include "util.h"

#define BOM "\xef\xbb\xbf"
#define BOM_SKIP_MIN 5                  /* body bytes for cJSON to skip a BOM */
#define INT_SATURATE 1000000000000000LL /* 10^15 */
#define DUP_SORT_MIN 16   /* members: from here, sort for duplicates */
#define SCRATCH_BYTES 256 /* decoded string held on the stack */
#define NO_ERROR SIZE_MAX

/* What a string or object has that json_problems() reports. */
#define MARK_BAD_UTF8 0x01 /* raw bytes are not UTF-8 */
#define MARK_CTRL 0x02     /* unescaped byte < 0x20 */
#define MARK_NUL 0x04      /* \u0000 escape */
#define MARK_DUP 0x08      /* object: a member name occurs twice */

/* Objects and strings (names and values) are numbered in document order. */
struct json_mark {
	size_t seq;
	unsigned char flags;
};

enum parse_fail { FAIL_NONE, FAIL_SYNTAX, FAIL_DEEP, FAIL_MANY, FAIL_NOMEM };

struct parser {
	const unsigned char *s;
	size_t len;
	size_t i;      /* next byte */
	int depth;     /* containers open at i */
	size_t values; /* values begun so far */
	/* the root object's member being read (for JSON_TOO_MANY) */
	char top[JSON_FIELD_SIZE];
	enum parse_fail fail;
	size_t fail_at; /* FAIL_SYNTAX: the byte cJSON names */
	size_t resume;  /* FAIL_SYNTAX: where tail_scan() goes on */
	int bad;        /* a BOM or control byte used as whitespace */
	size_t bad_at;
	int not_utf8; /* some string read so far is not UTF-8 */
	size_t seq;
	struct json_mark *marks;
	size_t nmarks, markcap;
	int unsorted; /* an object was marked after its strings */
	char *buf;    /* decoded string, NUL-terminated */
	size_t bufcap;
	char stack[SCRATCH_BYTES];
};

static cJSON *parse_value(struct parser *ps);

static int
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

/* Length of the UTF-8 sequence that starts p[0..n) (p[0] >= 0x80); 0 if none. */
static size_t
utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t more;

	if (c >= 0xc2 && c <= 0xdf)
		more = 1;
	else if (c >= 0xe0 && c <= 0xef) {
		more = 2;
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		more = 3;
		if (c == 0xf0)
			lo = 0x90; /* overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* > U+10FFFF */
	} else
		return 0; /* continuation, overlong C0/C1, F5+ */
	if (n - 1 < more || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t k = 2; k <= more; k++)
		if ((p[k] & 0xc0) != 0x80)
			return 0;
	return more + 1;
}

int
utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k;

	while (i < n) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		if ((k = utf8_seq(p + i, n - i)) == 0)
			return 0;
		i += k;
	}
	return 1;
}

static cJSON *
syntax_error(struct parser *ps, size_t at, size_t resume)
{
	ps->fail = FAIL_SYNTAX;
	ps->fail_at = at;
	ps->resume = resume;
	return NULL;
}

static cJSON *
abandon(struct parser *ps, enum parse_fail why)
{
	ps->fail = why;
	return NULL;
}

/* cJSON's whitespace: any byte <= 0x20; the first that JSON forbids is kept. */
static void
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

static int
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
		unsigned char c = p[k];

		h <<= 4;
		if (is_digit(c))
			h |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			h |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			h |= (unsigned)(c - 'A' + 10);
		else
			return 0;
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

static size_t
utf8_put(char *out, unsigned long cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
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
	/*
	 * After an escape cJSON rejects or reads differently: find the end as
	 * everybody does, still noting the raw problems, decoding nothing more.
	 */
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

/* Scans a string token, numbers it and marks its problems; -1 on failure. */
static int
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

/*
 * A number token: as cJSON, the characters [-+.eE0-9] that follow are the
 * token and the longest prefix strtod() takes is the number (what it leaves
 * is a syntax error where the next token should be).
 */
static cJSON *
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

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 when two of obj's n members have the same name, 0 if not, -1 on ENOMEM. */
static int
has_duplicates(const cJSON *obj, size_t n)
{
	const cJSON *a, *b;
	const char **names;
	size_t i;
	int dup = 0;

	if (n < DUP_SORT_MIN) {
		for (a = obj->child; a != NULL; a = a->next)
			for (b = a->next; b != NULL; b = b->next)
				if (strcmp(a->string, b->string) == 0)
					return 1;
		return 0;
	}
	if ((names = malloc(n * sizeof(*names))) == NULL)
		return -1;
	for (i = 0, a = obj->child; a != NULL; a = a->next)
		names[i++] = a->string;
	qsort(names, n, sizeof(*names), name_cmp);
	for (i = 1; i < n && !dup; i++)
		dup = strcmp(names[i - 1], names[i]) == 0;
	free(names);
	return dup;
}

/* A member name: a copy of its decoded text, for the member's node. */
static char *
parse_name(struct parser *ps)
{
	size_t n;
	char *name;

	if (string_token(ps) == -1)
		return NULL;
	n = strlen(ps->buf);
	if ((name = cJSON_malloc(n + 1)) == NULL) {
		abandon(ps, FAIL_NOMEM);
		return NULL;
	}
	memcpy(name, ps->buf, n + 1);
	return name;
}

/*
 * After a member of an array or object: a ',' (consumed, with the space
 * after it) gives 1, the closer (not consumed) 0, anything else a syntax
 * error and -1.
 */
static int
after_member(struct parser *ps, char closer)
{
	skip_ws(ps);
	if (ps->i < ps->len && ps->s[ps->i] == ',') {
		ps->i++;
		skip_ws(ps);
		return 1;
	}
	if (ps->i >= ps->len || ps->s[ps->i] != closer) {
		syntax_error(ps, ps->i, ps->i);
		return -1;
	}
	return 0;
}

static cJSON *
parse_array(struct parser *ps)
{
	cJSON *arr, *item;
	int more;

	if (++ps->depth > JSON_DEPTH_MAX)
		return abandon(ps, FAIL_DEEP);
	if ((arr = cJSON_CreateArray()) == NULL)
		return abandon(ps, FAIL_NOMEM);
	ps->i++;
	skip_ws(ps);
	if (ps->i < ps->len && ps->s[ps->i] == ']')
		goto close;
	for (;;) {
		if ((item = parse_value(ps)) == NULL)
			goto fail;
		(void)cJSON_AddItemToArray(arr, item);
		if ((more = after_member(ps, ']')) < 0)
			goto fail;
		if (!more)
			break;
	}
close:
	ps->i++;
	ps->depth--;
	return arr;
fail:
	cJSON_Delete(arr);
	return NULL;
}

static cJSON *
parse_object(struct parser *ps)
{
	size_t seq = ps->seq++, n = 0;
	cJSON *obj, *item;
	char *name;
	int dup, more;

	if (++ps->depth > JSON_DEPTH_MAX)
		return abandon(ps, FAIL_DEEP);
	if ((obj = cJSON_CreateObject()) == NULL)
		return abandon(ps, FAIL_NOMEM);
	ps->i++;
	skip_ws(ps);
	if (ps->i < ps->len && ps->s[ps->i] == '}')
		goto close;
	for (;;) {
		if (ps->i >= ps->len || ps->s[ps->i] != '"') {
			/* cJSON names the byte after the missing quote */
			syntax_error(ps, ps->i + 1, ps->i);
			goto fail;
		}
		if ((name = parse_name(ps)) == NULL)
			goto fail;
		if (ps->depth == 1)
			(void)snprintf(ps->top, sizeof(ps->top), "%s", name);
		skip_ws(ps);
		if (ps->i >= ps->len || ps->s[ps->i] != ':') {
			cJSON_free(name);
			syntax_error(ps, ps->i, ps->i);
			goto fail;
		}
		ps->i++;
		skip_ws(ps);
		if ((item = parse_value(ps)) == NULL) {
			cJSON_free(name);
			goto fail;
		}
		/* a copy already: cJSON_AddItemToObject() would copy it again */
		item->string = name;
		(void)cJSON_AddItemToArray(obj, item);
		n++;
		if ((more = after_member(ps, '}')) < 0)
			goto fail;
		if (!more)
			break;
	}
close:
	ps->i++;
	ps->depth--;
	if (n >= 2 && (dup = has_duplicates(obj, n)) != 0 &&
	    (dup == -1 || mark(ps, seq, MARK_DUP) == -1)) {
		abandon(ps, FAIL_NOMEM);
		goto fail;
	}
	return obj;
fail:
	cJSON_Delete(obj);
	return NULL;
}

static cJSON *
parse_value(struct parser *ps)
{
	const unsigned char *p = ps->s + ps->i;
	size_t left = ps->len - ps->i;
	cJSON *v;

	if (left == 0)
		return syntax_error(ps, ps->i, ps->i);
	/* a bound on the tree, whatever the body's size (JSON_VALUES_MAX) */
	if (++ps->values > JSON_VALUES_MAX)
		return abandon(ps, FAIL_MANY);
	switch (p[0]) {
	case '"':
		if (string_token(ps) == -1)
			return NULL;
		v = cJSON_CreateString(ps->buf);
		break;
	case '-':
	case '0':
	case '1':
	case '2':
	case '3':
	case '4':
	case '5':
	case '6':
	case '7':
	case '8':
	case '9': return parse_number(ps);
	case '[': return parse_array(ps);
	case '{': return parse_object(ps);
	case 'n':
		if (left < 4 || memcmp(p, "null", 4) != 0)
			return syntax_error(ps, ps->i, ps->i);
		v = cJSON_CreateNull();
		ps->i += 4;
		break;
	case 't':
		if (left < 4 || memcmp(p, "true", 4) != 0)
			return syntax_error(ps, ps->i, ps->i);
		v = cJSON_CreateTrue();
		ps->i += 4;
		break;
	case 'f':
		if (left < 5 || memcmp(p, "false", 5) != 0)
			return syntax_error(ps, ps->i, ps->i);
		v = cJSON_CreateFalse();
		ps->i += 5;
		break;
	default: return syntax_error(ps, ps->i, ps->i);
	}
	return v != NULL ? v : abandon(ps, FAIL_NOMEM);
}

/*
 * The bytes from s[from] on, after the value or a syntax error, read only for
 * what still decides the status: brackets outside strings (1 when they nest
 * deeper than JSON_DEPTH_MAX; an unterminated string ends the count) and
 * whether every byte is UTF-8.
 */
static int
tail_scan(struct parser *ps, size_t from, int depth)
{
	const unsigned char *s = ps->s;
	size_t i = from, k;
	int in_string = 0;

	while (i < ps->len) {
		unsigned char c = s[i];

		if (c >= 0x80) {
			if ((k = utf8_seq(s + i, ps->len - i)) == 0) {
				ps->not_utf8 = 1;
				k = 1;
			}
			i += k;
			continue;
		}
		if (in_string) {
			if (c == '"')
				in_string = 0;
			else if (c == '\\' && ++i < ps->len && s[i] >= 0x80)
				continue; /* escaped, but still UTF-8 */
		} else if (c == '"')
			in_string = 1;
		else if (c == '{' || c == '[') {
			if (++depth > JSON_DEPTH_MAX)
				return 1;
		} else if ((c == '}' || c == ']') && depth > 0)
			depth--;
		i++;
	}
	return 0;
}

static int
mark_cmp(const void *a, const void *b)
{
	const struct json_mark *x = a, *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

enum json_status
json_parse(const char *buf, size_t len, struct json_doc *doc)
{
	struct parser ps;
	enum json_status st;
	size_t end, t;

	memset(doc, 0, sizeof(*doc));
	if (buf == NULL || len == 0)
		return JSON_EMPTY;
	memset(&ps, 0, offsetof(struct parser, stack));
	ps.s = (const unsigned char *)buf;
	ps.len = len;
	ps.buf = ps.stack;
	ps.bufcap = sizeof(ps.stack);
	if (len >= BOM_SKIP_MIN && memcmp(buf, BOM, 3) == 0) {
		ps.i = 3;
		ps.bad = 1;
		ps.bad_at = 0;
	}
	skip_ws(&ps);
	doc->root = parse_value(&ps);
	if (doc->root != NULL) {
		end = ps.i;
		for (t = end; t < len && is_json_ws(ps.s[t]); t++)
			;
		if (t < len && tail_scan(&ps, end, 0))
			st = JSON_TOO_DEEP;
		else if (ps.bad && ps.bad_at < end) {
			st = JSON_BAD_BYTE;
			doc->at = ps.bad_at;
		} else if (t < len) {
			st = JSON_TRAILING;
			doc->at = t;
		} else
			st = JSON_OK;
	} else if (ps.fail == FAIL_SYNTAX) {
		if (tail_scan(&ps, ps.resume, ps.depth))
			st = JSON_TOO_DEEP;
		else if (ps.not_utf8)
			st = JSON_NOT_UTF8;
		else {
			st = JSON_SYNTAX;
			doc->at = ps.fail_at < len ? ps.fail_at : len - 1;
		}
	} else if (ps.fail == FAIL_MANY) {
		/* nothing after is read, but nesting too deep still wins */
		if (tail_scan(&ps, ps.i, ps.depth))
			st = JSON_TOO_DEEP;
		else {
			st = JSON_TOO_MANY;
			(void)snprintf(doc->field, sizeof(doc->field), "%s",
			    ps.top);
		}
	} else
		st = ps.fail == FAIL_DEEP ? JSON_TOO_DEEP : JSON_NOMEM;
	if (ps.buf != ps.stack)
		free(ps.buf);
	if (st != JSON_OK) {
		cJSON_Delete(doc->root);
		doc->root = NULL;
		free(ps.marks);
		return st;
	}
	if (ps.unsorted)
		qsort(ps.marks, ps.nmarks, sizeof(*ps.marks), mark_cmp);
	doc->marks = ps.marks;
	doc->nmarks = ps.nmarks;
	return JSON_OK;
}

void
json_doc_free(struct json_doc *doc)
{
	if (doc == NULL)
		return;
	cJSON_Delete(doc->root);
	free(doc->marks);
	memset(doc, 0, sizeof(*doc));
}

static void
path_copy(char *dst, size_t size, const char *src)
{
	size_t n = util_utf8_prefix(src, size - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

void
json_path_member(char *dst, size_t size, const char *parent, const char *name)
{
	size_t n = 0, nlen = strlen(name);
	int ok = utf8_valid(name, nlen);

	if (*parent != '\0') {
		path_copy(dst, size, parent);
		n = strlen(dst);
		if (n + 1 < size)
			dst[n++] = '.';
	}
	for (size_t i = 0; i < nlen && n + 1 < size; i++) {
		unsigned char c = (unsigned char)name[i];

		if (ok && c >= 0xc0) {
			/* copy a whole sequence or stop */
			size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;

			if (n + len >= size)
				break;
			memcpy(dst + n, name + i, len);
			n += len;
			i += len - 1;
		} else
			dst[n++] = (!ok && c >= 0x80) ? '?' : (char)c;
	}
	dst[n] = '\0';
}

void
json_path_index(char *dst, size_t size, const char *parent, size_t i)
{
	char idx[32];
	size_t n, k;

	path_copy(dst, size, parent);
	if (snprintf(idx, sizeof(idx), "[%zu]", i) < 0)
		return;
	n = strlen(dst);
	k = strlen(idx);
	if (n + k < size)
		memcpy(dst + n, idx, k + 1);
}

/* The walk of json_problems(): marks are met in the order of their seq. */
struct walk {
	const struct json_mark *marks;
	size_t nmarks, next, seq;
	json_problem_fn *fn;
	void *ctx;
	int oom;
};

static unsigned char
walk_mark(struct walk *w)
{
	size_t seq = w->seq++;

	if (w->next < w->nmarks && w->marks[w->next].seq == seq)
		return w->marks[w->next++].flags;
	return 0;
}

static void
walk_string(struct walk *w, unsigned char f, const char *field, int is_name)
{
	static const char *const msg[2][3] = {
		{ "value is not valid UTF-8",
		    "value contains an unescaped control character",
		    "value must not contain \\u0000" },
		{ "member name is not valid UTF-8",
		    "member name contains an unescaped control character",
		    "member name must not contain \\u0000" },
	};

	if (f & MARK_BAD_UTF8)
		w->fn(w->ctx, field, msg[is_name][0]);
	if (f & MARK_CTRL)
		w->fn(w->ctx, field, msg[is_name][1]);
	if (f & MARK_NUL)
		w->fn(w->ctx, field, msg[is_name][2]);
}

struct member_name {
	const char *name;
	size_t idx;
};

static int
member_name_cmp(const void *a, const void *b)
{
	const struct member_name *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c != 0)
		return c;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Reports each name that occurs more than once in obj, once, sorted. */
static void
walk_duplicates(struct walk *w, const cJSON *obj, const char *path)
{
	char field[JSON_FIELD_SIZE];
	struct member_name *names;
	const cJSON *c;
	size_t n = 0, i;

	for (c = obj->child; c != NULL; c = c->next)
		n++;
	if ((names = calloc(n, sizeof(*names))) == NULL) {
		w->oom = 1;
		return;
	}
	for (i = 0, c = obj->child; c != NULL; c = c->next, i++) {
		names[i].name = c->string;
		names[i].idx = i;
	}
	qsort(names, n, sizeof(*names), member_name_cmp);
	for (i = 1; i < n; i++) {
		if (strcmp(names[i].name, names[i - 1].name) != 0)
			continue;
		if (i >= 2 && strcmp(names[i].name, names[i - 2].name) == 0)
			continue; /* already reported */
		json_path_member(field, sizeof(field), path, names[i].name);
		w->fn(w->ctx, field, "duplicate member");
	}
	free(names);
}

/* Pre-order, as the parser numbered: object, then each name and its value. */
static void
walk_node(struct walk *w, const cJSON *node, const char *path)
{
	char field[JSON_FIELD_SIZE];
	const cJSON *c;
	unsigned char f;
	size_t i;

	if (w->next >= w->nmarks || w->oom)
		return;
	if (cJSON_IsObject(node)) {
		if (walk_mark(w) & MARK_DUP)
			walk_duplicates(w, node, path);
		for (c = node->child; c != NULL; c = c->next) {
			json_path_member(field, sizeof(field), path, c->string);
			if ((f = walk_mark(w)) != 0)
				walk_string(w, f, field, 1);
			walk_node(w, c, field);
		}
	} else if (cJSON_IsArray(node)) {
		for (i = 0, c = node->child; c != NULL; c = c->next, i++) {
			json_path_index(field, sizeof(field), path, i);
			walk_node(w, c, field);
		}
	} else if (cJSON_IsString(node) && (f = walk_mark(w)) != 0)
		walk_string(w, f, path, 0);
}

int
json_problems(const struct json_doc *doc, json_problem_fn *fn, void *ctx)
{
	struct walk w;

	if (doc->root == NULL || doc->nmarks == 0)
		return 0;
	memset(&w, 0, sizeof(w));
	w.marks = doc->marks;
	w.nmarks = doc->nmarks;
	w.fn = fn;
	w.ctx = ctx;
	walk_node(&w, doc->root, "");
	return w.oom ? -1 : 0;
}
