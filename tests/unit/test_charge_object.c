/*
 * test_charge_object.c - the request fingerprint (equal for equal parameters,
 * different for any change), the per-parameter digests that name what
 * changed in a 422, and the 201 charge object.
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

#include "charge.h"
#include "digest.h"
#include "validate.h"

#define BASE "\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\""
#define CHARGE_ID "ch_0123456789abcdef01234567"

static void
params_from(const char *body, struct charge_params *p)
{
	struct validation v;

	memset(&v, 0, sizeof(v));
	memset(p, 0, sizeof(*p));
	if (validate_charge(body, strlen(body), p, &v) != 0)
		fail_msg("validate_charge rejected %s: %s: %s", body,
		    v.errors[0].field, v.errors[0].message);
}

/* Fingerprint of body for principal into out[65]. */
static void
fp(const char *body, const char *principal, char out[65])
{
	struct charge_params p;
	size_t n = 0;
	char *canon;

	params_from(body, &p);
	memset(out, 'X', 65);
	canon = p.canonical;
	n = p.canonical_len;
	assert_non_null(canon);
	assert_int_equal(charge_fingerprint(canon, n, principal, out), 0);
	charge_params_free(&p);
}

static void
assert_same(const char *a, const char *b)
{
	char fa[65], fb[65];

	fp(a, "demo", fa);
	fp(b, "demo", fb);
	if (strcmp(fa, fb) != 0)
		fail_msg("fingerprints differ:\n  %s\n  %s", a, b);
}

static void
assert_differ(const char *a, const char *b)
{
	char fa[65], fb[65];

	fp(a, "demo", fa);
	fp(b, "demo", fb);
	if (strcmp(fa, fb) == 0)
		fail_msg("fingerprints equal:\n  %s\n  %s", a, b);
}

static void
test_fingerprint_format(void **state)
{
	char f[65];
	size_t i;

	(void)state;
	fp("{" BASE "}", "demo", f);
	assert_int_equal(strlen(f), 64);
	for (i = 0; i < 64; i++)
		assert_true((f[i] >= '0' && f[i] <= '9') ||
		    (f[i] >= 'a' && f[i] <= 'f'));
}

/* The documented construction: SHA-256 of "POST /charge\n" principal "\n" canon. */
static void
test_fingerprint_construction(void **state)
{
	static const char body[] =
	    "{" BASE ",\"metadata\":{\"b\":\"2\",\"a\":\"1\"}}";
	struct charge_params p;
	char f[65], want[65], *canon, *msg;
	size_t len = 0, n;

	(void)state;
	params_from(body, &p);
	canon = p.canonical;
	len = p.canonical_len;
	assert_non_null(canon);
	assert_int_equal(charge_fingerprint(canon, len, "demo", f), 0);
	assert_string_equal(canon,
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"customer\":null,\"description\":null,"
	    "\"metadata\":{\"a\":\"1\",\"b\":\"2\"},\"line_items\":[]}");
	n = strlen("POST /charge\ndemo\n") + len;
	msg = malloc(n + 1);
	assert_non_null(msg);
	(void)snprintf(msg, n + 1, "POST /charge\ndemo\n%s", canon);
	assert_int_equal(digest_sha256_hex(msg, n, want), 0);
	assert_string_equal(f, want);
	free(msg);
	charge_params_free(&p);
}

static void
test_fingerprint_equal(void **state)
{
	(void)state;
	/* whitespace */
	assert_same("{" BASE "}",
	    " {\n\t\"amount\" : 1999 ,\r\n \"currency\":\"usd\",  "
	    "\"source\"\t:\t\"tok_visa\"\n}\n");
	/* member order */
	assert_same("{" BASE "}",
	    "{\"source\":\"tok_visa\",\"currency\":\"usd\",\"amount\":1999}");
	/* currency is stored lower case */
	assert_same("{" BASE "}",
	    "{\"amount\":1999,\"currency\":\"USD\",\"source\":\"tok_visa\"}");
	assert_same("{" BASE "}",
	    "{\"amount\":1999,\"currency\":\"uSd\",\"source\":\"tok_visa\"}");
	/* null means absent */
	assert_same("{" BASE "}", "{" BASE ",\"customer\":null}");
	assert_same("{" BASE "}", "{" BASE ",\"description\":null}");
	assert_same("{" BASE "}", "{" BASE ",\"metadata\":null}");
	assert_same("{" BASE "}", "{" BASE ",\"line_items\":null}");
	/* empty metadata / line_items are the defaults */
	assert_same("{" BASE "}", "{" BASE ",\"metadata\":{}}");
	assert_same("{" BASE "}", "{" BASE ",\"line_items\":[]}");
	/* metadata key order */
	assert_same("{" BASE
	            ",\"metadata\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"3\"}}",
	    "{\"metadata\":{\"c\":\"3\",\"a\":\"1\",\"b\":\"2\"}," BASE "}");
	/* string escapes that name the same characters */
	assert_same("{" BASE ",\"description\":\"caf\xc3\xa9 /\"}",
	    "{" BASE ",\"description\":\"caf\\u00e9 \\/\"}");
	assert_same("{" BASE "}",
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_\\u0076isa\"}");
	/* line item member order and whitespace */
	assert_same(
	    "{\"amount\":2000,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"w\",\"quantity\":2,"
	    "\"unit_amount\":1000}]}",
	    "{\"line_items\":[ {\"unit_amount\":1000, \"quantity\":2,"
	    "\"description\":\"w\"} ],\"source\":\"tok_visa\","
	    "\"currency\":\"USD\",\"amount\":2000}");
}

#define LI(q1, u1, q2, u2)                                                     \
	"\"line_items\":[{\"description\":\"a\",\"quantity\":" #q1             \
	",\"unit_amount\":" #u1 "},{\"description\":\"b\",\"quantity\":" #q2   \
	",\"unit_amount\":" #u2 "}]"

static void
test_fingerprint_differs(void **state)
{
	(void)state;
	assert_differ("{" BASE "}",
	    "{\"amount\":2000,\"currency\":\"usd\",\"source\":\"tok_visa\"}");
	assert_differ("{" BASE "}",
	    "{\"amount\":1999,\"currency\":\"eur\",\"source\":\"tok_visa\"}");
	assert_differ("{" BASE "}",
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_mastercard\"}");
	assert_differ("{" BASE "}",
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_Visa\"}");
	assert_differ("{" BASE "}", "{" BASE ",\"customer\":\"cus_1\"}");
	assert_differ("{" BASE "}", "{" BASE ",\"customer\":\"\"}");
	assert_differ("{" BASE ",\"customer\":\"cus_1\"}",
	    "{" BASE ",\"customer\":\"cus_2\"}");
	assert_differ("{" BASE "}", "{" BASE ",\"description\":\"\"}");
	assert_differ("{" BASE ",\"description\":\"a\"}",
	    "{" BASE ",\"description\":\"b\"}");
	/* customer and description are not interchangeable */
	assert_differ("{" BASE ",\"customer\":\"x\"}",
	    "{" BASE ",\"description\":\"x\"}");
	assert_differ("{" BASE ",\"metadata\":{\"k\":\"1\"}}",
	    "{" BASE ",\"metadata\":{\"k\":\"2\"}}");
	assert_differ("{" BASE ",\"metadata\":{\"k\":\"1\"}}",
	    "{" BASE ",\"metadata\":{\"j\":\"1\"}}");
	assert_differ("{" BASE ",\"metadata\":{\"k\":\"1\"}}",
	    "{" BASE ",\"metadata\":{\"k\":\"1\",\"l\":\"\"}}");
	assert_differ("{" BASE ",\"metadata\":{\"a\":\"b\"}}",
	    "{" BASE ",\"metadata\":{\"b\":\"a\"}}");
	assert_differ("{" BASE "}", "{" BASE ",\"metadata\":{\"k\":\"\"}}");
	/* line items: same total, different quantity / unit_amount / order */
	assert_differ(
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\"," LI(
	        2, 1000, 1, 1000) "}",
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\"," LI(
	        1, 1000, 2, 1000) "}");
	assert_differ(
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\"," LI(
	        1, 1000, 1, 2000) "}",
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\"," LI(
	        2, 500, 1, 2000) "}");
	assert_differ(
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\"," LI(
	        1, 1000, 1, 2000) "}",
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\"," LI(
	        1, 2000, 1, 1000) "}");
	assert_differ(
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"a\",\"quantity\":1,"
	    "\"unit_amount\":1000},{\"description\":\"b\",\"quantity\":1,"
	    "\"unit_amount\":2000}]}",
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"b\",\"quantity\":1,"
	    "\"unit_amount\":2000},{\"description\":\"a\",\"quantity\":1,"
	    "\"unit_amount\":1000}]}");
	assert_differ(
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"a\",\"quantity\":3,"
	    "\"unit_amount\":1000}]}",
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"A\",\"quantity\":3,"
	    "\"unit_amount\":1000}]}");
	/* a line item split in two is a different order */
	assert_differ(
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"a\",\"quantity\":3,"
	    "\"unit_amount\":1000}]}",
	    "{\"amount\":3000,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"a\",\"quantity\":1,"
	    "\"unit_amount\":1000},{\"description\":\"a\",\"quantity\":2,"
	    "\"unit_amount\":1000}]}");
}

static void
test_fingerprint_principal(void **state)
{
	char a[65], b[65], c[65];

	(void)state;
	fp("{" BASE "}", "demo", a);
	fp("{" BASE "}", "acme", b);
	fp("{" BASE "}", "demo2", c);
	assert_string_not_equal(a, b);
	assert_string_not_equal(a, c);
	fp("{" BASE "}", "demo", b);
	assert_string_equal(a, b);
}

/* Renders body's parameters as a charge object. */
static char *
render(const char *body, const char *id, long long created, const char *key,
    size_t keylen, size_t *len)
{
	struct charge_params p;
	size_t n = 0;
	char *canon, *out;

	params_from(body, &p);
	canon = p.canonical;
	n = p.canonical_len;
	assert_non_null(canon);
	*len = 0;
	out = charge_object_render(canon, n, id, created, key, keylen, len);
	charge_params_free(&p);
	return out;
}

static void
test_object_exact_minimal(void **state)
{
	size_t len;
	char *out;

	(void)state;
	out = render("{\"source\":\"tok_visa\",\"currency\":\"USD\","
	             "\"amount\":1999}",
	    CHARGE_ID, 1795311140, "k1", 2, &len);
	assert_non_null(out);
	assert_string_equal(out,
	    "{\"id\":\"" CHARGE_ID "\",\"object\":\"charge\","
	    "\"status\":\"succeeded\",\"amount\":1999,\"currency\":\"usd\","
	    "\"source\":\"tok_visa\",\"customer\":null,\"description\":null,"
	    "\"metadata\":{},\"line_items\":[],\"created\":1795311140,"
	    "\"idempotency_key\":\"k1\"}");
	assert_int_equal(len, strlen(out));
	free(out);
}

static void
test_object_exact_full(void **state)
{
	size_t len;
	char *out;

	(void)state;
	out = render(
	    "{\"line_items\":[{\"unit_amount\":99999999,"
	    "\"quantity\":1,\"description\":\"Big\"},{\"quantity\":10000,"
	    "\"description\":\"W\\u00e9\",\"unit_amount\":0}],"
	    "\"metadata\":{\"z\":\"last\",\"a\":\"first\",\"m\":\"\"},"
	    "\"description\":\"Order \\\"42\\\"\",\"customer\":\"cus_9\","
	    "\"amount\":99999999,\"currency\":\"EUR\",\"source\":\"tok_x_1\"}",
	    CHARGE_ID, 4102444800LL, "order-42", 8, &len);
	assert_non_null(out);
	assert_string_equal(out,
	    "{\"id\":\"" CHARGE_ID "\",\"object\":\"charge\","
	    "\"status\":\"succeeded\",\"amount\":99999999,\"currency\":\"eur\","
	    "\"source\":\"tok_x_1\",\"customer\":\"cus_9\","
	    "\"description\":\"Order \\\"42\\\"\","
	    "\"metadata\":{\"a\":\"first\",\"m\":\"\",\"z\":\"last\"},"
	    "\"line_items\":[{\"description\":\"Big\",\"quantity\":1,"
	    "\"unit_amount\":99999999},{\"description\":\"W\xc3\xa9\","
	    "\"quantity\":10000,\"unit_amount\":0}],"
	    "\"created\":4102444800,\"idempotency_key\":\"order-42\"}");
	assert_int_equal(len, strlen(out));
	free(out);
}

static void
test_object_integers(void **state)
{
	size_t len;
	char *out;
	cJSON *o, *item;

	(void)state;
	out = render("{" BASE "}", CHARGE_ID, 1795311140, "k", 1, &len);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"created\":1795311140,"));
	assert_non_null(strstr(out, "\"amount\":1999,"));
	assert_null(strstr(out, "e+")); /* not 1.79e+09 */
	assert_null(strstr(out, ".0"));
	o = cJSON_Parse(out);
	assert_non_null(o);
	item = cJSON_GetObjectItemCaseSensitive(o, "created");
	assert_true(cJSON_IsNumber(item));
	assert_true(item->valuedouble == 1795311140.0);
	cJSON_Delete(o);
	free(out);
	/* 0 and a millisecond-sized value stay integers */
	out = render("{" BASE "}", CHARGE_ID, 0, "k", 1, &len);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"created\":0,"));
	free(out);
	out = render("{" BASE "}", CHARGE_ID, 1795311140123LL, "k", 1, &len);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"created\":1795311140123,"));
	free(out);
	/* exact beyond a double's 53 bits: printed as text, not via a double */
	out =
	    render("{" BASE "}", CHARGE_ID, 10000000000000001LL, "k", 1, &len);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"created\":10000000000000001,"));
	free(out);
}

static void
test_object_key_escaping(void **state)
{
	static const char key[] = "a\"b\\c/d";
	size_t len;
	char *out;
	cJSON *o, *item;

	(void)state;
	out = render("{" BASE "}", CHARGE_ID, 1, key, sizeof(key) - 1, &len);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"idempotency_key\":\"a\\\"b\\\\c/d\"}"));
	o = cJSON_Parse(out);
	assert_non_null(o);
	item = cJSON_GetObjectItemCaseSensitive(o, "idempotency_key");
	assert_true(cJSON_IsString(item));
	assert_string_equal(item->valuestring, key);
	cJSON_Delete(o);
	free(out);
	/* keylen bounds the key (it need not be terminated) */
	out = render("{" BASE "}", CHARGE_ID, 1, "abcdef", 3, &len);
	assert_non_null(out);
	assert_non_null(strstr(out, "\"idempotency_key\":\"abc\"}"));
	free(out);
}

static void
test_object_key_length(void **state)
{
	char key[IDEM_KEY_MAX + 2];
	size_t len;
	char *out;

	(void)state;
	memset(key, 'k', sizeof(key));
	out = render("{" BASE "}", CHARGE_ID, 1, key, IDEM_KEY_MAX, &len);
	assert_non_null(out);
	assert_int_equal(len, strlen(out));
	free(out);
	out = render("{" BASE "}", CHARGE_ID, 1, key, IDEM_KEY_MAX + 1, &len);
	assert_null(out);
}

static void
test_object_echoes_large_order(void **state)
{
	enum { NITEMS = 1000 };
	char *body, *out;
	size_t cap = 256 + NITEMS * 96, n, len;
	cJSON *o, *items, *item, *meta;
	int i;

	(void)state;
	body = malloc(cap);
	assert_non_null(body);
	n = (size_t)snprintf(body, cap,
	    "{\"amount\":%d,\"currency\":\"usd\","
	    "\"source\":\"tok_visa\",\"metadata\":{",
	    NITEMS * 3);
	for (i = 0; i < 50; i++)
		n += (size_t)snprintf(body + n, cap - n, "%s\"k%02d\":\"v%d\"",
		    i ? "," : "", 49 - i, i);
	n += (size_t)snprintf(body + n, cap - n, "},\"line_items\":[");
	for (i = 0; i < NITEMS; i++)
		n += (size_t)snprintf(body + n, cap - n,
		    "%s{\"description\":\"item %d\",\"quantity\":1,"
		    "\"unit_amount\":3}",
		    i ? "," : "", i);
	n += (size_t)snprintf(body + n, cap - n, "]}");
	assert_true(n < cap);
	out = render(body, CHARGE_ID, 1795311140, "big", 3, &len);
	assert_non_null(out);
	assert_true(len > 16384);
	o = cJSON_Parse(out);
	assert_non_null(o);
	items = cJSON_GetObjectItemCaseSensitive(o, "line_items");
	assert_int_equal(cJSON_GetArraySize(items), NITEMS);
	item = cJSON_GetArrayItem(items, NITEMS - 1);
	assert_string_equal(
	    cJSON_GetObjectItemCaseSensitive(item, "description")->valuestring,
	    "item 999");
	meta = cJSON_GetObjectItemCaseSensitive(o, "metadata");
	assert_int_equal(cJSON_GetArraySize(meta), 50);
	/* sorted: k00 (= v49) first */
	assert_string_equal(meta->child->string, "k00");
	assert_string_equal(meta->child->valuestring, "v49");
	cJSON_Delete(o);
	free(out);
	free(body);
}

static int
setup(void **state)
{
	(void)state;
	return digest_init();
}

/* The digests of body's canonical form into out. */
static void
digests(const char *body, char out[CHARGE_PARAMS_HEX_LEN + 1])
{
	struct charge_params p;
	size_t n = 0;
	char *canon;

	params_from(body, &p);
	canon = p.canonical;
	n = p.canonical_len;
	assert_non_null(canon);
	memset(out, 'X', CHARGE_PARAMS_HEX_LEN + 1);
	assert_int_equal(charge_param_digests(canon, n, out), 0);
	charge_params_free(&p);
}

/* The names whose digests differ between a and b, comma-separated. */
static void
assert_diff(const char *a, const char *b, const char *want)
{
	char da[CHARGE_PARAMS_HEX_LEN + 1], db[CHARGE_PARAMS_HEX_LEN + 1];
	char got[256] = "";
	int differ[CHARGE_PARAM_COUNT], i, n;
	size_t len = 0;

	digests(a, da);
	digests(b, db);
	n = charge_params_diff(da, db, differ);
	for (i = 0; i < CHARGE_PARAM_COUNT; i++)
		if (differ[i])
			len += (size_t)snprintf(got + len, sizeof(got) - len,
			    "%s%s", len > 0 ? "," : "", charge_param_name(i));
	if (strcmp(got, want) != 0)
		fail_msg("%s vs %s: differ in [%s], want [%s]", a, b, got,
		    want);
	/* the count returned is the number of names */
	for (i = 0, len = want[0] != '\0'; want[i] != '\0'; i++)
		len += want[i] == ',';
	assert_int_equal(n, (int)len);
}

/* Each digest is 32-bit FNV-1a of "name":value, big-endian hex. */
static void
test_param_digests_construction(void **state)
{
	static const char *const members[CHARGE_PARAM_COUNT] = {
		"\"amount\":1999",
		"\"currency\":\"usd\"",
		"\"source\":\"tok_visa\"",
		"\"customer\":null",
		"\"description\":\"a, \\\"b\\\" {c}\"",
		"\"metadata\":{\"a\":\"1,2\",\"b\":\"}\"}",
		"\"line_items\":[{\"description\":\"x\",\"quantity\":1,"
		"\"unit_amount\":1999}]",
	};
	char got[CHARGE_PARAMS_HEX_LEN + 1], hex[9];
	uint32_t h;
	size_t j;
	int i;

	(void)state;
	digests(
	    "{" BASE ",\"description\":\"a, \\\"b\\\" {c}\","
	    "\"metadata\":{\"b\":\"}\",\"a\":\"1,2\"},\"line_items\":"
	    "[{\"description\":\"x\",\"quantity\":1,\"unit_amount\":1999}]}",
	    got);
	assert_int_equal(strlen(got), CHARGE_PARAMS_HEX_LEN);
	for (i = 0; i < CHARGE_PARAM_COUNT; i++) {
		/* FNV-1a, written out here independently of charge.c */
		h = 0x811c9dc5u;
		for (j = 0; members[i][j] != '\0'; j++)
			h = (h ^ (unsigned char)members[i][j]) * 0x01000193u;
		(void)snprintf(hex, sizeof(hex), "%08x", (unsigned)h);
		if (memcmp(got + i * CHARGE_PARAM_DIGEST_HEX, hex,
		        CHARGE_PARAM_DIGEST_HEX) != 0)
			fail_msg("digest of %s: got %.8s, want %s", members[i],
			    got + i * CHARGE_PARAM_DIGEST_HEX, hex);
	}
	assert_string_equal(charge_param_name(0), "amount");
	assert_string_equal(charge_param_name(6), "line_items");
	assert_null(charge_param_name(7));
	assert_null(charge_param_name(-1));
}

static void
test_param_digests_name_changes(void **state)
{
	(void)state;
	/* formatting, member order, null vs absent: nothing differs */
	assert_diff("{" BASE "}",
	    "{\"source\":\"tok_visa\", \"amount\":1999,"
	    "\"currency\":\"USD\",\"customer\":null,\"metadata\":{}}",
	    "");
	assert_diff("{" BASE "}",
	    "{\"amount\":2999,\"currency\":\"usd\","
	    "\"source\":\"tok_visa\"}",
	    "amount");
	assert_diff("{" BASE "}",
	    "{\"amount\":2999,\"currency\":\"eur\","
	    "\"source\":\"tok_mastercard\",\"customer\":\"cus_1\"}",
	    "amount,currency,source,customer");
	assert_diff("{" BASE ",\"description\":\"a\"}",
	    "{" BASE ",\"description\":\"b\"}", "description");
	assert_diff("{" BASE ",\"metadata\":{\"k\":\"1\"}}",
	    "{" BASE ",\"metadata\":{\"k\":\"2\"}}", "metadata");
	assert_diff("{" BASE "}", "{" BASE ",\"metadata\":{\"k\":\"\"}}",
	    "metadata");
	/* a value that looks like a member boundary stays inside its member */
	assert_diff("{" BASE ",\"metadata\":{\"k\":\"a\\\",\\\"b\"}}",
	    "{" BASE ",\"metadata\":{\"k\":\"a\\\",\\\"c\"}}", "metadata");
	assert_diff(
	    "{\"amount\":3,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"x\",\"quantity\":1,"
	    "\"unit_amount\":3}]}",
	    "{\"amount\":3,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[{\"description\":\"y\",\"quantity\":1,"
	    "\"unit_amount\":3}]}",
	    "line_items");
}

static void
test_param_digests_refuse(void **state)
{
	static const char *const bad[] = {
		"",
		"{}",
		"{\"amount\":1}",
		/* out of order */
		"{\"currency\":\"usd\",\"amount\":1,\"source\":\"tok_a\","
		"\"customer\":null,\"description\":null,\"metadata\":{},"
		"\"line_items\":[]}",
		/* unterminated string */
		"{\"amount\":1,\"currency\":\"usd,\"source\":\"tok_a\","
		"\"customer\":null,\"description\":null,\"metadata\":{},"
		"\"line_items\":[]}",
		/* trailing bytes, an empty value */
		"{\"amount\":1,\"currency\":\"usd\",\"source\":\"tok_a\","
		"\"customer\":null,\"description\":null,\"metadata\":{},"
		"\"line_items\":[]}x",
		"{\"amount\":,\"currency\":\"usd\",\"source\":\"tok_a\","
		"\"customer\":null,\"description\":null,\"metadata\":{},"
		"\"line_items\":[]}",
	};
	char out[CHARGE_PARAMS_HEX_LEN + 1];
	int differ[CHARGE_PARAM_COUNT];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (charge_param_digests(bad[i], strlen(bad[i]), out) != -1)
			fail_msg("accepted %s", bad[i]);
	digests("{" BASE "}", out);
	/* stored digests of another layout (or none): -1, nothing named */
	assert_int_equal(charge_params_diff("", out, differ), -1);
	assert_int_equal(charge_params_diff("abc", out, differ), -1);
	assert_int_equal(
	    charge_params_diff(
	        "0000000000000000000000000000000000000000000000000000000X", out,
	        differ),
	    -1);
	assert_int_equal(charge_params_diff(out, out, differ), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fingerprint_format),
		cmocka_unit_test(test_fingerprint_construction),
		cmocka_unit_test(test_fingerprint_equal),
		cmocka_unit_test(test_fingerprint_differs),
		cmocka_unit_test(test_fingerprint_principal),
		cmocka_unit_test(test_object_exact_minimal),
		cmocka_unit_test(test_object_exact_full),
		cmocka_unit_test(test_object_integers),
		cmocka_unit_test(test_object_key_escaping),
		cmocka_unit_test(test_object_key_length),
		cmocka_unit_test(test_object_echoes_large_order),
		cmocka_unit_test(test_param_digests_construction),
		cmocka_unit_test(test_param_digests_name_changes),
		cmocka_unit_test(test_param_digests_refuse),
	};

	return cmocka_run_group_tests_name("charge_object", tests, setup, NULL);
}
