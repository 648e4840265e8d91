/*
 * headers.c - pure parsers for the request headers of docs/API.md §4:
 * Idempotency-Key, Content-Type, CONTENT_LENGTH, Prefer and Authorization.
 * No I/O, no allocation: header value in, result out.
 */
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "headers.h"
#include "util.h"

#define MEDIA_TYPE_JSON "application/json"
#define AUTH_SCHEME "Bearer"
#define PREFER_WAIT "wait"

static int
is_ows(char c)
{
	return c == ' ' || c == '\t';
}

static int
is_vchar(unsigned char c)
{
	return c >= 0x21 && c <= 0x7e;
}

/* RFC 9110 tchar. */
static int
is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9'))
		return 1;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Skips a token; returns the position after it (== s when none). */
static const char *
skip_token(const char *s)
{
	while (is_tchar((unsigned char)*s))
		s++;
	return s;
}

static const char *
skip_ows(const char *s)
{
	while (is_ows(*s))
		s++;
	return s;
}

/*
 * Skips an RFC 9110 quoted-string starting at *s == '"'. Returns the
 * position after the closing quote, or NULL when it is unterminated or
 * holds a control character.
 */
static const char *
skip_quoted(const char *s)
{
	unsigned char c;

	for (s++; *s != '"'; s++) {
		c = (unsigned char)*s;
		if (c == '\\') {
			s++;
			c = (unsigned char)*s;
			if (c == '\0' || (c < 0x20 && c != '\t') || c == 0x7f)
				return NULL;
			continue;
		}
		if (c == '\0' || (c < 0x20 && c != '\t') || c == 0x7f)
			return NULL;
	}
	return s + 1;
}

/*
 * Unquotes an RFC 8941 sf-string at s (s[0] == '"') into out. Only the
 * escapes \" and \\ exist; every character of the key must be visible
 * ASCII, so a quoted space is rejected too. Returns the position after the
 * closing quote, or NULL when malformed or longer than IDEM_KEY_MAX.
 */
static const char *
sf_string_unquote(const char *s, char *out, size_t *outlen)
{
	size_t n = 0;
	unsigned char c;

	for (s++; *s != '"'; s++) {
		c = (unsigned char)*s;
		if (c == '\\') {
			s++;
			c = (unsigned char)*s;
			if (c != '"' && c != '\\')
				return NULL;
		} else if (!is_vchar(c))
			return NULL; /* also the NUL of an unterminated string */
		if (n >= IDEM_KEY_MAX)
			return NULL;
		out[n++] = (char)c;
	}
	out[n] = '\0';
	*outlen = n;
	return s + 1;
}

/*
 * A field value that is empty (or only spaces/tabs) is treated like an
 * absent one: web servers differ on whether they forward empty headers.
 */
enum key_status
idem_key_parse(const char *value, char out[IDEM_KEY_MAX + 1], size_t *outlen)
{
	const char *s, *end;
	size_t n;

	if (value == NULL)
		return KEY_MISSING;
	s = skip_ows(value);
	end = s + strlen(s);
	while (end > s && is_ows(end[-1]))
		end--;
	if (end == s)
		return KEY_MISSING;

	if (*s == '"') {
		s = sf_string_unquote(s, out, &n);
		if (s == NULL || s != end || n == 0)
			return KEY_INVALID;
		*outlen = n;
		return KEY_OK;
	}

	/*
	 * A comma in a bare key is where a hop joined two fields (RFC 9110
	 * 5.3), and an sf-item holds no bare comma: only a quoted key has one.
	 */
	n = (size_t)(end - s);
	if (n > IDEM_KEY_MAX)
		return KEY_INVALID;
	for (size_t i = 0; i < n; i++)
		if (!is_vchar((unsigned char)s[i]) || s[i] == ',')
			return KEY_INVALID;
	memcpy(out, s, n);
	out[n] = '\0';
	*outlen = n;
	return KEY_OK;
}

/* A quoted key with every byte escaped, and some spaces around it. */
#define KEY_PATH_DECODED_MAX (2 * IDEM_KEY_MAX + 2 + 64)

enum key_status
idem_key_from_path(const char *seg, char out[IDEM_KEY_MAX + 1], size_t *outlen)
{
	/* room for the longest header form: a quoted key, every byte escaped */
	char buf[KEY_PATH_DECODED_MAX + 1];
	size_t n = 0;
	int hi, lo;

	if (seg == NULL || *seg == '\0')
		return KEY_MISSING;
	for (; *seg != '\0'; seg++) {
		if (n == sizeof(buf) - 1)
			return KEY_INVALID; /* longer than any key */
		if (*seg != '%') {
			buf[n++] = *seg;
			continue;
		}
		if ((hi = util_hex_digit(seg[1])) < 0 ||
		    (lo = util_hex_digit(seg[2])) < 0)
			return KEY_INVALID; /* "%", "%4", "%zz" */
		if ((buf[n++] = (char)(hi << 4 | lo)) == '\0')
			return KEY_INVALID; /* %00 */
		seg += 2;
	}
	buf[n] = '\0';
	return idem_key_parse(buf, out, outlen);
}

/*
 * media-type = type "/" subtype *( OWS ";" OWS [ parameter ] ),
 * parameter = token "=" ( token / quoted-string ) (RFC 9110 8.3.1).
 */
int
content_type_is_json(const char *value)
{
	const char *s;
	size_t tlen = strlen(MEDIA_TYPE_JSON);

	if (value == NULL)
		return 0;
	s = skip_ows(value);
	if (strncasecmp(s, MEDIA_TYPE_JSON, tlen) != 0)
		return 0;
	s = skip_ows(s + tlen);
	while (*s == ';') {
		const char *t;

		s = skip_ows(s + 1);
		if (*s == ';' || *s == '\0')
			continue;
		t = skip_token(s);
		if (t == s || *t != '=')
			return 0;
		s = t + 1;
		if (*s == '"') {
			s = skip_quoted(s);
			if (s == NULL)
				return 0;
		} else {
			t = skip_token(s);
			if (t == s)
				return 0;
			s = t;
		}
		s = skip_ows(s);
	}
	return *s == '\0';
}

enum clen_status
content_length_parse(const char *value, size_t max, size_t *out)
{
	unsigned long long n;

	if (value == NULL || *value == '\0') {
		*out = 0;
		return CLEN_OK;
	}
	switch (util_decimal(value, strlen(value), max, &n)) {
	case UTIL_DEC_OK: *out = (size_t)n; return CLEN_OK;
	case UTIL_DEC_OVER: return CLEN_TOO_LARGE;
	default: return CLEN_INVALID;
	}
}

/*
 * Parses delta-seconds (optionally quoted) from s[0..n); returns the value
 * clamped to INT_MAX, or -1 when it is not a non-negative integer.
 */
static int
delta_seconds_parse(const char *s, size_t n)
{
	unsigned long long v;

	if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
		s++;
		n -= 2;
	}
	if (util_decimal(s, n, INT_MAX, &v) == UTIL_DEC_BAD)
		return -1;
	return (int)v; /* clamped to INT_MAX */
}

/*
 * Prefer = #( token [ BWS "=" BWS word ] *( OWS ";" [ OWS parameter ] ) )
 * (RFC 7240). Only the first wait preference counts (RFC 7240 section 2);
 * a malformed one yields -1. Unparseable input yields -1.
 */
int
prefer_wait_parse(const char *value)
{
	const char *s = value;

	if (s == NULL)
		return -1;
	for (;;) {
		const char *tok, *tend, *val = NULL, *vend = NULL;

		while (is_ows(*s) || *s == ',')
			s++;
		if (*s == '\0')
			return -1;
		tok = s;
		tend = skip_token(s);
		if (tend == tok)
			return -1;
		s = skip_ows(tend);
		if (*s == '=') {
			s = skip_ows(s + 1);
			val = s;
			if (*s == '"') {
				s = skip_quoted(s);
				if (s == NULL)
					return -1;
			} else
				s = skip_token(s);
			vend = s;
			s = skip_ows(s);
		}
		/* preference parameters: skipped, but quoted strings honoured */
		while (*s == ';') {
			s = skip_ows(s + 1);
			s = skip_token(s);
			s = skip_ows(s);
			if (*s == '=') {
				s = skip_ows(s + 1);
				if (*s == '"') {
					s = skip_quoted(s);
					if (s == NULL)
						return -1;
				} else
					s = skip_token(s);
				s = skip_ows(s);
			}
		}
		if (*s != ',' && *s != '\0')
			return -1;
		if ((size_t)(tend - tok) == strlen(PREFER_WAIT) &&
		    strncasecmp(tok, PREFER_WAIT, strlen(PREFER_WAIT)) == 0) {
			if (val == NULL)
				return -1;
			return delta_seconds_parse(val, (size_t)(vend - val));
		}
	}
}

int
bearer_token(const char *value, const char **tok, size_t *toklen)
{
	const char *s, *t;
	size_t slen = strlen(AUTH_SCHEME);

	if (value == NULL)
		return -1;
	s = skip_ows(value);
	if (strncasecmp(s, AUTH_SCHEME, slen) != 0 || s[slen] != ' ')
		return -1;
	s += slen;
	while (*s == ' ')
		s++;
	t = s;
	while (is_vchar((unsigned char)*t))
		t++;
	if (t == s)
		return -1;
	if (*skip_ows(t) != '\0')
		return -1;
	*tok = s;
	*toklen = (size_t)(t - s);
	return 0;
}

int
request_id_acceptable(const char *value)
{
	size_t i;

	if (value == NULL || value[0] == '\0')
		return 0;
	for (i = 0; value[i] != '\0'; i++) {
		unsigned char c = (unsigned char)value[i];

		if (i == REQUEST_ID_MAX ||
		    !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		        (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		        c == ':' || c == '-'))
			return 0;
	}
	return 1;
}

/* n lower-case hex digits at s, not all '0' unless zero_ok. 1 or 0. */
static int
lower_hex(const char *s, size_t n, int zero_ok)
{
	size_t i;
	int nonzero = 0;

	for (i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') ||
		        (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
		nonzero |= s[i] != '0';
	}
	return zero_ok || nonzero;
}

int
traceparent_parse(const char *value, char trace_id[TRACE_ID_HEX + 1],
    char flags[3])
{
	const char *v = value;
	size_t n;

	if (v == NULL)
		return -1;
	v = skip_ows(v);
	n = strlen(v);
	while (n > 0 && is_ows(v[n - 1]))
		n--;
	/* version, trace-id, parent-id, flags at 0, 3, 36, 53 */
	if (n < TRACEPARENT_LEN || !lower_hex(v, 2, 1) ||
	    strncmp(v, "ff", 2) == 0 || v[2] != '-' || v[35] != '-' ||
	    v[52] != '-' || !lower_hex(v + 3, TRACE_ID_HEX, 0) ||
	    !lower_hex(v + 36, SPAN_ID_HEX, 0) || !lower_hex(v + 53, 2, 1))
		return -1;
	if (n > TRACEPARENT_LEN &&
	    (strncmp(v, "00", 2) == 0 || v[TRACEPARENT_LEN] != '-'))
		return -1;
	memcpy(trace_id, v + 3, TRACE_ID_HEX);
	trace_id[TRACE_ID_HEX] = '\0';
	memcpy(flags, v + 53, 2);
	flags[2] = '\0';
	return 0;
}
