/*
 * test_rc_wire.c - charge-reconcile's pure parts: the window's times, a
 * page of the provider's list and a charge object, a record's body, the
 * paths it asks for, the names of requests and ids.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc_wire.h"

#define NOW 1795461284LL /* 2026-11-23T19:14:44Z */
#define REQ                                                                    \
	"charge_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static long long
when(const char *s)
{
	char err[256];
	long long v = -1;

	if (rc_time_parse(s, NOW, &v, err, sizeof(err)) != 0)
		return -1;
	return v;
}

static void
test_time_relative(void **state)
{
	(void)state;
	assert_int_equal(when("now"), NOW);
	assert_int_equal(when("24h"), NOW - 86400);
	assert_int_equal(when("90m"), NOW - 5400);
	assert_int_equal(when("3600s"), NOW - 3600);
	assert_int_equal(when("7d"), NOW - 7 * 86400);
	assert_int_equal(when("0s"), NOW);
	assert_int_equal(when("@1795461284"), 1795461284LL);
	assert_int_equal(when("@0"), 0);
}

static void
test_time_absolute(void **state)
{
	(void)state;
	assert_int_equal(when("1970-01-01"), 0);
	assert_int_equal(when("2026-11-23T19:14:44Z"), NOW);
	assert_int_equal(when("2026-11-23t19:14:44z"), NOW);
	assert_int_equal(when("2026-11-23T19:14:44.999Z"), NOW);
	assert_int_equal(when("2026-11-23T20:14:44+01:00"), NOW);
	assert_int_equal(when("2026-11-23T17:44:44-01:30"), NOW);
	assert_int_equal(when("2026-11-23"), NOW - (19 * 3600 + 14 * 60 + 44));
	assert_int_equal(when("2024-02-29"), 1709164800LL);
	assert_int_equal(when("2000-03-01T00:00:00Z"), 951868800LL);
}

static void
test_time_refused(void **state)
{
	static const char *const bad[] = { "", "h", "24", "24x", "-1h", "1h ",
		" 1h", "@", "@-5", "@1e9", "99999d", "2026-02-29", "2023-13-01",
		"2026-11-23T24:00:00Z", "2026-11-23T20:34:44",
		"2026-11-23T20:34Z", "2026-11-23T20:34:44+0100",
		"2026-11-23T20:34:44.Z", "1969-12-31", "yesterday" };
	char err[256];
	long long v;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (rc_time_parse(bad[i], NOW, &v, err, sizeof(err)) != -1)
			fail_msg("'%s' was taken as %lld", bad[i], v);
		assert_non_null(strstr(err, "is no time"));
	}
}

static const char page_json[] =
    "{\"object\":\"list\",\"url\":\"/v1/charges\",\"has_more\":true,\"data\":["
    "{\"id\":\"ch_a\",\"object\":\"charge\",\"amount\":1999,"
    "\"currency\":\"usd\",\"created\":1795461284,\"status\":\"succeeded\","
    "\"metadata\":{\"charge_principal\":\"demo\","
    "\"charge_idempotency_key\":\"order-1\",\"charge_request\":\"" REQ "\"}},"
    "{\"id\":\"ch_b\",\"amount\":5,\"currency\":\"eur\",\"created\":1,"
    "\"status\":\"failed\",\"metadata\":{\"charge_principal\":\"demo\"}},"
    "{\"id\":\"ch_c\",\"status\":\"pending\",\"metadata\":{"
    "\"charge_principal\":\"demo\",\"charge_idempotency_key\":\"k\","
    "\"charge_request\":\"charge_XYZ\"}},"
    "{\"id\":\"ch_d\",\"amount\":1.5,\"status\":\"succeeded\"}"
    "]}";

static void
test_page(void **state)
{
	struct rc_charge v[8];
	char err[256];
	size_t n;
	int more;

	(void)state;
	assert_int_equal(rc_page_parse(page_json, strlen(page_json), v, 8, &n,
	                     &more, err, sizeof(err)),
	    0);
	assert_int_equal(n, 4);
	assert_true(more);
	assert_string_equal(v[0].id, "ch_a");
	assert_int_equal(v[0].amount, 1999);
	assert_string_equal(v[0].currency, "usd");
	assert_int_equal(v[0].created, 1795461284LL);
	assert_int_equal(v[0].status, RC_CHARGE_SUCCEEDED);
	assert_string_equal(v[0].principal, "demo");
	assert_string_equal(v[0].key, "order-1");
	assert_int_equal(v[0].keylen, 7);
	assert_string_equal(v[0].request, REQ);
	/* half the metadata is nobody's request */
	assert_int_equal(v[1].status, RC_CHARGE_FAILED);
	assert_string_equal(v[1].principal, "");
	assert_string_equal(v[1].key, "");
	/* a malformed charge_request is none */
	assert_int_equal(v[2].status, RC_CHARGE_OTHER);
	assert_string_equal(v[2].principal, "demo");
	assert_string_equal(v[2].request, "");
	assert_int_equal(v[2].amount, -1);
	/* a fraction is no amount; no metadata at all */
	assert_int_equal(v[3].amount, -1);
	assert_string_equal(v[3].principal, "");
	/* more than max */
	assert_int_equal(rc_page_parse(page_json, strlen(page_json), v, 3, &n,
	                     &more, err, sizeof(err)),
	    -1);
	assert_non_null(strstr(err, "more than 3"));
}

static void
test_page_refused(void **state)
{
	static const char *const bad[] = { "", "[]", "{}", "not json",
		"{\"object\":\"search_result\",\"data\":[],\"has_more\":false}",
		"{\"object\":\"list\",\"data\":{},\"has_more\":false}",
		"{\"object\":\"list\",\"data\":[],\"has_more\":1}",
		"{\"object\":\"list\",\"data\":[{\"amount\":1}],\"has_more\":false}",
		"{\"object\":\"list\",\"data\":[{\"id\":\"\"}],\"has_more\":false}",
		"{\"object\":\"list\",\"data\":[7],\"has_more\":false}" };
	struct rc_charge v[4];
	char err[256];
	size_t i, n;
	int more;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (rc_page_parse(bad[i], strlen(bad[i]), v, 4, &n, &more, err,
		        sizeof(err)) != -1)
			fail_msg("taken as a list: %s", bad[i]);
	assert_int_equal(rc_page_parse("{\"object\":\"list\",\"data\":[],"
	                               "\"has_more\":false}",
	                     45, v, 4, &n, &more, err, sizeof(err)),
	    0);
	assert_int_equal(n, 0);
	assert_false(more);
}

static void
test_charge_and_body(void **state)
{
	static const char body[] =
	    "{\"id\":\"ch_eb4cdb7cae9374d7a32ea775\",\"object\":\"charge\","
	    "\"status\":\"succeeded\",\"amount\":1999,\"currency\":\"usd\","
	    "\"source\":\"tok_visa\",\"customer\":null,\"description\":null,"
	    "\"metadata\":{},\"line_items\":[],\"created\":1795461284,"
	    "\"idempotency_key\":\"order-1001\"}";
	char id[RC_ID_MAX], cur[RC_CURRENCY_MAX], err[128];
	struct rc_charge c;
	long long amount = 0;

	(void)state;
	assert_int_equal(rc_body_charge(body, strlen(body), id, &amount, cur),
	    0);
	assert_string_equal(id, "ch_eb4cdb7cae9374d7a32ea775");
	assert_int_equal(amount, 1999);
	assert_string_equal(cur, "usd");
	/* a problem body (402, 502) names no charge of its own */
	assert_int_equal(rc_body_charge("{\"type\":\"x\"}", 12, id, &amount,
	                     cur),
	    -1);
	assert_int_equal(rc_body_charge("{\"object\":\"charge\",\"id\":\"c\"}",
	                     29, id, &amount, cur),
	    -1);
	assert_int_equal(rc_body_charge("nope", 4, id, &amount, cur), -1);
	assert_int_equal(rc_charge_parse(body, strlen(body), &c, err,
	                     sizeof(err)),
	    0);
	assert_string_equal(c.id, "ch_eb4cdb7cae9374d7a32ea775");
	assert_int_equal(c.status, RC_CHARGE_SUCCEEDED);
	assert_int_equal(rc_charge_parse("[1]", 3, &c, err, sizeof(err)), -1);
}

static void
test_paths(void **state)
{
	char out[256];

	(void)state;
	assert_int_equal(rc_list_path(10, 20, NULL, out, sizeof(out)),
	    (int)strlen("/v1/charges?created%5Bgte%5D=10&created%5Blte%5D=20&"
	                "limit=100"));
	assert_string_equal(out,
	    "/v1/charges?created%5Bgte%5D=10&"
	    "created%5Blte%5D=20&limit=100");
	assert_true(rc_list_path(10, 20, "ch_a b&c", out, sizeof(out)) > 0);
	assert_string_equal(out,
	    "/v1/charges?created%5Bgte%5D=10&"
	    "created%5Blte%5D=20&limit=100&"
	    "starting_after=ch_a%20b%26c");
	assert_int_equal(rc_list_path(10, 20, "ch_a", out, 40), -1);
	assert_true(rc_charge_path("ch_1/..", out, sizeof(out)) > 0);
	assert_string_equal(out, "/v1/charges/ch_1%2F..");
}

static void
test_names(void **state)
{
	(void)state;
	assert_true(rc_is_request(REQ));
	assert_false(rc_is_request("charge_0123"));
	assert_false(rc_is_request(
	    "charge_0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));
	assert_false(rc_is_request(
	    "chargX_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
	assert_true(rc_request_hash(REQ) == 0x0123456789abcdefULL);
	assert_true(rc_id_hash("", 0) == 0xcbf29ce484222325ULL);
	assert_true(rc_id_hash("ch_a", 4) != rc_id_hash("ch_b", 4));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_time_relative),
		cmocka_unit_test(test_time_absolute),
		cmocka_unit_test(test_time_refused),
		cmocka_unit_test(test_page),
		cmocka_unit_test(test_page_refused),
		cmocka_unit_test(test_charge_and_body),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
