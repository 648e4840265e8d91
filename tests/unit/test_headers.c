/*
 * test_headers.c - Idempotency-Key (header and /charge/keys/ path),
 * Content-Type, CONTENT_LENGTH, Prefer and Authorization parsing at every
 * edge of docs/API.md §4.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "headers.h"

static enum key_status
key(const char *value, char out[IDEM_KEY_MAX + 1], size_t *n)
{
	memset(out, 'X', IDEM_KEY_MAX + 1);
	*n = 9999;
	return idem_key_parse(value, out, n);
}

static void
assert_key(const char *value, const char *want)
{
	char out[IDEM_KEY_MAX + 1];
	size_t n;

	assert_int_equal(key(value, out, &n), KEY_OK);
	assert_int_equal(n, strlen(want));
	assert_string_equal(out, want);
}

static void
assert_key_status(const char *value, enum key_status want)
{
	char out[IDEM_KEY_MAX + 1];
	size_t n;

	assert_int_equal(key(value, out, &n), want);
}

static void
test_key_bare(void **state)
{
	(void)state;
	assert_key("abc-123", "abc-123");
	assert_key("a", "a");
	assert_key("!~", "!~");
	assert_key("8e03978e-40d5-43e8-bc93-6894a57f9324",
	    "8e03978e-40d5-43e8-bc93-6894a57f9324");
	/* OWS around the value is not part of the key */
	assert_key("  abc\t ", "abc");
	/* a quote inside a bare key is just a visible character */
	assert_key("ab\"c", "ab\"c");
	assert_key("a\\b", "a\\b");
}

static void
test_key_missing(void **state)
{
	(void)state;
	assert_key_status(NULL, KEY_MISSING);
	assert_key_status("", KEY_MISSING);
	assert_key_status(" \t ", KEY_MISSING);
}

static void
test_key_length(void **state)
{
	char v[IDEM_KEY_MAX + 4];
	char q[IDEM_KEY_MAX + 6];
	char out[IDEM_KEY_MAX + 1];
	size_t n;

	(void)state;
	memset(v, 'k', IDEM_KEY_MAX);
	v[IDEM_KEY_MAX] = '\0';
	assert_int_equal(key(v, out, &n), KEY_OK);
	assert_int_equal(n, IDEM_KEY_MAX);
	assert_string_equal(out, v);

	v[IDEM_KEY_MAX] = 'k';
	v[IDEM_KEY_MAX + 1] = '\0';
	assert_int_equal(key(v, out, &n), KEY_INVALID);

	/* the same limits hold after unquoting */
	q[0] = '"';
	memset(q + 1, 'k', IDEM_KEY_MAX);
	q[IDEM_KEY_MAX + 1] = '"';
	q[IDEM_KEY_MAX + 2] = '\0';
	assert_int_equal(key(q, out, &n), KEY_OK);
	assert_int_equal(n, IDEM_KEY_MAX);
	assert_int_equal(out[IDEM_KEY_MAX], '\0');

	q[IDEM_KEY_MAX + 1] = 'k';
	q[IDEM_KEY_MAX + 2] = '"';
	q[IDEM_KEY_MAX + 3] = '\0';
	assert_int_equal(key(q, out, &n), KEY_INVALID);

	/* 255 characters that take 256+ bytes quoted: still fine */
	q[0] = '"';
	memset(q + 1, 'k', IDEM_KEY_MAX - 1);
	q[IDEM_KEY_MAX] = '\\';
	q[IDEM_KEY_MAX + 1] = '\\';
	q[IDEM_KEY_MAX + 2] = '"';
	q[IDEM_KEY_MAX + 3] = '\0';
	assert_int_equal(key(q, out, &n), KEY_OK);
	assert_int_equal(n, IDEM_KEY_MAX);
	assert_int_equal(out[IDEM_KEY_MAX - 1], '\\');
}

static void
test_key_quoted(void **state)
{
	(void)state;
	assert_key("\"abc\"", "abc");
	assert_key("  \"abc-123\"  ", "abc-123");
	assert_key("\"a\\\"b\"", "a\"b");
	assert_key("\"a\\\\b\"", "a\\b");
	/* the empty sf-string is present but names no key */
	assert_key_status("\"\"", KEY_INVALID);
	/* unterminated */
	assert_key_status("\"abc", KEY_INVALID);
	assert_key_status("\"", KEY_INVALID);
	assert_key_status("\"abc\\\"", KEY_INVALID);
	/* text after the closing quote */
	assert_key_status("\"abc\"def", KEY_INVALID);
	assert_key_status("\"abc\" x", KEY_INVALID);
	assert_key_status("\"abc\"\"", KEY_INVALID);
	assert_key_status("\"abc\";a=1", KEY_INVALID);
	/* escapes other than \" and \\ */
	assert_key_status("\"a\\nb\"", KEY_INVALID);
	assert_key_status("\"a\\u0041\"", KEY_INVALID);
	assert_key_status("\"a\\\"", KEY_INVALID);
	/* sf-strings may hold spaces, but a key may not */
	assert_key_status("\"a b\"", KEY_INVALID);
	assert_key_status("\" ab\"", KEY_INVALID);
	assert_key_status("\"a\tb\"", KEY_INVALID);
}

static void
test_key_bad_chars(void **state)
{
	(void)state;
	assert_key_status("a b", KEY_INVALID);
	assert_key_status("a\tb", KEY_INVALID);
	assert_key_status("a\x01"
	                  "b",
	    KEY_INVALID);
	assert_key_status("a\x1f", KEY_INVALID);
	assert_key_status("a\x7f", KEY_INVALID);
	assert_key_status("\x7f", KEY_INVALID);
	assert_key_status("caf\xc3\xa9", KEY_INVALID);
	assert_key_status("a\r\nb", KEY_INVALID);
	assert_key_status("\"a\x7f\"", KEY_INVALID);
	assert_key_status("\"a\x01\"", KEY_INVALID);
	assert_key_status("\"\xc3\xa9\"", KEY_INVALID);
}

/*
 * A comma in a bare key is where a web server joined two Idempotency-Key
 * fields (RFC 9110 §5.3), and an sf-item holds no bare comma: refused. A
 * quoted sf-string may hold one.
 */
static void
test_key_comma(void **state)
{
	(void)state;
	assert_key_status("key,with,commas,longer-than-twenty-chars",
	    KEY_INVALID);
	assert_key_status("a,b", KEY_INVALID);
	assert_key_status(",", KEY_INVALID);
	assert_key_status("abc,", KEY_INVALID);
	assert_key_status(",abc", KEY_INVALID);
	assert_key_status("  a,b  ", KEY_INVALID);
	assert_key("\"key,with,commas,longer-than-twenty-chars\"",
	    "key,with,commas,longer-than-twenty-chars");
	assert_key("\",\"", ",");
	assert_key("  \"a,b\"\t", "a,b");
	/* two quoted fields joined by a web server: still refused */
	assert_key_status("\"a\", \"b\"", KEY_INVALID);
	assert_key_status("\"a\",\"b\"", KEY_INVALID);
}

static enum key_status
path_key(const char *seg, char out[IDEM_KEY_MAX + 1], size_t *n)
{
	memset(out, 'X', IDEM_KEY_MAX + 1);
	*n = 9999;
	return idem_key_from_path(seg, out, n);
}

static void
assert_path_key(const char *seg, const char *want, size_t wantlen)
{
	char out[IDEM_KEY_MAX + 1];
	size_t n;

	if (path_key(seg, out, &n) != KEY_OK)
		fail_msg("path key %s refused", seg);
	assert_int_equal(n, wantlen);
	assert_memory_equal(out, want, wantlen);
	assert_int_equal(out[n], '\0');
}

/* GET /charge/keys/<key>: percent-decoded, then the header's own rules. */
static void
test_key_from_path(void **state)
{
	char out[IDEM_KEY_MAX + 1], seg[3 * (2 * IDEM_KEY_MAX + 2) + 8];
	size_t n, i;

	(void)state;
	assert_path_key("order-1001", "order-1001", 10);
	assert_path_key("a%2Fb%3fc%23d", "a/b?c#d", 7);
	assert_path_key("%41%7e%7E%21", "A~~!", 4);
	assert_path_key("a/b", "a/b", 3);
	assert_path_key("%25", "%", 1);
	/* the quoted Structured-Field form names the same key, as in the header */
	assert_path_key("%22abc%22", "abc", 3);
	assert_path_key("\"abc\"", "abc", 3);
	assert_path_key("%22%5C%22abc%22", "\"abc", 4);
	assert_path_key("ab%22c", "ab\"c", 4);
	/* a comma only in the quoted form, as in the header */
	assert_path_key("%22a%2Cb%22", "a,b", 3);
	assert_path_key("\"a,b\"", "a,b", 3);
	assert_int_equal(path_key("a%2Cb", out, &n), KEY_INVALID);
	assert_int_equal(path_key("a,b", out, &n), KEY_INVALID);
	/* surrounding space is ignored, as in the header */
	assert_path_key("%20abc%09", "abc", 3);
	/* empty or only space: missing */
	assert_int_equal(path_key("", out, &n), KEY_MISSING);
	assert_int_equal(path_key(NULL, out, &n), KEY_MISSING);
	assert_int_equal(path_key("%20%20", out, &n), KEY_MISSING);
	/* malformed escapes */
	assert_int_equal(path_key("%", out, &n), KEY_INVALID);
	assert_int_equal(path_key("abc%", out, &n), KEY_INVALID);
	assert_int_equal(path_key("abc%4", out, &n), KEY_INVALID);
	assert_int_equal(path_key("%zz", out, &n), KEY_INVALID);
	assert_int_equal(path_key("%4g", out, &n), KEY_INVALID);
	assert_int_equal(path_key("%%41", out, &n), KEY_INVALID);
	/* decoded bytes outside 0x21-0x7E inside the key, an encoded NUL */
	assert_int_equal(path_key("a%20b", out, &n), KEY_INVALID);
	assert_int_equal(path_key("%22a%20b%22", out, &n), KEY_INVALID);
	assert_int_equal(path_key("a%00b", out, &n), KEY_INVALID);
	assert_int_equal(path_key("%00", out, &n), KEY_INVALID);
	assert_int_equal(path_key("a%7Fb", out, &n), KEY_INVALID);
	assert_int_equal(path_key("caf%C3%A9", out, &n), KEY_INVALID);
	assert_int_equal(path_key("a b", out, &n), KEY_INVALID);
	assert_int_equal(path_key("%22abc", out, &n), KEY_INVALID);
	assert_int_equal(path_key("%22%22", out, &n), KEY_INVALID);
	/* 255 bytes, all encoded: accepted; 256: refused */
	for (i = 0; i < IDEM_KEY_MAX; i++)
		memcpy(seg + 3 * i, "%6B", 3);
	seg[3 * IDEM_KEY_MAX] = '\0';
	assert_int_equal(path_key(seg, out, &n), KEY_OK);
	assert_int_equal(n, IDEM_KEY_MAX);
	assert_int_equal(out[0], 'k');
	memcpy(seg + 3 * IDEM_KEY_MAX, "k", 2);
	assert_int_equal(path_key(seg, out, &n), KEY_INVALID);
	memset(seg, 'k', IDEM_KEY_MAX + 1);
	seg[IDEM_KEY_MAX + 1] = '\0';
	assert_int_equal(path_key(seg, out, &n), KEY_INVALID);
	seg[IDEM_KEY_MAX] = '\0';
	assert_int_equal(path_key(seg, out, &n), KEY_OK);
	/* the longest quoted form, every byte escaped: "\\\\..." */
	n = 0;
	memcpy(seg, "%22", 3);
	for (i = 0; i < IDEM_KEY_MAX; i++)
		memcpy(seg + 3 + 6 * i, "%5C%5C", 6);
	memcpy(seg + 3 + 6 * IDEM_KEY_MAX, "%22", 4);
	assert_int_equal(path_key(seg, out, &n), KEY_OK);
	assert_int_equal(n, IDEM_KEY_MAX);
	assert_int_equal(out[0], '\\');
	/* far too long once decoded: refused, no overflow */
	memset(seg, 'k', sizeof(seg) - 1);
	seg[sizeof(seg) - 1] = '\0';
	assert_int_equal(path_key(seg, out, &n), KEY_INVALID);
}

static void
test_content_type(void **state)
{
	(void)state;
	assert_int_equal(content_type_is_json("application/json"), 1);
	assert_int_equal(content_type_is_json(
	                     "application/json; charset=utf-8"),
	    1);
	assert_int_equal(content_type_is_json("application/json;charset=UTF-8"),
	    1);
	assert_int_equal(content_type_is_json(
	                     "application/json ; charset=\"utf-8\""),
	    1);
	assert_int_equal(content_type_is_json("APPLICATION/JSON"), 1);
	assert_int_equal(content_type_is_json("Application/Json"), 1);
	assert_int_equal(content_type_is_json("  application/json  "), 1);
	assert_int_equal(content_type_is_json("application/json;"), 1);

	assert_int_equal(content_type_is_json(NULL), 0);
	assert_int_equal(content_type_is_json(""), 0);
	assert_int_equal(content_type_is_json("application/jsonx"), 0);
	assert_int_equal(content_type_is_json("application/json-seq"), 0);
	assert_int_equal(content_type_is_json("application/json/x"), 0);
	assert_int_equal(content_type_is_json("application/jso"), 0);
	assert_int_equal(content_type_is_json("text/plain"), 0);
	assert_int_equal(content_type_is_json("text/json"), 0);
	assert_int_equal(content_type_is_json("application/problem+json"), 0);
	assert_int_equal(content_type_is_json(
	                     "application/x-www-form-urlencoded"),
	    0);
	assert_int_equal(content_type_is_json("application/json, text/plain"),
	    0);
	assert_int_equal(content_type_is_json("application/json; charset"), 0);
	assert_int_equal(content_type_is_json(
	                     "application/json; charset=\"utf-8"),
	    0);
	assert_int_equal(content_type_is_json("application/json x"), 0);
}

static void
test_content_length(void **state)
{
	size_t n;
	char buf[64];

	(void)state;
	n = 7;
	assert_int_equal(content_length_parse(NULL, 100, &n), CLEN_OK);
	assert_int_equal(n, 0);
	n = 7;
	assert_int_equal(content_length_parse("", 100, &n), CLEN_OK);
	assert_int_equal(n, 0);
	assert_int_equal(content_length_parse("0", 100, &n), CLEN_OK);
	assert_int_equal(n, 0);
	assert_int_equal(content_length_parse("42", 100, &n), CLEN_OK);
	assert_int_equal(n, 42);
	assert_int_equal(content_length_parse("0042", 100, &n), CLEN_OK);
	assert_int_equal(n, 42);

	assert_int_equal(content_length_parse("1048576", DEF_MAX_REQUEST_BYTES,
	                     &n),
	    CLEN_OK);
	assert_int_equal(n, DEF_MAX_REQUEST_BYTES);
	assert_int_equal(content_length_parse("1048577", DEF_MAX_REQUEST_BYTES,
	                     &n),
	    CLEN_TOO_LARGE);
	assert_int_equal(content_length_parse("100", 100, &n), CLEN_OK);
	assert_int_equal(content_length_parse("101", 100, &n), CLEN_TOO_LARGE);
	assert_int_equal(content_length_parse("1", 0, &n), CLEN_TOO_LARGE);
	assert_int_equal(content_length_parse("0", 0, &n), CLEN_OK);

	assert_int_equal(content_length_parse("99999999999999999999999999999",
	                     DEF_MAX_REQUEST_BYTES, &n),
	    CLEN_TOO_LARGE);
	assert_int_equal(content_length_parse("18446744073709551616", SIZE_MAX,
	                     &n),
	    CLEN_TOO_LARGE);
	assert_int_equal(snprintf(buf, sizeof(buf), "%zu", (size_t)SIZE_MAX) >
	        0,
	    1);
	assert_int_equal(content_length_parse(buf, SIZE_MAX, &n), CLEN_OK);
	assert_true(n == SIZE_MAX);

	assert_int_equal(content_length_parse("12a", 100, &n), CLEN_INVALID);
	assert_int_equal(content_length_parse("-1", 100, &n), CLEN_INVALID);
	assert_int_equal(content_length_parse("+1", 100, &n), CLEN_INVALID);
	assert_int_equal(content_length_parse(" 1", 100, &n), CLEN_INVALID);
	assert_int_equal(content_length_parse("1 ", 100, &n), CLEN_INVALID);
	assert_int_equal(content_length_parse("0x10", 100, &n), CLEN_INVALID);
	assert_int_equal(content_length_parse("1.0", 100, &n), CLEN_INVALID);
	assert_int_equal(content_length_parse("99999999999999999999999a", 100,
	                     &n),
	    CLEN_INVALID);
}

static void
test_prefer(void **state)
{
	(void)state;
	assert_int_equal(prefer_wait_parse("wait=5"), 5);
	assert_int_equal(prefer_wait_parse("wait=0"), 0);
	assert_int_equal(prefer_wait_parse("respond-async, wait=10"), 10);
	assert_int_equal(prefer_wait_parse("respond-async,wait=10"), 10);
	assert_int_equal(prefer_wait_parse("wait=5;foo"), 5);
	assert_int_equal(prefer_wait_parse("wait=5; foo=\"a,b\", x"), 5);
	assert_int_equal(prefer_wait_parse("WAIT=7"), 7);
	assert_int_equal(prefer_wait_parse("  wait = 3 "), 3);
	assert_int_equal(prefer_wait_parse("wait=\"4\""), 4);
	assert_int_equal(prefer_wait_parse(
	                     "return=minimal; a=\"x,wait=9\", wait=2"),
	    2);
	assert_int_equal(prefer_wait_parse(
	                     "handling=lenient, wait=10, respond-async"),
	    10);
	/* only the first wait counts */
	assert_int_equal(prefer_wait_parse("wait=1, wait=9"), 1);
	/* huge values clamp, they do not wrap */
	assert_int_equal(prefer_wait_parse("wait=99999999999999999999999"),
	    INT_MAX);
	assert_int_equal(prefer_wait_parse("wait=2147483647"), INT_MAX);
	assert_int_equal(prefer_wait_parse("wait=2147483648"), INT_MAX);
	/* 2^64 + 5: must not wrap around to 5 */
	assert_int_equal(prefer_wait_parse("wait=18446744073709551621"),
	    INT_MAX);

	assert_int_equal(prefer_wait_parse(NULL), -1);
	assert_int_equal(prefer_wait_parse(""), -1);
	assert_int_equal(prefer_wait_parse("respond-async"), -1);
	assert_int_equal(prefer_wait_parse("wait"), -1);
	assert_int_equal(prefer_wait_parse("wait="), -1);
	assert_int_equal(prefer_wait_parse("wait=abc"), -1);
	assert_int_equal(prefer_wait_parse("wait=-1"), -1);
	assert_int_equal(prefer_wait_parse("wait=1.5"), -1);
	assert_int_equal(prefer_wait_parse("wait=5x"), -1);
	assert_int_equal(prefer_wait_parse("waits=5"), -1);
	assert_int_equal(prefer_wait_parse("xwait=5"), -1);
	assert_int_equal(prefer_wait_parse("foo; wait=5"), -1);
	assert_int_equal(prefer_wait_parse("wait=\"5"), -1);
	/* malformed lists are ignored as a whole */
	assert_int_equal(prefer_wait_parse("wait=5 x"), -1);
	assert_int_equal(prefer_wait_parse("foo bar, wait=5"), -1);
}

static void
assert_bearer(const char *value, const char *want)
{
	const char *tok = NULL;
	size_t n = 0;

	assert_int_equal(bearer_token(value, &tok, &n), 0);
	assert_non_null(tok);
	assert_int_equal(n, strlen(want));
	assert_memory_equal(tok, want, n);
}

static void
test_bearer(void **state)
{
	const char *tok;
	size_t n;

	(void)state;
	assert_bearer("Bearer sk_test_demo", "sk_test_demo");
	assert_bearer("bearer sk_test_demo", "sk_test_demo");
	assert_bearer("BEARER sk_test_demo", "sk_test_demo");
	assert_bearer("Bearer   sk_test_demo", "sk_test_demo");
	assert_bearer("Bearer sk_test_demo  ", "sk_test_demo");
	assert_bearer("Bearer abc+/=~.-_", "abc+/=~.-_");

	assert_int_equal(bearer_token(NULL, &tok, &n), -1);
	assert_int_equal(bearer_token("", &tok, &n), -1);
	assert_int_equal(bearer_token("Bearer", &tok, &n), -1);
	assert_int_equal(bearer_token("Bearer ", &tok, &n), -1);
	assert_int_equal(bearer_token("Bearersk_test_demo", &tok, &n), -1);
	assert_int_equal(bearer_token("Basic dXNlcjpwYXNz", &tok, &n), -1);
	assert_int_equal(bearer_token("Bearer a b", &tok, &n), -1);
	assert_int_equal(bearer_token("Bearer a\x01", &tok, &n), -1);
	assert_int_equal(bearer_token("Bearer \xc3\xa9", &tok, &n), -1);
	assert_int_equal(bearer_token("Bear sk_test_demo", &tok, &n), -1);
	assert_int_equal(bearer_token("sk_test_demo", &tok, &n), -1);
}

/* X-Request-Id kept: 1..64 bytes of A-Z a-z 0-9 . _ : - */
static void
test_request_id(void **state)
{
	char v[80];

	(void)state;
	assert_true(request_id_acceptable("a"));
	assert_true(request_id_acceptable("Order-42.attempt_1:x"));
	assert_true(
	    request_id_acceptable("f47ac10b-58cc-4372-a567-0e02b2c3d479"));
	memset(v, 'a', 64);
	v[64] = '\0';
	assert_true(request_id_acceptable(v)); /* the edge */
	v[64] = 'a';
	v[65] = '\0';
	assert_false(request_id_acceptable(v)); /* one over */
	assert_false(request_id_acceptable(NULL));
	assert_false(request_id_acceptable(""));
	assert_false(request_id_acceptable("a b"));
	assert_false(request_id_acceptable("a\"b"));
	assert_false(request_id_acceptable("a\nforged"));
	assert_false(request_id_acceptable("a/b"));
	assert_false(request_id_acceptable("caf\xc3\xa9"));
	assert_false(request_id_acceptable("a\\b"));
}

/* W3C traceparent, level 1 */
static void
test_traceparent(void **state)
{
	char t[TRACE_ID_HEX + 1], f[3];
	const char *ok =
	    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

	(void)state;
	assert_int_equal(traceparent_parse(ok, t, f), 0);
	assert_string_equal(t, "4bf92f3577b34da6a3ce929d0e0e4736");
	assert_string_equal(f, "01");
	assert_int_equal(
	    traceparent_parse(
	        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ", t,
	        f),
	    0);
	assert_string_equal(f, "00");
	/* a later version: its first fields, more after a '-' */
	assert_int_equal(
	    traceparent_parse(
	        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what",
	        t, f),
	    0);
	assert_int_equal(traceparent_parse(NULL, t, f), -1);
	assert_int_equal(traceparent_parse("", t, f), -1);
	/* version 00 has nothing after the flags */
	assert_int_equal(
	    traceparent_parse(
	        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", t,
	        f),
	    -1);
	assert_int_equal(
	    traceparent_parse(
	        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", t,
	        f),
	    -1);
	assert_int_equal(
	    traceparent_parse(
	        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", t,
	        f),
	    -1);
	assert_int_equal(
	    traceparent_parse(
	        "00-00000000000000000000000000000000-00f067aa0ba902b7-01", t,
	        f),
	    -1);
	assert_int_equal(
	    traceparent_parse(
	        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", t,
	        f),
	    -1);
	assert_int_equal(
	    traceparent_parse(
	        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", t,
	        f),
	    -1);
	assert_int_equal(
	    traceparent_parse(
	        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", t, f),
	    -1); /* one digit short */
	assert_int_equal(
	    traceparent_parse(
	        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", t,
	        f),
	    -1);
	assert_int_equal(
	    traceparent_parse(
	        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", t,
	        f),
	    -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_bare),
		cmocka_unit_test(test_key_missing),
		cmocka_unit_test(test_key_length),
		cmocka_unit_test(test_key_quoted),
		cmocka_unit_test(test_key_bad_chars),
		cmocka_unit_test(test_key_comma),
		cmocka_unit_test(test_key_from_path),
		cmocka_unit_test(test_content_type),
		cmocka_unit_test(test_content_length),
		cmocka_unit_test(test_prefer),
		cmocka_unit_test(test_bearer),
		cmocka_unit_test(test_request_id),
		cmocka_unit_test(test_traceparent),
	};

	return cmocka_run_group_tests_name("headers", tests, NULL, NULL);
}
