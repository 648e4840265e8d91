/*
 * test_idem.c - decoding a stored record (the 9 fields the Lua scripts
 * return after 'recorded'), decoding a lookup, and building the Redis key
 * name.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem.h"

/* A field from a string literal (binary-safe: the literal's full length). */
#define F(s)                                                                   \
	{                                                                      \
		(s), sizeof(s) - 1                                             \
	}
#define NIL                                                                    \
	{                                                                      \
		NULL, 0                                                        \
	}

enum {
	F_STATE,
	F_STATUS,
	F_CTYPE,
	F_RETRY,
	F_BODY,
	F_FILE,
	F_LEN,
	F_SHA,
	F_EXPIRES,
	NFIELDS
};

#define SHA_OK                                                                 \
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define FILE_OK "0123456789abcdef0123456789abcdef.body"

static const struct idem_field inline_ok[NFIELDS] = {
	F("completed"),
	F("201"),
	F("application/json"),
	NIL,
	F("{\"id\":\"ch_1\"}"),
	NIL,
	NIL,
	NIL,
	F("1763827200123"),
};

static const struct idem_field file_ok[NFIELDS] = {
	F("completed"),
	F("201"),
	F("application/json"),
	NIL,
	NIL,
	F(FILE_OK),
	F("20000"),
	F(SHA_OK),
	F("1763827200123"),
};

/* Decodes f with field i replaced by v; expects failure, rec left empty. */
static void
assert_decode_fails(const struct idem_field *base, int i, struct idem_field v)
{
	struct idem_field f[NFIELDS];
	struct idem_record rec;
	char err[128];

	memcpy(f, base, sizeof(f));
	f[i] = v;
	memset(&rec, 'X', sizeof(rec));
	err[0] = '\0';
	assert_int_equal(idem_record_decode(f, NFIELDS, &rec, err, sizeof(err)),
	    -1);
	assert_true(strlen(err) > 0);
	assert_null(rec.body);
	assert_string_equal(rec.body_file, "");
	idem_record_free(&rec);
}

static void
assert_decode_ok(const struct idem_field *base, int i, struct idem_field v)
{
	struct idem_field f[NFIELDS];
	struct idem_record rec;
	char err[128];

	memcpy(f, base, sizeof(f));
	f[i] = v;
	assert_int_equal(idem_record_decode(f, NFIELDS, &rec, err, sizeof(err)),
	    0);
	idem_record_free(&rec);
}

static void
test_decode_inline(void **state)
{
	struct idem_record rec;
	char err[128];

	(void)state;
	assert_int_equal(idem_record_decode(inline_ok, NFIELDS, &rec, err,
	                     sizeof(err)),
	    0);
	assert_string_equal(rec.state, "completed");
	assert_int_equal(rec.status, 201);
	assert_string_equal(rec.content_type, "application/json");
	assert_string_equal(rec.retry_after, "");
	assert_non_null(rec.body);
	assert_int_equal(rec.body_len, 13);
	assert_string_equal(rec.body, "{\"id\":\"ch_1\"}");
	assert_string_equal(rec.body_file, "");
	idem_record_free(&rec);
	assert_null(rec.body);
}

static void
test_decode_inline_binary(void **state)
{
	static const char bin[] = "a\0b\xff\xfe\x80\r\n\0\0\xc3\xa9z";
	struct idem_field f[NFIELDS];
	struct idem_record rec;
	char err[128];

	(void)state;
	memcpy(f, inline_ok, sizeof(f));
	f[F_BODY].p = bin;
	f[F_BODY].n = sizeof(bin) - 1;
	assert_int_equal(idem_record_decode(f, NFIELDS, &rec, err, sizeof(err)),
	    0);
	assert_int_equal(rec.body_len, sizeof(bin) - 1);
	assert_memory_equal(rec.body, bin, sizeof(bin) - 1);
	assert_int_equal(rec.body[rec.body_len], '\0');
	/* the copy is independent of the reply */
	assert_ptr_not_equal(rec.body, bin);
	idem_record_free(&rec);

	/* an empty inline body is a body */
	f[F_BODY].p = "";
	f[F_BODY].n = 0;
	assert_int_equal(idem_record_decode(f, NFIELDS, &rec, err, sizeof(err)),
	    0);
	assert_non_null(rec.body);
	assert_int_equal(rec.body_len, 0);
	idem_record_free(&rec);
}

static void
test_decode_failed_with_retry_after(void **state)
{
	static const struct idem_field f[NFIELDS] = {
		F("failed"),
		F("502"),
		F("application/problem+json"),
		F("300"),
		F("{\"type\":\"/problems/provider-error\"}"),
		NIL,
		NIL,
		NIL,
		F("1763740800456"),
	};
	struct idem_record rec;
	char err[128];

	(void)state;
	assert_int_equal(idem_record_decode(f, NFIELDS, &rec, err, sizeof(err)),
	    0);
	assert_string_equal(rec.state, "failed");
	assert_int_equal(rec.status, 502);
	assert_string_equal(rec.content_type, "application/problem+json");
	assert_string_equal(rec.retry_after, "300");
	assert_string_equal(rec.body,
	    "{\"type\":\"/problems/provider-error\"}");
	idem_record_free(&rec);
}

static void
test_decode_file(void **state)
{
	struct idem_record rec;
	char err[128];

	(void)state;
	assert_int_equal(idem_record_decode(file_ok, NFIELDS, &rec, err,
	                     sizeof(err)),
	    0);
	assert_string_equal(rec.state, "completed");
	assert_int_equal(rec.status, 201);
	assert_null(rec.body);
	assert_string_equal(rec.body_file, FILE_OK);
	assert_int_equal(rec.body_len, 20000);
	assert_string_equal(rec.body_sha256, SHA_OK);
	idem_record_free(&rec);
	/* body_len 0 is a length */
	assert_decode_ok(file_ok, F_LEN, (struct idem_field)F("0"));
}

static void
test_decode_body_choice(void **state)
{
	struct idem_field f[NFIELDS];

	(void)state;
	/* both body and body_file */
	memcpy(f, file_ok, sizeof(f));
	assert_decode_fails(f, F_BODY, (struct idem_field)F("{}"));
	assert_decode_fails(f, F_BODY, (struct idem_field)F(""));
	/* neither */
	assert_decode_fails(inline_ok, F_BODY, (struct idem_field)NIL);
	/* empty or NUL-carrying or over-long file name */
	assert_decode_fails(file_ok, F_FILE, (struct idem_field)F(""));
	assert_decode_fails(file_ok, F_FILE,
	    (struct idem_field)F("0123456789abcdef\0"
	                         "0123456789abcdef.body"));
	{
		char name[SPILL_NAME_MAX + 8];

		memset(name, 'a', sizeof(name));
		assert_decode_fails(file_ok, F_FILE,
		    (struct idem_field){ name, SPILL_NAME_MAX });
	}
}

static void
test_decode_bad_state(void **state)
{
	(void)state;
	assert_decode_fails(inline_ok, F_STATE, (struct idem_field)NIL);
	assert_decode_fails(inline_ok, F_STATE, (struct idem_field)F(""));
	assert_decode_fails(inline_ok, F_STATE,
	    (struct idem_field)F("in_progress"));
	/* an unknown outcome is never replayed: no 'recorded' reply names it */
	assert_decode_fails(inline_ok, F_STATE,
	    (struct idem_field)F("unknown"));
	assert_decode_fails(inline_ok, F_STATE,
	    (struct idem_field)F("complete"));
	assert_decode_fails(inline_ok, F_STATE,
	    (struct idem_field)F("completedX"));
	assert_decode_fails(inline_ok, F_STATE,
	    (struct idem_field)F("Completed"));
	assert_decode_fails(inline_ok, F_STATE,
	    (struct idem_field)F("completed\0"));
	assert_decode_fails(inline_ok, F_STATE,
	    (struct idem_field)F("failedfailedfailedfailed"));
	assert_decode_ok(inline_ok, F_STATE, (struct idem_field)F("failed"));
}

static void
test_decode_bad_status(void **state)
{
	(void)state;
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F("99"));
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F("600"));
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F("2x1"));
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F(""));
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)NIL);
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F("-201"));
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F("+201"));
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F(" 201"));
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F("201 "));
	assert_decode_fails(inline_ok, F_STATUS, (struct idem_field)F("0"));
	assert_decode_fails(inline_ok, F_STATUS,
	    (struct idem_field)F("99999999999999999999999"));
	assert_decode_ok(inline_ok, F_STATUS, (struct idem_field)F("100"));
	assert_decode_ok(inline_ok, F_STATUS, (struct idem_field)F("599"));
	assert_decode_ok(inline_ok, F_STATUS, (struct idem_field)F("402"));
}

static void
test_decode_bad_content_type(void **state)
{
	char ct[200];

	(void)state;
	assert_decode_fails(inline_ok, F_CTYPE, (struct idem_field)NIL);
	assert_decode_fails(inline_ok, F_CTYPE, (struct idem_field)F(""));
	assert_decode_fails(inline_ok, F_CTYPE,
	    (struct idem_field)F("text/\0plain"));
	memset(ct, 'a', sizeof(ct));
	assert_decode_fails(inline_ok, F_CTYPE, (struct idem_field){ ct, 128 });
	assert_decode_ok(inline_ok, F_CTYPE, (struct idem_field){ ct, 127 });
}

static void
test_decode_bad_retry_after(void **state)
{
	(void)state;
	assert_decode_fails(inline_ok, F_RETRY, (struct idem_field)F("soon"));
	assert_decode_fails(inline_ok, F_RETRY, (struct idem_field)F("-1"));
	assert_decode_fails(inline_ok, F_RETRY, (struct idem_field)F("1.5"));
	assert_decode_fails(inline_ok, F_RETRY, (struct idem_field)F("3x"));
	assert_decode_fails(inline_ok, F_RETRY,
	    (struct idem_field)F("99999999999999999"));
	assert_decode_ok(inline_ok, F_RETRY, (struct idem_field)F("0"));
	assert_decode_ok(inline_ok, F_RETRY, (struct idem_field)F("1"));
}

static void
test_decode_bad_body_len(void **state)
{
	(void)state;
	assert_decode_fails(file_ok, F_LEN, (struct idem_field)NIL);
	assert_decode_fails(file_ok, F_LEN, (struct idem_field)F(""));
	assert_decode_fails(file_ok, F_LEN, (struct idem_field)F("abc"));
	assert_decode_fails(file_ok, F_LEN, (struct idem_field)F("-1"));
	assert_decode_fails(file_ok, F_LEN, (struct idem_field)F("12 "));
	assert_decode_fails(file_ok, F_LEN, (struct idem_field)F("1e6"));
	assert_decode_fails(file_ok, F_LEN,
	    (struct idem_field)F("99999999999999999999999999"));
	assert_decode_fails(file_ok, F_LEN,
	    (struct idem_field)F("999999999999999999"));
}

static void
test_decode_bad_sha(void **state)
{
	(void)state;
	assert_decode_fails(file_ok, F_SHA, (struct idem_field)NIL);
	assert_decode_fails(file_ok, F_SHA, (struct idem_field)F(""));
	/* 63 and 65 characters */
	assert_decode_fails(file_ok, F_SHA,
	    (struct idem_field)F(
	        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde"));
	assert_decode_fails(file_ok, F_SHA,
	    (struct idem_field)F(
	        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0"));
	/* upper case, non-hex */
	assert_decode_fails(file_ok, F_SHA,
	    (struct idem_field)F(
	        "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));
	assert_decode_fails(file_ok, F_SHA,
	    (struct idem_field)F(
	        "0123456789abcdeg0123456789abcdef0123456789abcdef0123456789abcdef"));
	assert_decode_fails(file_ok, F_SHA,
	    (struct idem_field)F(
	        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\0"));
}

static void
test_decode_field_count(void **state)
{
	struct idem_field f[NFIELDS + 1];
	struct idem_record rec;
	char err[128];

	(void)state;
	memcpy(f, inline_ok, sizeof(inline_ok));
	f[NFIELDS].p = "x";
	f[NFIELDS].n = 1;
	assert_int_equal(idem_record_decode(f, NFIELDS - 1, &rec, err,
	                     sizeof(err)),
	    -1);
	assert_true(strlen(err) > 0);
	assert_null(rec.body);
	assert_int_equal(idem_record_decode(f, NFIELDS + 1, &rec, err,
	                     sizeof(err)),
	    -1);
	assert_null(rec.body);
	assert_int_equal(idem_record_decode(f, 0, &rec, err, sizeof(err)), -1);
	assert_null(rec.body);
	/* a tiny error buffer is still terminated */
	memset(err, 'Z', sizeof(err));
	assert_int_equal(idem_record_decode(f, 0, &rec, err, 4), -1);
	assert_int_equal(strlen(err), 3);
}

static void
test_decode_expires(void **state)
{
	struct idem_record rec;
	char err[128];

	(void)state;
	assert_int_equal(idem_record_decode(inline_ok, NFIELDS, &rec, err,
	                     sizeof(err)),
	    0);
	assert_true(rec.expires_ms == 1763827200123LL);
	idem_record_free(&rec);
	/* a record written before expires_ms existed: 0, no header */
	assert_decode_ok(inline_ok, F_EXPIRES, (struct idem_field)NIL);
	assert_decode_ok(inline_ok, F_EXPIRES, (struct idem_field)F("1"));
	assert_decode_ok(inline_ok, F_EXPIRES,
	    (struct idem_field)F("99999999999999"));
	assert_decode_fails(inline_ok, F_EXPIRES, (struct idem_field)F(""));
	assert_decode_fails(inline_ok, F_EXPIRES, (struct idem_field)F("0"));
	assert_decode_fails(inline_ok, F_EXPIRES, (struct idem_field)F("-5"));
	assert_decode_fails(inline_ok, F_EXPIRES,
	    (struct idem_field)F("100000000000000"));
	assert_decode_fails(inline_ok, F_EXPIRES,
	    (struct idem_field)F("1.7e12"));
}

static void
test_info_decode(void **state)
{
	static const struct idem_field claim[5] = {
		F("in_progress"),
		F("1763740800123"),
		NIL,
		NIL,
		NIL,
	};
	static const struct idem_field done[5] = {
		F("completed"),
		F("1763740800123"),
		F("1763740800456"),
		F("1763827200456"),
		F("201"),
	};
	static const struct idem_field none[5] = { NIL, NIL, NIL, NIL, NIL };
	struct idem_field f[5];
	struct idem_info info;
	char err[128];

	(void)state;
	assert_int_equal(idem_info_decode(none, 5, -2, &info, err, sizeof(err)),
	    0);
	assert_int_equal(idem_info_decode(claim, 5, 29000, &info, err,
	                     sizeof(err)),
	    1);
	assert_string_equal(info.state, "in_progress");
	assert_true(info.created_ms == 1763740800123LL);
	assert_true(info.updated_ms == 0 && info.expires_ms == 0);
	assert_int_equal(info.status, 0);
	assert_true(info.pttl_ms == 29000);
	assert_int_equal(idem_info_decode(done, 5, 86399000, &info, err,
	                     sizeof(err)),
	    1);
	assert_string_equal(info.state, "completed");
	assert_true(info.updated_ms == 1763740800456LL);
	assert_true(info.expires_ms == 1763827200456LL);
	assert_int_equal(info.status, 201);
	/* an unknown outcome (504 outcome-unknown, not settled) */
	memcpy(f, done, sizeof(f));
	f[IF_STATE] = (struct idem_field)F("unknown");
	f[IF_STATUS] = (struct idem_field)F("504");
	assert_int_equal(idem_info_decode(f, 5, 5, &info, err, sizeof(err)), 1);
	assert_string_equal(info.state, "unknown");
	assert_int_equal(info.status, 504);
	/* expires_ms absent (an older record): 0, the caller uses the PTTL */
	memcpy(f, done, sizeof(f));
	f[3] = (struct idem_field)NIL;
	assert_int_equal(idem_info_decode(f, 5, 5, &info, err, sizeof(err)), 1);
	assert_true(info.expires_ms == 0);
	/* nonsense: -1 with a reason, info emptied */
	memcpy(f, done, sizeof(f));
	f[0] = (struct idem_field)F("done");
	assert_int_equal(idem_info_decode(f, 5, 5, &info, err, sizeof(err)),
	    -1);
	assert_true(strlen(err) > 0);
	assert_string_equal(info.state, "");
	memcpy(f, done, sizeof(f));
	f[4] = (struct idem_field)F("99");
	assert_int_equal(idem_info_decode(f, 5, 5, &info, err, sizeof(err)),
	    -1);
	memcpy(f, done, sizeof(f));
	f[2] = (struct idem_field)NIL;
	assert_int_equal(idem_info_decode(f, 5, 5, &info, err, sizeof(err)),
	    -1);
	memcpy(f, claim, sizeof(f));
	f[1] = (struct idem_field)F("x");
	assert_int_equal(idem_info_decode(f, 5, 5, &info, err, sizeof(err)),
	    -1);
	assert_int_equal(idem_info_decode(done, 4, 5, &info, err, sizeof(err)),
	    -1);
}

static void
test_key_split(void **state)
{
	char principal[PRINCIPAL_MAX + 1], key[IDEM_KEY_MAX + 1], rkey[600];
	size_t keylen;

	(void)state;
	assert_int_equal(idem_key_split("charge:idem:demo:order:1",
	                     "charge:", principal, key, &keylen),
	    0);
	assert_string_equal(principal, "demo");
	assert_string_equal(key, "order:1");
	assert_int_equal(keylen, 7);
	/* the name idem_key_name builds splits back */
	assert_true(
	    idem_key_name(rkey, sizeof(rkey), "p:", "acme_1", "k", 1) > 0);
	assert_int_equal(idem_key_split(rkey, "p:", principal, key, &keylen),
	    0);
	assert_string_equal(principal, "acme_1");
	assert_string_equal(key, "k");
	assert_int_equal(idem_key_split("other:idem:demo:k",
	                     "charge:", principal, key, &keylen),
	    -1);
	assert_int_equal(idem_key_split("charge:idem:demo",
	                     "charge:", principal, key, &keylen),
	    -1);
	assert_int_equal(idem_key_split("charge:idem::k", "charge:", principal,
	                     key, &keylen),
	    -1);
	assert_int_equal(idem_key_split("charge:idem:demo:", "charge:",
	                     principal, key, &keylen),
	    -1);
	assert_true(idem_index_name(rkey, sizeof(rkey), "charge:") > 0);
	assert_string_equal(rkey, "charge:unknown");
}

static void
test_record_free(void **state)
{
	struct idem_record rec;

	(void)state;
	idem_record_free(NULL);
	memset(&rec, 0, sizeof(rec));
	idem_record_free(&rec);
	rec.body = malloc(4);
	assert_non_null(rec.body);
	idem_record_free(&rec);
	assert_null(rec.body);
	idem_record_free(&rec);
}

static void
test_key_name(void **state)
{
	char out[512], key[IDEM_KEY_MAX + 2];
	int n;

	(void)state;
	n = idem_key_name(out, sizeof(out), "charge:", "demo", "abc-123", 7);
	assert_int_equal(n, 24);
	assert_string_equal(out, "charge:idem:demo:abc-123");
	/* keylen, not strlen, bounds the key */
	n = idem_key_name(out, sizeof(out), "p:", "acme", "abcdef", 3);
	assert_string_equal(out, "p:idem:acme:abc");
	assert_int_equal(n, 15);
	/* empty prefix */
	n = idem_key_name(out, sizeof(out), "", "demo", "k", 1);
	assert_string_equal(out, "idem:demo:k");
	assert_int_equal(n, 11);
	/* colons and braces in a key are just bytes of the key */
	n = idem_key_name(out, sizeof(out), "charge:", "demo", "a:b{c}", 6);
	assert_string_equal(out, "charge:idem:demo:a:b{c}");

	/* exact fit, one byte short */
	assert_int_equal(idem_key_name(out, 25, "charge:", "demo", "abc-123",
	                     7),
	    24);
	assert_string_equal(out, "charge:idem:demo:abc-123");
	assert_int_equal(idem_key_name(out, 24, "charge:", "demo", "abc-123",
	                     7),
	    -1);
	assert_int_equal(idem_key_name(out, 1, "charge:", "demo", "k", 1), -1);

	/* the longest key, then one longer */
	memset(key, 'k', sizeof(key));
	n = idem_key_name(out, sizeof(out), "charge:", "demo", key,
	    IDEM_KEY_MAX);
	assert_int_equal(n, 17 + IDEM_KEY_MAX);
	assert_int_equal(strlen(out), (size_t)n);
	assert_int_equal(idem_key_name(out, sizeof(out), "charge:", "demo", key,
	                     IDEM_KEY_MAX + 1),
	    -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_inline),
		cmocka_unit_test(test_decode_inline_binary),
		cmocka_unit_test(test_decode_failed_with_retry_after),
		cmocka_unit_test(test_decode_file),
		cmocka_unit_test(test_decode_body_choice),
		cmocka_unit_test(test_decode_bad_state),
		cmocka_unit_test(test_decode_bad_status),
		cmocka_unit_test(test_decode_bad_content_type),
		cmocka_unit_test(test_decode_bad_retry_after),
		cmocka_unit_test(test_decode_bad_body_len),
		cmocka_unit_test(test_decode_bad_sha),
		cmocka_unit_test(test_decode_field_count),
		cmocka_unit_test(test_decode_expires),
		cmocka_unit_test(test_info_decode),
		cmocka_unit_test(test_key_split),
		cmocka_unit_test(test_record_free),
		cmocka_unit_test(test_key_name),
	};

	return cmocka_run_group_tests_name("idem", tests, NULL, NULL);
}
