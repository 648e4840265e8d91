/*
 * test_auth.c - the API keys file and Bearer lookups: good files, comments,
 * every kind of bad line, duplicates, empty tables; right, wrong, missing,
 * malformed and prefix keys.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "auth.h"

#ifndef CHARGE_DEFAULT_CONF
#define CHARGE_DEFAULT_CONF "conf/charge.conf"
#endif

#define KEY_DEMO "sk_test_demo"
#define HEX_DEMO                                                               \
	"5d48f1024f38b44ad9ddc03dc12b2a8287c7ec690065dcef384cb1fd1753626d"
#define KEY_ALICE "sk_live_alice"
#define KEY_BOB "sk_live_bob"

/* Lower-case hex SHA-256 of s into out[65]. */
static void
sha_hex(const char *s, size_t n, char out[65])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	unsigned int i;

	assert_int_equal(EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL), 1);
	assert_int_equal(mdlen, 32);
	for (i = 0; i < mdlen; i++) {
		out[2 * i] = digits[md[i] >> 4];
		out[2 * i + 1] = digits[md[i] & 0xf];
	}
	out[64] = '\0';
}

static int
parse(struct auth_table *t, const char *text, char *err, size_t errlen)
{
	err[0] = '\0';
	return auth_parse(t, text, strlen(text), err, errlen);
}

static void
assert_contains(const char *haystack, const char *needle)
{
	if (strstr(haystack, needle) == NULL)
		fail_msg("\"%s\" does not contain \"%s\"", haystack, needle);
}

/* A table of demo, alice and bob, in that order. */
static void
three_keys(struct auth_table *t)
{
	char text[512], a[65], b[65], err[256];

	sha_hex(KEY_ALICE, strlen(KEY_ALICE), a);
	sha_hex(KEY_BOB, strlen(KEY_BOB), b);
	(void)snprintf(text, sizeof(text), "demo %s\nalice %s\nbob %s\n",
	    HEX_DEMO, a, b);
	if (parse(t, text, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(t->n, 3);
}

static void
test_parse_good(void **state)
{
	struct auth_table t;
	char text[512], upper[65], err[256];
	size_t i;

	(void)state;
	for (i = 0; i < 64; i++)
		upper[i] =
		    (char)(HEX_DEMO[i] >= 'a' ? HEX_DEMO[i] - 32 : HEX_DEMO[i]);
	upper[64] = '\0';
	/* Upper-case hex; no newline at the end of the file. */
	(void)snprintf(text, sizeof(text), "demo %s\nUPPER_hex-1 %s", upper,
	    "211f179f2e822c8a1033C9BA10D2EE3342C7DD47AADF1ED3020E85360C13A2B2");
	assert_int_equal(parse(&t, text, err, sizeof(err)), 0);
	assert_int_equal(t.n, 2);
	assert_string_equal(t.entries[0].principal, "demo");
	assert_int_equal(t.entries[0].hash[0], 0x5d);
	assert_int_equal(t.entries[0].hash[31], 0x6d);
	assert_string_equal(t.entries[1].principal, "UPPER_hex-1");
	assert_int_equal(t.entries[1].hash[0], 0x21);
	assert_int_equal(t.entries[1].hash[31], 0xb2);
	auth_free(&t);
	assert_null(t.entries);
	assert_int_equal(t.n, 0);
	auth_free(&t); /* twice is harmless */
	auth_free(NULL);
}

static void
test_parse_comments(void **state)
{
	struct auth_table t;
	char text[1024], err[256], a[65];

	(void)state;
	sha_hex(KEY_ALICE, strlen(KEY_ALICE), a);
	(void)snprintf(text, sizeof(text),
	    "# keys\n"
	    "\n"
	    "   # indented comment\n"
	    " \t \n"
	    "  demo\t%s   # trailing comment\r\n"
	    "alice %s#comment right after is not a comment\n",
	    HEX_DEMO, a);
	assert_int_equal(parse(&t, text, err, sizeof(err)), -1);
	assert_string_equal(err,
	    "line 6: expected 64 hex digits (the SHA-256 "
	    "of the API key) after the principal");

	(void)snprintf(text, sizeof(text),
	    "# keys\n\n   # indented comment\n \t \n"
	    "  demo\t%s   # trailing comment\r\n"
	    "alice %s\n# end",
	    HEX_DEMO, a);
	assert_int_equal(parse(&t, text, err, sizeof(err)), 0);
	assert_int_equal(t.n, 2);
	assert_string_equal(t.entries[0].principal, "demo");
	assert_string_equal(t.entries[1].principal, "alice");
	auth_free(&t);
}

static void
test_parse_bad_hex(void **state)
{
	static const char *const bad[] = {
		/* 63 digits */
		"demo 5d48f1024f38b44ad9ddc03dc12b2a82"
		"87c7ec690065dcef384cb1fd1753626\n",
		/* 65 digits */
		"demo 5d48f1024f38b44ad9ddc03dc12b2a82"
		"87c7ec690065dcef384cb1fd1753626d0\n",
		/* a 'g' */
		"demo 5d48f1024f38b44ad9ddc03dc12b2a82"
		"87c7ec690065dcef384cb1fd1753626g\n",
		/* no hash */
		"demo\n",
		"demo   \n",
		/* 0x prefix */
		"demo 0x5d48f1024f38b44ad9ddc03dc12b2a8"
		"287c7ec690065dcef384cb1fd17536\n",
	};
	struct auth_table t;
	char text[256], err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		(void)snprintf(text, sizeof(text), "# c\n%s", bad[i]);
		assert_int_equal(parse(&t, text, err, sizeof(err)), -1);
		assert_contains(err, "line 2: expected 64 hex digits");
		assert_null(t.entries);
		assert_int_equal(t.n, 0);
	}
	/* Extra text after the hash. */
	(void)snprintf(text, sizeof(text), "demo %s extra\n", HEX_DEMO);
	assert_int_equal(parse(&t, text, err, sizeof(err)), -1);
	assert_string_equal(err, "line 1: unexpected text after the hash");
}

static void
test_parse_bad_principal(void **state)
{
	static const char *const bad[] = {
		"de.mo",
		"d\xc3\xa9mo",
		"de/mo",
		"de:mo",
		"de@mo",
		/* 65 characters */
		"a12345678901234567890123456789012"
		"34567890123456789012345678901234",
	};
	struct auth_table t;
	char text[256], err[256], p64[65];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		(void)snprintf(text, sizeof(text), "\n\n%s %s\n", bad[i],
		    HEX_DEMO);
		assert_int_equal(parse(&t, text, err, sizeof(err)), -1);
		assert_contains(err, "line 3: principal");
		assert_null(t.entries);
	}
	/* 64 characters is the longest allowed. */
	memset(p64, 'p', 64);
	p64[64] = '\0';
	(void)snprintf(text, sizeof(text), "%s %s\n", p64, HEX_DEMO);
	assert_int_equal(parse(&t, text, err, sizeof(err)), 0);
	assert_string_equal(t.entries[0].principal, p64);
	auth_free(&t);
}

static void
test_parse_duplicates(void **state)
{
	struct auth_table t;
	char text[512], err[256], a[65];

	(void)state;
	sha_hex(KEY_ALICE, strlen(KEY_ALICE), a);
	(void)snprintf(text, sizeof(text), "demo %s\n# x\ndemo %s\n", HEX_DEMO,
	    a);
	/* Two keys of one principal: the old and the new while rotating. */
	assert_int_equal(parse(&t, text, err, sizeof(err)), 0);
	assert_int_equal(t.n, 2);
	assert_string_equal(t.entries[1].principal, "demo");
	auth_free(&t);
	/* One key for two principals would be ambiguous. */
	(void)snprintf(text, sizeof(text), "demo %s\nother %s\n", HEX_DEMO,
	    HEX_DEMO);
	assert_int_equal(parse(&t, text, err, sizeof(err)), -1);
	assert_contains(err, "line 2: ");
	assert_contains(err, "'demo'");
	/* Principals are case-sensitive: Demo and demo are two. */
	(void)snprintf(text, sizeof(text), "demo %s\nDemo %s\n", HEX_DEMO, a);
	assert_int_equal(parse(&t, text, err, sizeof(err)), 0);
	assert_int_equal(t.n, 2);
	auth_free(&t);
}

static void
test_parse_empty(void **state)
{
	struct auth_table t;
	char err[256];

	(void)state;
	assert_int_equal(parse(&t, "", err, sizeof(err)), -1);
	assert_contains(err, "no API keys");
	assert_int_equal(parse(&t, "# only comments\n\n  # and blanks\n", err,
	                     sizeof(err)),
	    -1);
	assert_contains(err, "no API keys");
	assert_null(t.entries);
	assert_int_equal(t.n, 0);
	/* A NUL byte on a key line is refused. */
	assert_int_equal(auth_parse(&t, "de\0mo x\n", 8, err, sizeof(err)), -1);
	assert_string_equal(err, "line 1: NUL byte");
}

static void
test_load(void **state)
{
	char dir[] = "/tmp/test_auth.XXXXXX";
	char path[PATH_MAX], err[PATH_MAX + 64];
	struct auth_table t;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	(void)snprintf(path, sizeof(path), "%s/keys", dir);
	assert_int_equal(auth_load(&t, path, err, sizeof(err)), -1);
	assert_contains(err, path);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fprintf(f, "# k\nbad!principal %s\n", HEX_DEMO) > 0,
	    1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(auth_load(&t, path, err, sizeof(err)), -1);
	assert_contains(err, path);
	assert_contains(err, ":2: principal");
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fprintf(f, "demo %s\n", HEX_DEMO) > 0, 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(auth_load(&t, path, err, sizeof(err)), 0);
	assert_string_equal(auth_principal(&t, "Bearer " KEY_DEMO), "demo");
	auth_free(&t);
	assert_int_equal(auth_load(&t, dir, err, sizeof(err)), -1);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

static void
test_lookup(void **state)
{
	struct auth_table t;

	(void)state;
	three_keys(&t);
	assert_string_equal(auth_principal(&t, "Bearer " KEY_DEMO), "demo");
	/* The match is remembered wherever it is in the table. */
	assert_string_equal(auth_principal(&t, "Bearer " KEY_ALICE), "alice");
	assert_string_equal(auth_principal(&t, "Bearer " KEY_BOB), "bob");
	/* The scheme is case-insensitive (RFC 9110 section 11.1). */
	assert_string_equal(auth_principal(&t, "bearer " KEY_DEMO), "demo");
	assert_string_equal(auth_principal(&t, "BEARER " KEY_DEMO), "demo");

	assert_null(auth_principal(&t, "Bearer sk_test_wrong"));
	assert_null(auth_principal(&t, NULL));
	assert_null(auth_principal(&t, ""));
	assert_null(auth_principal(&t, "Basic c2tfdGVzdF9kZW1vOg=="));
	assert_null(auth_principal(&t, "Basic " KEY_DEMO));
	assert_null(auth_principal(&t, "Bearer"));
	assert_null(auth_principal(&t, "Bearer "));
	assert_null(auth_principal(&t, KEY_DEMO));
	assert_null(auth_principal(&t, "Bearer" KEY_DEMO));
	/* A prefix of a valid key, and a valid key with more after it. */
	assert_null(auth_principal(&t, "Bearer sk_test_dem"));
	assert_null(auth_principal(&t, "Bearer " KEY_DEMO "X"));
	assert_null(auth_principal(&t, "Bearer " KEY_DEMO " " KEY_DEMO));
	/* Case matters in the key itself. */
	assert_null(auth_principal(&t, "Bearer SK_TEST_DEMO"));
	assert_null(auth_principal(NULL, "Bearer " KEY_DEMO));
	auth_free(&t);
	/* An empty table matches nothing. */
	assert_null(auth_principal(&t, "Bearer " KEY_DEMO));
}

static void
test_lookup_long_keys(void **state)
{
	char key[600], text[256], hex[65], err[256], header[700];
	struct auth_table t;

	(void)state;
	/* 513 bytes: rejected before hashing even though its hash is listed. */
	memset(key, 'k', 513);
	key[513] = '\0';
	sha_hex(key, 513, hex);
	(void)snprintf(text, sizeof(text), "long %s\n", hex);
	assert_int_equal(parse(&t, text, err, sizeof(err)), 0);
	(void)snprintf(header, sizeof(header), "Bearer %s", key);
	assert_null(auth_principal(&t, header));
	auth_free(&t);

	/* 512 bytes is still a key. */
	key[512] = '\0';
	sha_hex(key, 512, hex);
	(void)snprintf(text, sizeof(text), "long %s\n", hex);
	assert_int_equal(parse(&t, text, err, sizeof(err)), 0);
	(void)snprintf(header, sizeof(header), "Bearer %s", key);
	assert_string_equal(auth_principal(&t, header), "long");
	auth_free(&t);
}

/* The shipped conf/api-keys holds the demo keys and nothing else. */
/*
 * A key authenticated once is remembered per thread for speed; the memory
 * must never answer for another table (a reloaded file with other keys),
 * nor for a key that differs in its last byte or its length.
 */
static void
test_lookup_remembered(void **state)
{
	struct auth_table a, b;
	char text[256], ha[65], hb[65], err[128];

	(void)state;
	sha_hex(KEY_ALICE, strlen(KEY_ALICE), ha);
	sha_hex(KEY_BOB, strlen(KEY_BOB), hb);
	(void)snprintf(text, sizeof(text), "alice %s\nbob %s\n", ha, hb);
	assert_int_equal(parse(&a, text, err, sizeof(err)), 0);
	assert_string_equal(auth_principal(&a, "Bearer " KEY_ALICE), "alice");
	assert_string_equal(auth_principal(&a, "Bearer " KEY_ALICE), "alice");
	assert_null(auth_principal(&a, "Bearer sk_live_alicf"));
	assert_null(auth_principal(&a, "Bearer sk_live_alic"));
	assert_null(auth_principal(&a, "Bearer " KEY_ALICE "x"));
	assert_string_equal(auth_principal(&a, "Bearer " KEY_BOB), "bob");
	assert_string_equal(auth_principal(&a, "Bearer " KEY_ALICE), "alice");
	auth_free(&a);
	/* the same memory, another file: alice's key now names carol */
	(void)snprintf(text, sizeof(text), "carol %s\n", ha);
	assert_int_equal(parse(&b, text, err, sizeof(err)), 0);
	assert_string_equal(auth_principal(&b, "Bearer " KEY_ALICE), "carol");
	assert_null(auth_principal(&b, "Bearer " KEY_BOB));
	auth_free(&b);
	/* a file without alice: her remembered key is not accepted */
	(void)snprintf(text, sizeof(text), "bob %s\n", hb);
	assert_int_equal(parse(&b, text, err, sizeof(err)), 0);
	assert_null(auth_principal(&b, "Bearer " KEY_ALICE));
	auth_free(&b);
}

static void
test_shipped_keys(void **state)
{
	char path[PATH_MAX], err[PATH_MAX + 64];
	const char *slash = strrchr(CHARGE_DEFAULT_CONF, '/');
	struct auth_table t;

	(void)state;
	assert_non_null(slash);
	(void)snprintf(path, sizeof(path), "%.*s/api-keys",
	    (int)(slash - CHARGE_DEFAULT_CONF), CHARGE_DEFAULT_CONF);
	if (auth_load(&t, path, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(t.n, 2);
	assert_string_equal(auth_principal(&t, "Bearer sk_test_demo"), "demo");
	assert_string_equal(auth_principal(&t, "Bearer sk_test_demo2"),
	    "demo2");
	assert_null(auth_principal(&t, "Bearer sk_test_demo3"));
	auth_free(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_good),
		cmocka_unit_test(test_parse_comments),
		cmocka_unit_test(test_parse_bad_hex),
		cmocka_unit_test(test_parse_bad_principal),
		cmocka_unit_test(test_parse_duplicates),
		cmocka_unit_test(test_parse_empty),
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_lookup),
		cmocka_unit_test(test_lookup_long_keys),
		cmocka_unit_test(test_lookup_remembered),
		cmocka_unit_test(test_shipped_keys),
	};

	return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}
