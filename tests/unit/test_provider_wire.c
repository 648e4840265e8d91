/*
 * test_provider_wire.c - the pure parts of the HTTP provider: the
 * classification table, the downstream key, the form body, the provider's
 * charge, error and search JSON, the backoff's bounds, the completer's
 * schedule and its settle step (shared with a retry).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "completer.h"
#include "config.h"
#include "digest.h"
#include "idem.h"
#include "metrics.h"
#include "provider_wire.h"
#include "wire_url.h"

#define FP "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define CANON                                                                        \
	"{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\","             \
	"\"customer\":null,\"description\":\"Caf\xc3\xa9 & \\\"tea\\\"\\n\\u0001\"," \
	"\"metadata\":{},\"line_items\":[]}"

static struct wire_verdict
classify(long status, const char *type, const char *code, int retry)
{
	struct wire_attempt a = { status, type, code, retry };

	return wire_classify(&a);
}

static void
test_classify(void **state)
{
	static const struct {
		long status;
		const char *type, *code;
		int retry;
		enum wire_class cls;
		const char *label;
	} rows[] = {
		{ 0, NULL, NULL, -1, WIRE_RETRY, "transport" },
		{ 200, NULL, NULL, -1, WIRE_CHARGE, "charge" },
		{ 200, NULL, NULL, 1, WIRE_CHARGE, "charge" },
		{ 402, "card_error", "card_declined", 0, WIRE_DECLINE,
		    "decline" },
		{ 400, "idempotency_error", NULL, 0, WIRE_BUG,
		    "idempotency_error" },
		{ 400, "invalid_request_error", "parameter_missing", 0,
		    WIRE_REJECTED, "rejected" },
		{ 401, "invalid_request_error", NULL, 0, WIRE_REJECTED,
		    "rejected" },
		{ 404, NULL, NULL, -1, WIRE_REJECTED, "rejected" },
		{ 409, "invalid_request_error", "idempotency_key_in_use", 1,
		    WIRE_RETRY, "in_use" },
		{ 429, "invalid_request_error", "lock_timeout", 1, WIRE_RETRY,
		    "rate_limited" },
		{ 500, "api_error", NULL, 1, WIRE_RETRY, "server_error" },
		{ 503, NULL, NULL, -1, WIRE_RETRY, "server_error" },
		{ 418, NULL, NULL, 1, WIRE_RETRY, "should_retry" },
		{ 418, NULL, NULL, 0, WIRE_REJECTED, "rejected" },
		{ 302, NULL, NULL, -1, WIRE_RETRY, "unexpected" },
		{ 201, NULL, NULL, -1, WIRE_RETRY, "unexpected" },
	};
	size_t i, j;

	(void)state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct wire_verdict v = classify(rows[i].status, rows[i].type,
		    rows[i].code, rows[i].retry);

		if (v.cls != rows[i].cls || strcmp(v.label, rows[i].label) != 0)
			fail_msg("row %zu (%ld): class %d label %s", i,
			    rows[i].status, v.cls, v.label);
	}
	/* the label is the one /metrics renders for the verdict's class */
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct wire_verdict v = classify(rows[i].status, rows[i].type,
		    rows[i].code, rows[i].retry);

		assert_true(v.attempt < MA_COUNT);
		assert_string_equal(v.label, metrics_attempt_labels[v.attempt]);
	}
	for (j = 0; j < MA_COUNT; j++)
		assert_non_null(metrics_attempt_labels[j]);
	assert_null(metrics_attempt_labels[MA_COUNT]);
}

static void
test_downstream_key(void **state)
{
	char k1[WIRE_KEY_LEN + 1], k2[WIRE_KEY_LEN + 1];
	unsigned char mac[SHA256_LEN];
	char msg[] = "demo\0order-1\0" FP, hex[65];
	size_t i;

	(void)state;
	assert_int_equal(digest_init(), 0);
	assert_int_equal(wire_downstream_key("s3cret", "demo", "order-1", 7, FP,
	                     k1),
	    0);
	assert_int_equal(strlen(k1), 7 + 64);
	assert_memory_equal(k1, "charge_", 7);
	for (i = 7; i < strlen(k1); i++)
		assert_non_null(strchr("0123456789abcdef", k1[i]));
	/* HMAC-SHA256(secret, principal NUL key NUL fingerprint) */
	assert_int_equal(digest_hmac_sha256("s3cret", 6, msg, sizeof(msg) - 1,
	                     mac),
	    0);
	digest_hex(mac, sizeof(mac), hex);
	assert_string_equal(k1 + 7, hex);
	/* the same on every call; another principal, key or request differs */
	assert_int_equal(wire_downstream_key("s3cret", "demo", "order-1", 7, FP,
	                     k2),
	    0);
	assert_string_equal(k1, k2);
	assert_int_equal(wire_downstream_key("s3cret", "acme", "order-1", 7, FP,
	                     k2),
	    0);
	assert_string_not_equal(k1, k2);
	assert_int_equal(wire_downstream_key("s3cret", "demo", "order-2", 7, FP,
	                     k2),
	    0);
	assert_string_not_equal(k1, k2);
	assert_int_equal(wire_downstream_key("other", "demo", "order-1", 7, FP,
	                     k2),
	    0);
	assert_string_not_equal(k1, k2);
	/* never the client's key itself */
	assert_null(strstr(k1, "order-1"));
}

#define NODESC                                                                 \
	"{\"amount\":5,\"currency\":\"eur\",\"source\":\"tok_a|tok_b\","       \
	"\"customer\":null,\"description\":null,\"metadata\":"                 \
	"{\"description\":\"x\"},\"line_items\":[]}"

/*
 * The call wire_form_body() reads: its params' amount, currency, source
 * and canonical text (held until the next form_call()).
 */
static struct provider_call
form_call(const char *canon, long long amount, const char *currency,
    const char *source, const char *principal, const char *key)
{
	static char text[512];
	static struct charge_params p;
	struct provider_call c;

	assert_true(strlen(canon) < sizeof(text) &&
	    strlen(currency) < sizeof(p.currency) &&
	    strlen(source) < sizeof(p.source));
	memset(&p, 0, sizeof(p));
	memcpy(text, canon, strlen(canon) + 1);
	p.canonical = text;
	p.canonical_len = strlen(text);
	p.amount = amount;
	memcpy(p.currency, currency, strlen(currency) + 1);
	memcpy(p.source, source, strlen(source) + 1);
	memset(&c, 0, sizeof(c));
	c.params = &p;
	c.principal = principal;
	c.key = key;
	c.keylen = strlen(key);
	return c;
}

static void
test_form_body(void **state)
{
	struct provider_call c;
	size_t len = 0;
	char *f;

	(void)state;
	c = form_call(CANON, 1999, "usd", "tok_visa", "demo", "k&y=1 2");
	f = wire_form_body(&c, "charge_ab", &len);
	assert_non_null(f);
	assert_int_equal(len, strlen(f));
	assert_string_equal(f,
	    "amount=1999&currency=usd&source=tok_visa"
	    "&description=Caf%C3%A9%20%26%20%22tea%22%0A%01"
	    "&metadata[charge_principal]=demo"
	    "&metadata[charge_idempotency_key]=k%26y%3D1%202"
	    "&metadata[charge_request]=charge_ab");
	free(f);
	/* no description (one inside metadata is not it): none sent */
	c = form_call(NODESC, 5, "eur", "tok_a|tok_b", "p", "k");
	f = wire_form_body(&c, "d", &len);
	assert_non_null(f);
	assert_string_equal(f,
	    "amount=5&currency=eur&source=tok_a%7Ctok_b"
	    "&metadata[charge_principal]=p&metadata[charge_idempotency_key]=k"
	    "&metadata[charge_request]=d");
	free(f);
	/* the amount's digits, at the edges of what a request can ask */
	{
		static const struct {
			long long amount;
			const char *want;
		} amounts[] = {
			{ 1, "amount=1&" },
			{ 100, "amount=100&" },
			{ 99999999, "amount=99999999&" },
			{ 9223372036854775807LL,
			    "amount=9223372036854775807&" },
			{ -5, "amount=-5&" },
		};

		for (size_t i = 0; i < sizeof(amounts) / sizeof(amounts[0]);
		     i++) {
			c = form_call(NODESC, amounts[i].amount, "usd", "t",
			    "p", "k");
			f = wire_form_body(&c, "d", &len);
			assert_non_null(f);
			assert_memory_equal(f, amounts[i].want,
			    strlen(amounts[i].want));
			free(f);
		}
	}
	/* not a canonical text, or an escape it does not write: no body */
	c = form_call("not json", 5, "usd", "t", "p", "k");
	assert_null(wire_form_body(&c, "d", &len));
	c = form_call("{\"description\":5}", 5, "usd", "t", "p", "k");
	assert_null(wire_form_body(&c, "d", &len));
	c = form_call("{\"description\":\"\\u00e9\"}", 5, "usd", "t", "p", "k");
	assert_null(wire_form_body(&c, "d", &len));
}

static void
test_list_query(void **state)
{
	char q[256];

	(void)state;
	assert_true(wire_list_query(100, 200, NULL, q, sizeof(q)) > 0);
	assert_string_equal(q, "created[gte]=100&created[lte]=200&limit=100");
	assert_true(wire_list_query(100, 200, "ch_9", q, sizeof(q)) > 0);
	assert_string_equal(q,
	    "created[gte]=100&created[lte]=200&limit=100&starting_after=ch_9");
	assert_true(wire_list_query(1, 2, "", q, sizeof(q)) > 0);
	assert_null(strstr(q, "starting_after"));
	assert_int_equal(wire_list_query(100, 200, NULL, q, 10), -1);
}

#define CHARGE_JSON                                                            \
	"{\"id\":\"ch_0123456789abcdef01234567\",\"object\":\"charge\","       \
	"\"amount\":1999,\"created\":1764000000,\"currency\":\"usd\","         \
	"\"metadata\":{\"charge_principal\":\"demo\"},"                        \
	"\"outcome\":{\"reason\":null},\"status\":\"succeeded\"}"
#define FAILED_JSON                                                            \
	"{\"id\":\"ch_fail\",\"object\":\"charge\",\"created\":1764000001,"    \
	"\"failure_code\":\"card_declined\","                                  \
	"\"metadata\":{\"charge_principal\":\"demo\"},"                        \
	"\"outcome\":{\"reason\":\"insufficient_funds\"},"                     \
	"\"status\":\"failed\"}"

#define BAD_ID_JSON                                                            \
	"{\"id\":\"ch_a\\\"b\",\"object\":\"charge\",\"created\":1,"           \
	"\"status\":\"succeeded\"}"

static void
test_parse_charge(void **state)
{
	struct provider_result r;

	(void)state;
	memset(&r, 0, sizeof(r));
	assert_int_equal(wire_parse_charge(CHARGE_JSON, strlen(CHARGE_JSON),
	                     &r),
	    0);
	assert_int_equal(r.outcome, PROV_SUCCEEDED);
	assert_string_equal(r.charge_id, "ch_0123456789abcdef01234567");
	assert_int_equal(r.created, 1764000000LL);
	/* not a charge, not succeeded, no id, truncated */
	assert_int_equal(wire_parse_charge("{\"object\":\"list\"}", 17, &r),
	    -1);
	assert_int_equal(wire_parse_charge(FAILED_JSON, strlen(FAILED_JSON),
	                     &r),
	    -1);
	assert_int_equal(wire_parse_charge("{\"object\":\"charge\","
	                                   "\"created\":1,\"status\":"
	                                   "\"succeeded\"}",
	                     47, &r),
	    -1);
	assert_int_equal(wire_parse_charge(CHARGE_JSON, 30, &r), -1);
	/* an id that would need escaping in our JSON is refused */
	assert_int_equal(wire_parse_charge(BAD_ID_JSON, strlen(BAD_ID_JSON),
	                     &r),
	    -1);
}

/*
 * The one-pass reading of a succeeded charge and cJSON's agree: nested
 * members named like the top-level ones, duplicates (the first counts),
 * escapes, fractions, trailing bytes, odd whitespace.
 */
static void
test_parse_charge_forms(void **state)
{
	static const struct {
		const char *json;
		int rc;
		const char *id;
		long long created;
	} cases[] = {
		{ "{\"source\":{\"id\":\"card_1\",\"object\":\"card\"},"
		  "\"id\":\"ch_1\",\"object\":\"charge\",\"created\":7,"
		  "\"list\":[1,-2.5e3,true,false,null,\"x\\\"y\",{},[]],"
		  "\"status\":\"succeeded\"}",
		    0, "ch_1", 7 },
		{ " {\n\t\"id\" : \"ch_2\" , \"object\":\"charge\",\r\n"
		  "\"created\":0,\"status\":\"succeeded\"} \n",
		    0, "ch_2", 0 },
		/* the first of duplicate members counts */
		{ "{\"id\":\"ch_3\",\"object\":\"charge\",\"created\":3,"
		  "\"status\":\"failed\",\"status\":\"succeeded\"}",
		    -1, NULL, 0 },
		{ "{\"id\":\"ch_4\",\"object\":\"charge\",\"created\":4,"
		  "\"status\":\"succeeded\",\"id\":\"ch_x\"}",
		    0, "ch_4", 4 },
		/* escapes and fractions: read by cJSON */
		{ "{\"id\":\"ch_5\",\"object\":\"charge\",\"created\":5,"
		  "\"st\\u0061tus\":\"succeeded\"}",
		    0, "ch_5", 5 },
		{ "{\"id\":\"ch_6\",\"object\":\"charge\",\"created\":6e1,"
		  "\"status\":\"succeeded\"}",
		    0, "ch_6", 60 },
		{ "{\"id\":\"ch_7\",\"object\":\"charge\",\"created\":7,"
		  "\"status\":\"succ\\u0065eded\"}",
		    0, "ch_7", 7 },
		/* trailing bytes after the object: cJSON ignores them */
		{ "{\"id\":\"ch_8\",\"object\":\"charge\",\"created\":8,"
		  "\"status\":\"succeeded\"}xyz",
		    0, "ch_8", 8 },
		/* out of range, negative, not a charge, broken */
		{ "{\"id\":\"ch_9\",\"object\":\"charge\","
		  "\"created\":1000000000001,\"status\":\"succeeded\"}",
		    -1, NULL, 0 },
		/* a surrogate not paired: cJSON refuses the body, so must the
		 * one-pass reading (found by tests/fuzz); a pair is read */
		{ "{\"id\":\"ch_e\",\"object\":\"charge\",\"created\":1,"
		  "\"status\":\"succeeded\",\"x\":\"\\udc00\"}",
		    -1, NULL, 0 },
		{ "{\"id\":\"ch_f\",\"object\":\"charge\",\"created\":1,"
		  "\"status\":\"succeeded\",\"x\":\"\\uD800\\u0041\"}",
		    -1, NULL, 0 },
		{ "{\"id\":\"ch_g\",\"object\":\"charge\",\"created\":1,"
		  "\"status\":\"succeeded\",\"x\":\"\\ud83d\\ude00\"}",
		    0, "ch_g", 1 },
		/* a fraction of a second is no Unix time (it was cut to 1796;
		 * charge-reconcile refused it: found by tests/fuzz) */
		{ "{\"id\":\"ch_d\",\"object\":\"charge\","
		  "\"created\":1796.16603,\"status\":\"succeeded\"}",
		    -1, NULL, 0 },
		{ "{\"id\":\"ch_a\",\"object\":\"charge\",\"created\":-1,"
		  "\"status\":\"succeeded\"}",
		    -1, NULL, 0 },
		{ "{\"id\":\"ch_b\",\"object\":\"refund\",\"created\":1,"
		  "\"status\":\"succeeded\"}",
		    -1, NULL, 0 },
		{ "{\"id\":\"ch_c\",\"object\":\"charge\",\"created\":1,"
		  "\"status\":\"succeeded\",}",
		    -1, NULL, 0 },
		{ "{\"id\":\"\",\"object\":\"charge\",\"created\":1,"
		  "\"status\":\"succeeded\"}",
		    -1, NULL, 0 },
	};
	struct provider_result r;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&r, 0, sizeof(r));
		if (wire_parse_charge(cases[i].json, strlen(cases[i].json),
		        &r) != cases[i].rc)
			fail_msg("case %zu: rc", i);
		if (cases[i].rc != 0)
			continue;
		assert_int_equal(r.outcome, PROV_SUCCEEDED);
		assert_string_equal(r.charge_id, cases[i].id);
		assert_int_equal(r.created, cases[i].created);
		assert_null(r.decline_code);
	}
}

/*
 * The string scanner skips eight bytes a step: a quote, a backslash, a
 * control byte or UTF-8 at every offset of a long string (the request in
 * the charge's metadata, which the reader hands back) reads as cJSON reads
 * it.
 */
static void
test_parse_charge_string_offsets(void **state)
{
	static const char *const specials[] = { "\\\"", "\\\\", "\\u0041",
		"\\n", "\x1f", "\x01", "\xc3\xa9", "\x7f", "\"" };
	char rq[64], json[256];
	struct provider_result r;
	const cJSON *want_rq;
	cJSON *ref;

	(void)state;
	for (size_t k = 0; k < sizeof(specials) / sizeof(specials[0]); k++)
		for (int off = 0; off < 24; off++) {
			(void)snprintf(rq, sizeof(rq), "%.*s%s%s", off,
			    "abcdefghijklmnopqrstuvwxyz", specials[k],
			    "0123456789abcdefghij");
			(void)snprintf(json, sizeof(json),
			    "{\"id\":\"ch_1\",\"object\":\"charge\","
			    "\"created\":7,\"status\":\"succeeded\","
			    "\"metadata\":{\"charge_request\":\"%s\"}}",
			    rq);
			ref = cJSON_Parse(json);
			want_rq = cJSON_GetObjectItemCaseSensitive(
			    cJSON_GetObjectItemCaseSensitive(ref, "metadata"),
			    "charge_request");
			memset(&r, 0, sizeof(r));
			if (wire_parse_charge(json, strlen(json), &r) !=
			    (ref != NULL ? 0 : -1))
				fail_msg("special %zu at offset %d", k, off);
			if (ref != NULL) {
				assert_string_equal(r.charge_id, "ch_1");
				assert_string_equal(r.seen_request,
				    want_rq->valuestring);
			}
			cJSON_Delete(ref);
		}
}

static void
test_parse_error(void **state)
{
	static const char decl[] =
	    "{\"error\":{\"type\":\"card_error\",\"code\":\"card_declined\","
	    "\"decline_code\":\"generic_decline\",\"charge\":\"ch_abc\","
	    "\"message\":\"Your card was declined.\"}}";
	static const char funds[] =
	    "{\"error\":{\"type\":\"card_error\",\"code\":\"card_declined\","
	    "\"decline_code\":\"insufficient_funds\",\"charge\":\"ch_f\"}}";
	static const char idem[] =
	    "{\"error\":{\"type\":\"idempotency_error\",\"message\":\"x\"}}";
	char type[PROVIDER_CODE_MAX], code[PROVIDER_CODE_MAX];
	struct provider_result r;

	(void)state;
	memset(&r, 0, sizeof(r));
	assert_int_equal(wire_parse_error(decl, strlen(decl), 402, type, code,
	                     &r),
	    0);
	assert_string_equal(type, "card_error");
	assert_string_equal(code, "card_declined");
	assert_int_equal(r.outcome, PROV_DECLINED);
	assert_string_equal(r.charge_id, "ch_abc");
	/* the generic reason names the code, as the in-process provider */
	assert_string_equal(r.decline_code, "card_declined");
	assert_int_equal(wire_parse_error(funds, strlen(funds), 402, type, code,
	                     &r),
	    0);
	assert_string_equal(r.decline_code, "insufficient_funds");
	memset(&r, 0, sizeof(r));
	assert_int_equal(wire_parse_error(idem, strlen(idem), 400, type, code,
	                     &r),
	    0);
	assert_string_equal(type, "idempotency_error");
	assert_string_equal(code, "");
	assert_int_equal(r.outcome, PROV_SUCCEEDED); /* untouched */
	/* a 402 that names no charge is a decline all the same (issue 27) */
	memset(&r, 0, sizeof(r));
	assert_int_equal(wire_parse_error(idem, strlen(idem), 402, type, code,
	                     &r),
	    0);
	assert_int_equal(r.outcome, PROV_DECLINED);
	assert_string_equal(r.charge_id, "");
	assert_int_equal(wire_parse_error("<html>", 6, 500, type, code, &r),
	    -1);
}

static void
test_parse_list(void **state)
{
	static const char none[] =
	    "{\"object\":\"list\",\"data\":[],\"has_more\":false}";
	/* another principal's charge under the same client key */
	static const char other[] =
	    "{\"object\":\"list\",\"has_more\":true,\"data\":[{\"id\":\"ch_x\","
	    "\"created\":1,\"amount\":1999,\"currency\":\"usd\","
	    "\"status\":\"succeeded\",\"metadata\":{"
	    "\"charge_principal\":\"acme\",\"charge_request\":\"charge_o\"}}]}";
	/* names us, but for 1 jpy */
	static const char wrong[] =
	    "{\"object\":\"list\",\"has_more\":false,\"data\":[{\"id\":\"ch_w\","
	    "\"created\":1,\"amount\":1,\"currency\":\"jpy\","
	    "\"status\":\"succeeded\",\"metadata\":{"
	    "\"charge_request\":\"charge_r\"}}]}";
	static const char ours[] =
	    "{\"object\":\"list\",\"has_more\":false,\"data\":[{\"id\":\"ch_a\","
	    "\"created\":5,\"amount\":1999,\"currency\":\"usd\","
	    "\"status\":\"succeeded\",\"metadata\":{"
	    "\"charge_request\":\"charge_r\"}},{\"id\":\"ch_b\","
	    "\"created\":4,\"amount\":1,\"currency\":\"usd\","
	    "\"status\":\"succeeded\",\"metadata\":{}}]}";
	static const char declined[] =
	    "{\"object\":\"list\",\"has_more\":false,\"data\":[{\"id\":\"ch_d\","
	    "\"created\":5,\"amount\":1999,\"currency\":\"usd\","
	    "\"status\":\"failed\",\"failure_code\":\"card_declined\","
	    "\"outcome\":{\"reason\":\"insufficient_funds\"},\"metadata\":{"
	    "\"charge_request\":\"charge_r\"}}]}";
	struct settle_expect e = { "charge_r", 1999, "usd" };
	struct provider_result r;
	char after[PROVIDER_ID_MAX];
	int more;

	(void)state;
	memset(&r, 0, sizeof(r));
	assert_int_equal(wire_parse_list(none, strlen(none), &e, &r, &more,
	                     after, NULL),
	    PROBE_NONE);
	assert_int_equal(more, 0);
	assert_string_equal(after, "");
	assert_int_equal(wire_parse_list(other, strlen(other), &e, &r, &more,
	                     after, NULL),
	    PROBE_NONE);
	assert_int_equal(more, 1);
	assert_string_equal(after, "ch_x");
	assert_int_equal(wire_parse_list(wrong, strlen(wrong), &e, &r, &more,
	                     after, NULL),
	    PROBE_NOT_OURS);
	assert_int_equal(wire_parse_list(ours, strlen(ours), &e, &r, &more,
	                     after, NULL),
	    PROBE_FOUND);
	assert_string_equal(r.charge_id, "ch_a");
	assert_int_equal(r.created, 5);
	assert_string_equal(after, "ch_b");
	assert_int_equal(wire_parse_list(declined, strlen(declined), &e, &r,
	                     &more, after, NULL),
	    PROBE_FOUND_DECLINED);
	assert_int_equal(r.outcome, PROV_DECLINED);
	assert_string_equal(r.decline_code, "insufficient_funds");
	assert_int_equal(wire_parse_list("{}", 2, &e, &r, &more, after, NULL),
	    PROBE_INCOMPLETE);
	assert_int_equal(wire_parse_list("{\"data\":[]}", 11, &e, &r, &more,
	                     after, NULL),
	    PROBE_INCOMPLETE);
}

/* The search for a downstream key (issue 36, A.5): its query, its pages. */
static void
test_search(void **state)
{
	static const char page1[] =
	    "{\"object\":\"search_result\",\"has_more\":true,\"next_page\":"
	    "\"page_1 x\",\"data\":[{\"id\":\"ch_x\",\"metadata\":{}}]}";
	static const char nonext[] =
	    "{\"object\":\"search_result\",\"has_more\":true,\"data\":[]}";
	static const char found[] =
	    "{\"object\":\"search_result\",\"has_more\":true,\"data\":[{"
	    "\"id\":\"ch_a\",\"created\":5,\"amount\":1999,\"currency\":"
	    "\"usd\",\"status\":\"succeeded\",\"metadata\":{"
	    "\"charge_request\":\"charge_r\"}}]}";
	struct settle_expect e = { "charge_r", 1999, "usd" };
	struct provider_result r;
	char next[PROVIDER_ID_MAX], q[512];
	int more;

	(void)state;
	assert_int_equal(wire_search_query("charge_r", NULL, q, sizeof(q)), 67);
	assert_string_equal(q,
	    "query=metadata%5B%27charge_request%27%5D%3A%27charge_r%27&limit=100");
	assert_true(wire_search_query("charge_r", "p 1/2", q, sizeof(q)) > 0);
	assert_non_null(strstr(q, "&page=p%201%2F2"));
	assert_int_equal(wire_search_query("charge'r", NULL, q, sizeof(q)), -1);
	assert_int_equal(wire_search_query("charge_r", NULL, q, 20), -1);
	memset(&r, 0, sizeof(r));
	assert_int_equal(wire_parse_search(page1, strlen(page1), &e, &r, &more,
	                     next),
	    PROBE_NONE);
	assert_int_equal(more, 1);
	assert_string_equal(next, "page_1 x");
	/* more, and no token to them: never "none" */
	assert_int_equal(wire_parse_search(nonext, strlen(nonext), &e, &r,
	                     &more, next),
	    PROBE_INCOMPLETE);
	assert_int_equal(wire_parse_search(found, strlen(found), &e, &r, &more,
	                     next),
	    PROBE_FOUND);
	assert_string_equal(r.charge_id, "ch_a");
}

static void
test_backoff(void **state)
{
	int n;

	(void)state;
	assert_int_equal(wire_backoff_ms(1, 0.0), 250);
	assert_int_equal(wire_backoff_ms(1, 0.999), 499);
	assert_int_equal(wire_backoff_ms(2, 0.0), 500);
	assert_int_equal(wire_backoff_ms(3, 0.5), 1500);
	for (n = 1; n < 100; n++) {
		long lo = wire_backoff_ms(n, 0.0),
		     hi = wire_backoff_ms(n, 0.99);

		assert_true(lo >= 250 && lo <= 2000);
		assert_true(hi >= lo && hi <= 2000);
	}
	assert_int_equal(wire_backoff_ms(50, 0.9), 2000);
	/* a jitter out of range counts as none */
	assert_int_equal(wire_backoff_ms(1, 7.0), 250);
}

/* The settle step a retry and the completer share (completer.h). */
static void
test_settle_step(void **state)
{
	struct config cfg;
	struct idem_resume rs;
	struct provider_call call;

	(void)state;
	config_defaults(&cfg, "/tmp");
	cfg.provider_execute_window_s = 2;
	cfg.provider_deadline_ms = 3000;
	cfg.provider_timeout_ms = 1000;
	cfg.provider_execute_max_ms = 1000; /* as one attempt: the old rule */
	memset(&rs, 0, sizeof(rs));
	rs.created_ms = 100000;
	rs.quiet_ms =
	    103000; /* the original recorded unknown at its deadline */
	/* within the execute window: send again */
	memset(&call, 0, sizeof(call));
	assert_int_equal(completer_settle_step(&cfg, &rs, 101500, &call), 0);
	assert_int_equal(call.resume, 1);
	assert_int_equal(call.probe, 0);
	/* past it and past the quiet + provider_timeout_ms: probe now */
	assert_int_equal(completer_settle_step(&cfg, &rs, 104500, &call), 0);
	assert_int_equal(call.probe, 1);
	assert_int_equal(call.quiet_ms, 103000);
	assert_int_equal(call.created_ms, 100000);
	assert_int_equal(completer_settle_step(&cfg, &rs, 104000, &call), 0);
	assert_int_equal(call.probe, 1);
	/* past it, a delivery may be in flight: probe after the wait */
	assert_int_equal(completer_settle_step(&cfg, &rs, 103500, &call), 500);
	assert_int_equal(call.probe, 1);
	/* the original attempt's deadline when later than quiet_ms */
	rs.quiet_ms = 100500;
	assert_int_equal(completer_settle_step(&cfg, &rs, 103200, &call), 800);
	assert_int_equal(call.probe, 1);
	assert_int_equal(call.quiet_ms, 103000);
	/* a lease that lapsed far ahead: probe now, never send again */
	rs.quiet_ms = 110000;
	assert_int_equal(completer_settle_step(&cfg, &rs, 104500, &call), 0);
	assert_int_equal(call.probe, 1);
	/* the age not known: never send again, absence never proven */
	rs.quiet_ms = 103000;
	rs.created_ms = 0;
	assert_int_equal(completer_settle_step(&cfg, &rs, 900000, &call), 0);
	assert_int_equal(call.probe, 1);
	assert_int_equal(call.quiet_ms, 0);
	/*
	 * provider_execute_max_ms longer than one attempt (issue 36): no
	 * absence before the quiet plus it; the completer asks again then
	 */
	rs.created_ms = 100000;
	rs.quiet_ms = 103000;
	cfg.provider_execute_max_ms = 1800;
	assert_int_equal(completer_settle_step(&cfg, &rs, 104000, &call), 800);
	assert_int_equal(completer_settle_step(&cfg, &rs, 104800, &call), 0);
	assert_int_equal(completer_proof_ms(&cfg, &rs, 103000), 104800);
	/* shorter than one attempt: provider_timeout_ms still holds */
	cfg.provider_execute_max_ms = 10;
	assert_int_equal(completer_proof_ms(&cfg, &rs, 103000), 104000);
	/* a later quiet kept by a probe: from it; the age unknown: none */
	assert_int_equal(completer_proof_ms(&cfg, &rs, 105000), 106000);
	rs.created_ms = 0;
	assert_int_equal(completer_proof_ms(&cfg, &rs, 105000), 0);
}

/*
 * The completer's record reply and the index (issue 27): only a settled
 * record leaves it; a retry that holds the record now (FENCED) or another
 * request that took the key (MISMATCH) keeps its entry, which its holder
 * may just have added.
 */
static void
test_index_forgets(void **state)
{
	(void)state;
	assert_int_equal(completer_index_forgets(IDEM_RECORDED, 1), 1);
	assert_int_equal(completer_index_forgets(IDEM_NOT_DURABLE, 1), 1);
	assert_int_equal(completer_index_forgets(IDEM_RECORDED, 0), 0);
	assert_int_equal(completer_index_forgets(IDEM_REPLAY, 0), 1);
	assert_int_equal(completer_index_forgets(IDEM_FENCED, 1), 0);
	assert_int_equal(completer_index_forgets(IDEM_FENCED, 0), 0);
	assert_int_equal(completer_index_forgets(IDEM_MISMATCH, 1), 0);
	assert_int_equal(completer_index_forgets(IDEM_ERR_REDIS, 1), 0);
}

static void
test_schedule(void **state)
{
	long steps[CONFIG_SCHEDULE_MAX];
	char err[256];
	int last;

	(void)state;
	assert_int_equal(config_schedule_parse("1,5,30,300,3600", steps, err,
	                     sizeof(err)),
	    5);
	assert_int_equal(steps[0], 1);
	assert_int_equal(steps[4], 3600);
	assert_int_equal(config_schedule_parse("60", steps, err, sizeof(err)),
	    1);
	assert_int_equal(config_schedule_parse("5,5", steps, err, sizeof(err)),
	    -1);
	assert_non_null(strstr(err, "completer_schedule_s"));
	assert_int_equal(config_schedule_parse("5,1", steps, err, sizeof(err)),
	    -1);
	assert_int_equal(config_schedule_parse("", steps, err, sizeof(err)),
	    -1);
	assert_int_equal(config_schedule_parse("1,,2", steps, err, sizeof(err)),
	    -1);
	assert_int_equal(config_schedule_parse("0,1", steps, err, sizeof(err)),
	    -1);
	assert_int_equal(config_schedule_parse("1, 2", steps, err, sizeof(err)),
	    -1);
	assert_int_equal(
	    config_schedule_parse("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17",
	        steps, err, sizeof(err)),
	    -1);
	assert_int_equal(config_schedule_parse("1,5,30,300,3600", steps, err,
	                     sizeof(err)),
	    5);
	/* created at 1000 s: the next step ahead of now */
	assert_int_equal(wire_schedule_next(steps, 5, 1000000, 1000500, &last),
	    1001000);
	assert_false(last);
	assert_int_equal(wire_schedule_next(steps, 5, 1000000, 1001000, &last),
	    1005000);
	assert_int_equal(wire_schedule_next(steps, 5, 1000000, 1400000, &last),
	    4600000);
	assert_false(last);
	/* past the last step: every last interval (3600 - 300 s) */
	assert_int_equal(wire_schedule_next(steps, 5, 1000000, 4600000, &last),
	    4600000 + 3300000);
	assert_true(last);
}

/* The native client's target from provider_url's base. */
static void
test_url_split(void **state)
{
	char host[64];
	const char *path;
	int port, tls;

	(void)state;
	assert_int_equal(wire_url_split("http://127.0.0.1:8080", host,
	                     sizeof(host), &port, &tls, &path),
	    0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 8080);
	assert_int_equal(tls, 0);
	assert_string_equal(path, "");
	assert_int_equal(wire_url_split("https://pay.example/api", host,
	                     sizeof(host), &port, &tls, &path),
	    0);
	assert_string_equal(host, "pay.example");
	assert_int_equal(port, 443);
	assert_int_equal(tls, 1);
	assert_string_equal(path, "/api");
	assert_int_equal(wire_url_split("https://[::1]:9443", host,
	                     sizeof(host), &port, &tls, &path),
	    0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 9443);
	assert_int_equal(wire_url_split("http://h:0", host, sizeof(host), &port,
	                     &tls, &path),
	    -1);
	assert_int_equal(wire_url_split("http://h:80x/", host, sizeof(host),
	                     &port, &tls, &path),
	    -1);
	assert_int_equal(wire_url_split("http://[::1", host, sizeof(host),
	                     &port, &tls, &path),
	    -1);
	assert_int_equal(wire_url_split("ftp://h", host, sizeof(host), &port,
	                     &tls, &path),
	    -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url_split),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_downstream_key),
		cmocka_unit_test(test_form_body),
		cmocka_unit_test(test_list_query),
		cmocka_unit_test(test_parse_charge),
		cmocka_unit_test(test_parse_charge_forms),
		cmocka_unit_test(test_parse_charge_string_offsets),
		cmocka_unit_test(test_parse_error),
		cmocka_unit_test(test_parse_list),
		cmocka_unit_test(test_backoff),
		cmocka_unit_test(test_schedule),
		cmocka_unit_test(test_search),
		cmocka_unit_test(test_settle_step),
		cmocka_unit_test(test_index_forgets),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
