/*
 * form.c - form decoding, encodings and the token table.
 */
#include "form.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes one component into dst; the number of bytes written, or -1. */
static long
decode_component(const char *s, size_t n, char *dst)
{
	size_t i;
	long o = 0;
	int hi, lo;

	for (i = 0; i < n; i++) {
		if (s[i] == '+') {
			dst[o++] = ' ';
		} else if (s[i] == '%') {
			if (i + 2 >= n)
				return -1;
			hi = hexval((unsigned char)s[i + 1]);
			lo = hexval((unsigned char)s[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			dst[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			dst[o++] = s[i];
		}
	}
	return o;
}

long
sim_pct_decode(const char *src, size_t n, char *dst)
{
	size_t i;
	long o = 0;
	int hi, lo;

	for (i = 0; i < n; i++) {
		if (src[i] != '%') {
			dst[o++] = src[i];
			continue;
		}
		if (i + 2 >= n)
			return -1;
		hi = hexval((unsigned char)src[i + 1]);
		lo = hexval((unsigned char)src[i + 2]);
		if (hi < 0 || lo < 0)
			return -1;
		dst[o++] = (char)(hi << 4 | lo);
		i += 2;
	}
	return o;
}

enum sim_form_status
sim_form_decode(const char *src, size_t len, char *dst, struct sim_form *f)
{
	size_t pos = 0, out = 0, end, eq;
	long nl, vl;

	f->n = 0;
	while (pos < len) {
		const char *amp = memchr(src + pos, '&', len - pos);
		const char *e;

		end = amp ? (size_t)(amp - src) : len;
		if (end == pos) {
			pos = end + 1;
			continue;
		}
		if (f->n == SIM_MAX_PAIRS)
			return SIM_FORM_TOO_MANY;
		e = memchr(src + pos, '=', end - pos);
		eq = e ? (size_t)(e - src) : end;
		nl = decode_component(src + pos, eq - pos, dst + out);
		if (nl < 0)
			return SIM_FORM_BAD_ENCODING;
		f->pairs[f->n].name = dst + out;
		f->pairs[f->n].name_len = (size_t)nl;
		out += (size_t)nl;
		vl = 0;
		if (eq < end) {
			vl = decode_component(src + eq + 1, end - eq - 1,
			    dst + out);
			if (vl < 0)
				return SIM_FORM_BAD_ENCODING;
		}
		f->pairs[f->n].value = dst + out;
		f->pairs[f->n].value_len = (size_t)vl;
		out += (size_t)vl;
		f->n++;
		pos = end + 1;
	}
	return SIM_FORM_OK;
}

static int
cmp_bytes(const char *a, size_t an, const char *b, size_t bn)
{
	int c = memcmp(a, b, an < bn ? an : bn);

	if (c != 0)
		return c;
	return an < bn ? -1 : an > bn;
}

static int
cmp_pair(const void *a, const void *b)
{
	const struct sim_pair *x = a, *y = b;
	int c = cmp_bytes(x->name, x->name_len, y->name, y->name_len);

	return c ? c
	         : cmp_bytes(x->value, x->value_len, y->value, y->value_len);
}

void
sim_form_sort(struct sim_form *f)
{
	qsort(f->pairs, f->n, sizeof(f->pairs[0]), cmp_pair);
}

void
sim_pct_encode(struct sim_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t i;
	char *o;

	sim_buf_reserve(b, 3 * n);
	o = b->p + b->len;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		    c == '~' || c == '-') {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	b->len = (size_t)(o - b->p);
	b->p[b->len] = '\0';
}

void
sim_json_str(struct sim_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;
	char *o;

	sim_buf_reserve(b, 6 * n + 2);
	o = b->p + b->len;
	*o++ = '"';
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			*o++ = '\\';
			*o++ = 'u';
			*o++ = '0';
			*o++ = '0';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		} else {
			*o++ = (char)c;
		}
	}
	*o++ = '"';
	b->len = (size_t)(o - b->p);
	b->p[b->len] = '\0';
}

bool
sim_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k, more;
	uint32_t cp;

	while (i < n) {
		unsigned char c = p[i];

		if (c == 0)
			return false;
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			more = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			more = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			more = 3;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (i + more >= n)
			return false;
		for (k = 1; k <= more; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		if ((more == 2 &&
		        (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
		    (more == 3 && (cp < 0x10000 || cp > 0x10ffff)))
			return false;
		i += more + 1;
	}
	return true;
}

static const struct {
	const char *name;
	enum sim_token token;
} tokens[] = {
	{ "tok_chargeDeclined", SIM_TOK_DECLINE_GENERIC },
	{ "tok_chargeDeclinedInsufficientFunds", SIM_TOK_DECLINE_FUNDS },
	{ "tok_insufficientFunds", SIM_TOK_DECLINE_FUNDS },
	{ "tok_chargeDeclinedExpiredCard", SIM_TOK_DECLINE_EXPIRED },
	{ "tok_chargeDeclinedIncorrectCvc", SIM_TOK_DECLINE_CVC },
	{ "tok_chargeDeclinedFraudulent", SIM_TOK_DECLINE_FRAUD },
	{ "tok_providerError", SIM_TOK_ERROR },
	{ "tok_providerRateLimited", SIM_TOK_RATE_LIMITED },
	{ "tok_providerReset", SIM_TOK_RESET },
	{ "tok_providerChargedThen500", SIM_TOK_CHARGED_500 },
	{ "tok_providerChargedThenClose", SIM_TOK_CHARGED_CLOSE },
	{ "tok_providerChargedThenReset", SIM_TOK_CHARGED_RESET },
	{ "tok_providerTimeout", SIM_TOK_CHARGED_LATE },
	{ "tok_providerChargedThenLate", SIM_TOK_CHARGED_LATE },
	{ "tok_providerSlow", SIM_TOK_SLOW },
};

enum sim_token
sim_token_of(const char *tok, size_t n)
{
	size_t i;

	for (i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
		if (strlen(tokens[i].name) == n &&
		    memcmp(tokens[i].name, tok, n) == 0)
			return tokens[i].token;
	return SIM_TOK_SUCCEED;
}

enum sim_token
sim_token_pick(const char *source, size_t n, unsigned long nth)
{
	enum sim_token last = SIM_TOK_NONE;
	unsigned long seen = 0;
	size_t pos = 0, end;

	while (pos <= n) {
		const char *bar = memchr(source + pos, '|', n - pos);

		end = bar ? (size_t)(bar - source) : n;
		if (end - pos >= 4 && memcmp(source + pos, "tok_", 4) == 0) {
			last = sim_token_of(source + pos, end - pos);
			if (seen++ == nth)
				return last;
		}
		if (bar == NULL)
			break;
		pos = end + 1;
	}
	return last;
}

bool
sim_token_is_fault(enum sim_token t)
{
	return t >= SIM_TOK_ERROR;
}
