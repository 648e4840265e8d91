/*
 * test_validate.c - the /charge body rules of docs/API.md §5 at every edge,
 * the error field names, and the canonical form, through validate_charge().
 * UTF-8 itself is tested in test_json.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "utf8.h"
#include "validate.h"

#define BASE_MEMBERS                                                           \
	"\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\""
#define BASE "{" BASE_MEMBERS "}"
#define BASE_CANON                                                             \
	"{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\","       \
	"\"customer\":null,\"description\":null,\"metadata\":{},"              \
	"\"line_items\":[]}"

/* printf into a fresh heap string (the test fails on ENOMEM). */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

static char *
fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;
	int n;

	va_start(ap, f);
	n = vasprintf(&s, f, ap);
	va_end(ap);
	assert_true(n >= 0);
	return s;
}

/* n copies of the string unit, concatenated. */
static char *
rep(const char *unit, size_t n)
{
	size_t u = strlen(unit);
	char *s = malloc(u * n + 1);

	assert_non_null(s);
	for (size_t i = 0; i < n; i++)
		memcpy(s + i * u, unit, u);
	s[u * n] = '\0';
	return s;
}

static int
has_error(const struct validation *v, const char *field)
{
	for (int i = 0; i < v->n; i++)
		if (strcmp(v->errors[i].field, field) == 0)
			return 1;
	return 0;
}

static void
dump_errors(const struct validation *v)
{
	for (int i = 0; i < v->n; i++)
		print_message("#   %s: %s\n", v->errors[i].field,
		    v->errors[i].message);
}

/* body[0..len) must be rejected with an error naming field. */
static void
expect_error_n(const char *body, size_t len, const char *field)
{
	struct charge_params p;
	struct validation v;

	memset(&p, 0, sizeof(p));
	assert_int_equal(validate_charge(body, len, &p, &v), -1);
	assert_true(v.n >= 1 && v.n <= VALIDATION_ERRORS_MAX);
	if (!has_error(&v, field)) {
		print_message("# expected an error on '%s', got:\n", field);
		dump_errors(&v);
	}
	assert_true(has_error(&v, field));
	assert_null(p.canonical);
	for (int i = 0; i < v.n; i++)
		assert_true(v.errors[i].message[0] != '\0');
}

static void
expect_error(const char *body, const char *field)
{
	expect_error_n(body, strlen(body), field);
}

/* Like expect_error, and that is the only error. */
static void
expect_only_error(const char *body, const char *field)
{
	struct charge_params p;
	struct validation v;

	memset(&p, 0, sizeof(p));
	assert_int_equal(validate_charge(body, strlen(body), &p, &v), -1);
	if (v.n != 1 || strcmp(v.errors[0].field, field) != 0) {
		print_message("# expected only '%s', got:\n", field);
		dump_errors(&v);
	}
	assert_int_equal(v.n, 1);
	assert_string_equal(v.errors[0].field, field);
}

/* The error on field carries this message. */
static void
expect_message(const char *body, const char *field, const char *msg)
{
	struct charge_params p;
	struct validation v;

	assert_int_equal(validate_charge(body, strlen(body), &p, &v), -1);
	for (int i = 0; i < v.n; i++)
		if (strcmp(v.errors[i].field, field) == 0) {
			assert_string_equal(v.errors[i].message, msg);
			return;
		}
	dump_errors(&v);
	fail_msg("no error on %s", field);
}

/* body[0..len) is valid; returns its canonical text (caller frees). */
static char *
canon_n(const char *body, size_t len)
{
	struct charge_params p;
	struct validation v;
	char *text;
	size_t n = 0;

	memset(&v, 0, sizeof(v));
	if (validate_charge(body, len, &p, &v) != 0) {
		print_message("# unexpectedly invalid: %.200s\n", body);
		dump_errors(&v);
		fail();
	}
	assert_non_null(p.canonical);
	text = p.canonical; /* the caller's now */
	n = p.canonical_len;
	p.canonical = NULL;
	assert_non_null(text);
	assert_int_equal(n, strlen(text));
	charge_params_free(&p);
	assert_null(p.canonical);
	return text;
}

static char *
canon(const char *body)
{
	return canon_n(body, strlen(body));
}

static void
expect_ok(const char *body)
{
	free(canon(body));
}

static void
expect_canon(const char *body, const char *want)
{
	char *text = canon(body);

	assert_string_equal(text, want);
	free(text);
}

static void
expect_same(const char *a, const char *b)
{
	char *x = canon(a), *y = canon(b);

	assert_string_equal(x, y);
	free(x);
	free(y);
}

static void
expect_differ(const char *a, const char *b)
{
	char *x = canon(a), *y = canon(b);

	assert_string_not_equal(x, y);
	free(x);
	free(y);
}

/* BASE with one more top-level member "name":json. */
static char *
with(const char *member_json)
{
	return fmt("{" BASE_MEMBERS ",%s}", member_json);
}

static void
expect_with_ok(const char *member_json)
{
	char *b = with(member_json);

	expect_ok(b);
	free(b);
}

static void
expect_with_error(const char *member_json, const char *field)
{
	char *b = with(member_json);

	expect_error(b, field);
	free(b);
}

/* A body whose amount is the JSON text a. */
static void
expect_amount(const char *a, int valid)
{
	char *b = fmt("{\"amount\":%s,\"currency\":\"usd\","
	              "\"source\":\"tok_visa\"}",
	    a);

	if (valid)
		expect_ok(b);
	else
		expect_only_error(b, "amount");
	free(b);
}

static void
test_minimal(void **state)
{
	struct charge_params p;
	struct validation v;

	(void)state;
	assert_int_equal(validate_charge(BASE, strlen(BASE), &p, &v), 0);
	assert_int_equal(p.amount, 1999);
	assert_string_equal(p.currency, "usd");
	assert_string_equal(p.source, "tok_visa");
	charge_params_free(&p);
	expect_canon(BASE, BASE_CANON);
}

static void
test_canonical_exact(void **state)
{
	(void)state;
	expect_canon(
	    " {\n\t\"line_items\" : [ {\"unit_amount\": 500, "
	    "\"quantity\": 2, \"description\": \"Widget \\\"XL\\\"\"}, "
	    "{\"quantity\":1,\"description\":\"caf\\u00e9\",\"unit_amount\":999}],"
	    "\"metadata\": {\"zeta\": \"1\", \"alpha\": \"2\", \"Beta\": \"3\", "
	    "\"\xc3\xa9t\xc3\xa9\": \"\\/\"},"
	    "\"description\": \"Order #42\", \"customer\": \"cus_1\","
	    "\"source\": \"tok_visa\", \"currency\": \"EUR\", \"amount\": 1999 }\r\n",
	    "{\"amount\":1999,\"currency\":\"eur\",\"source\":\"tok_visa\","
	    "\"customer\":\"cus_1\",\"description\":\"Order #42\","
	    "\"metadata\":{\"Beta\":\"3\",\"alpha\":\"2\",\"zeta\":\"1\","
	    "\"\xc3\xa9t\xc3\xa9\":\"/\"},"
	    "\"line_items\":[{\"description\":\"Widget \\\"XL\\\"\","
	    "\"quantity\":2,\"unit_amount\":500},"
	    "{\"description\":\"caf\xc3\xa9\",\"quantity\":1,"
	    "\"unit_amount\":999}]}");
	/* control characters are escaped in the canonical text */
	expect_canon("{" BASE_MEMBERS ",\"customer\":\"a\\nb\\u0001\"}",
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"customer\":\"a\\nb\\u0001\",\"description\":null,"
	    "\"metadata\":{},\"line_items\":[]}");
	expect_canon("{\"amount\":99999999,\"currency\":\"usd\","
	             "\"source\":\"tok_visa\"}",
	    "{\"amount\":99999999,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"customer\":null,\"description\":null,\"metadata\":{},"
	    "\"line_items\":[]}");
}

static void
test_amount(void **state)
{
	char *b;

	(void)state;
	expect_amount("1", 1);
	expect_amount("99999999", 1);
	expect_amount("12345", 1);
	expect_amount("0", 0);
	expect_amount("-0", 0);
	expect_amount("100000000", 0);
	expect_amount("-1", 0);
	expect_amount("-99999999", 0);
	expect_amount("10.5", 0);
	expect_amount("100.0", 0);
	expect_amount("1.", 0);
	expect_amount("1e3", 0);
	expect_amount("1E3", 0);
	expect_amount("1e+3", 0);
	expect_amount("01", 0);
	expect_amount("00", 0);
	expect_amount("\"100\"", 0);
	expect_amount("null", 0);
	expect_amount("true", 0);
	expect_amount("[1]", 0);
	expect_amount("{}", 0);
	expect_amount("1e400", 0);
	expect_amount("123456789012345678901234567890", 0);
	expect_amount("9007199254740993", 0);
	expect_only_error("{\"currency\":\"usd\",\"source\":\"tok_visa\"}",
	    "amount");
	expect_message("{\"currency\":\"usd\",\"source\":\"tok_visa\"}",
	    "amount", "is required");
	expect_message(
	    "{\"amount\":0,\"currency\":\"usd\",\"source\":\"tok_visa\"}",
	    "amount", "must be between 1 and 99999999");

	/* numbers elsewhere do not shift the integer bookkeeping */
	b = fmt("{\"x\":[1.5,2e3,0.1],\"amount\":7,\"currency\":\"usd\","
	        "\"source\":\"tok_visa\"}");
	expect_only_error(b, "x");
	free(b);
	b = fmt("{\"amount\":7,\"currency\":\"usd\",\"source\":\"tok_visa\","
	        "\"metadata\":{\"k\":\"1.5\"},\"y\":1.5}");
	expect_only_error(b, "y");
	free(b);
}

static void
test_currency(void **state)
{
	(void)state;
	expect_canon(
	    "{\"amount\":1999,\"currency\":\"USD\",\"source\":\"tok_visa\"}",
	    BASE_CANON);
	expect_canon(
	    "{\"amount\":1999,\"currency\":\"uSd\",\"source\":\"tok_visa\"}",
	    BASE_CANON);
	expect_canon(
	    "{\"amount\":1999,\"currency\":\"\\u0055SD\",\"source\":\"tok_visa\"}",
	    BASE_CANON);
	expect_only_error(
	    "{\"amount\":1999,\"currency\":\"us\",\"source\":\"tok_visa\"}",
	    "currency");
	expect_only_error(
	    "{\"amount\":1999,\"currency\":\"usdd\",\"source\":\"tok_visa\"}",
	    "currency");
	expect_only_error(
	    "{\"amount\":1999,\"currency\":\"\",\"source\":\"tok_visa\"}",
	    "currency");
	expect_only_error(
	    "{\"amount\":1999,\"currency\":\"u$d\",\"source\":\"tok_visa\"}",
	    "currency");
	expect_only_error(
	    "{\"amount\":1999,\"currency\":\"us1\",\"source\":\"tok_visa\"}",
	    "currency");
	expect_only_error(
	    "{\"amount\":1999,\"currency\":\"us \",\"source\":\"tok_visa\"}",
	    "currency");
	/* three bytes, but not three ASCII letters */
	expect_only_error(
	    "{\"amount\":1999,\"currency\":\"u\xc3\xbc\",\"source\":\"tok_visa\"}",
	    "currency");
	expect_only_error(
	    "{\"amount\":1999,\"currency\":840,\"source\":\"tok_visa\"}",
	    "currency");
	expect_only_error(
	    "{\"amount\":1999,\"currency\":null,\"source\":\"tok_visa\"}",
	    "currency");
	expect_only_error("{\"amount\":1999,\"source\":\"tok_visa\"}",
	    "currency");
}

static void
expect_source(const char *src, int valid)
{
	char *b =
	    fmt("{\"amount\":1999,\"currency\":\"usd\",\"source\":%s}", src);

	if (valid)
		expect_ok(b);
	else
		expect_only_error(b, "source");
	free(b);
}

static void
test_source(void **state)
{
	char *t, *s;

	(void)state;
	t = rep("a", SOURCE_TOKEN_MAX);
	s = fmt("\"tok_%s\"", t);
	expect_source(s, 1);
	free(s);
	s = fmt("\"tok_%sb\"", t);
	expect_source(s, 0);
	free(s);
	free(t);

	expect_source("\"tok_a\"", 1);
	expect_source("\"tok_A_z_9\"", 1);
	expect_source("\"tok__\"", 1);
	expect_source("\"tok_chargeDeclined\"", 1);
	expect_source("\"tok_\"", 0);
	expect_source("\"tok\"", 0);
	expect_source("\"\"", 0);
	expect_source("\"TOK_abc\"", 0);
	expect_source("\"tk_abc\"", 0);
	expect_source("\"card_abc\"", 0);
	expect_source("\"tok_a-b\"", 0);
	/* chains: the N-th delivery at the provider uses the N-th element */
	expect_source("\"tok_providerError|tok_visa|n42\"", 1);
	expect_source("\"tok_a|b\"", 1);
	expect_source("\"tok_a|\"", 0);
	expect_source("\"tok_a||b\"", 0);
	expect_source("\"|tok_a\"", 0);
	expect_source("\"tok_|a\"", 0);
	expect_source("\"tok_a|b c\"", 0);
	expect_source("\"tok_a b\"", 0);
	expect_source("\"tok_a.b\"", 0);
	expect_source("\"tok_\xc3\xa9\"", 0);
	expect_source("\" tok_abc\"", 0);
	expect_source("5", 0);
	expect_source("null", 0);
	expect_source("[\"tok_a\"]", 0);
	expect_only_error("{\"amount\":1999,\"currency\":\"usd\"}", "source");

	/* p->source holds the whole token, up to the maximum */
	{
		struct charge_params p;
		struct validation v;
		char *body;

		t = rep("Z", SOURCE_TOKEN_MAX);
		body = fmt("{\"amount\":1,\"currency\":\"usd\","
		           "\"source\":\"tok_%s\"}",
		    t);
		assert_int_equal(validate_charge(body, strlen(body), &p, &v),
		    0);
		assert_int_equal(strlen(p.source), 4 + SOURCE_TOKEN_MAX);
		assert_memory_equal(p.source + 4, t, SOURCE_TOKEN_MAX);
		charge_params_free(&p);
		free(body);
		free(t);
	}
}

/* A string member of exactly n bytes made of unit, ok or not. */
static void
expect_string_len(const char *name, const char *unit, size_t count, int valid)
{
	char *s = rep(unit, count);
	char *m = fmt("\"%s\":\"%s\"", name, s);

	if (valid) {
		expect_with_ok(m);
	} else {
		char *b = with(m);

		expect_only_error(b, name);
		free(b);
	}
	free(m);
	free(s);
}

static void
test_customer(void **state)
{
	(void)state;
	expect_string_len("customer", "c", CUSTOMER_MAX, 1);
	expect_string_len("customer", "c", CUSTOMER_MAX + 1, 0);
	expect_string_len("customer", "", 0, 1);
	/* lengths are bytes: 2-byte characters */
	expect_string_len("customer", "\xc3\xa9", CUSTOMER_MAX / 2,
	    1); /* 254 */
	expect_string_len("customer", "\xc3\xa9", CUSTOMER_MAX / 2 + 1,
	    0); /* 256 */
	{
		char *s = rep("\xc3\xa9", CUSTOMER_MAX / 2);
		char *m = fmt("\"customer\":\"a%s\"", s);   /* 255 bytes */
		char *m2 = fmt("\"customer\":\"ab%s\"", s); /* 256 bytes */
		char *b = with(m2);

		expect_with_ok(m);
		expect_only_error(b, "customer");
		free(b);
		free(m2);
		free(m);
		free(s);
	}
	/* escapes count as the bytes they decode to */
	{
		char *s = rep("\\u00e9", CUSTOMER_MAX / 2);
		char *m = fmt("\"customer\":\"a%s\"", s);

		expect_with_ok(m);
		free(m);
		free(s);
	}
	expect_with_error("\"customer\":42", "customer");
	expect_with_error("\"customer\":{}", "customer");
	expect_with_error("\"customer\":false", "customer");
	expect_with_ok("\"customer\":null");
}

static void
test_description(void **state)
{
	(void)state;
	expect_string_len("description", "d", DESCRIPTION_MAX, 1);
	expect_string_len("description", "d", DESCRIPTION_MAX + 1, 0);
	expect_string_len("description", "\xe2\x82\xac", 333, 1);     /* 999 */
	expect_string_len("description", "\xe2\x82\xac", 334, 0);     /* 1002 */
	expect_string_len("description", "\xf0\x9f\x92\xb3", 250, 1); /* 1000 */
	expect_string_len("description", "\xf0\x9f\x92\xb3", 251, 0); /* 1004 */
	expect_with_error("\"description\":[]", "description");
	expect_with_ok("\"description\":null");
	expect_with_ok("\"description\":\"\"");
}

/* "metadata":{ n members "k<i>":"v" } */
static char *
metadata_n(size_t n)
{
	char *s = NULL, *t;

	s = fmt("\"metadata\":{");
	for (size_t i = 0; i < n; i++) {
		t = fmt("%s%s\"k%zu\":\"v\"", s, i ? "," : "", i);
		free(s);
		s = t;
	}
	t = fmt("%s}", s);
	free(s);
	return t;
}

static void
test_metadata(void **state)
{
	char *m, *k, *val;

	(void)state;
	m = metadata_n(METADATA_KEYS_MAX);
	expect_with_ok(m);
	free(m);
	m = metadata_n(METADATA_KEYS_MAX + 1);
	expect_with_error(m, "metadata");
	free(m);
	m = metadata_n(0);
	expect_with_ok(m);
	free(m);

	k = rep("k", METADATA_KEY_MAX);
	m = fmt("\"metadata\":{\"%s\":\"v\"}", k);
	expect_with_ok(m);
	free(m);
	free(k);
	k = rep("k", METADATA_KEY_MAX + 1);
	m = fmt("\"metadata\":{\"%s\":\"v\"}", k);
	val = fmt("metadata.%s", k);
	expect_with_error(m, val);
	free(val);
	free(m);
	free(k);
	/* 40 bytes of 2-byte characters ok, 42 not */
	k = rep("\xc3\xa9", METADATA_KEY_MAX / 2);
	m = fmt("\"metadata\":{\"%s\":\"v\"}", k);
	expect_with_ok(m);
	free(m);
	free(k);
	k = rep("\xc3\xa9", METADATA_KEY_MAX / 2 + 1);
	m = fmt("\"metadata\":{\"%s\":\"v\"}", k);
	val = fmt("metadata.%s", k);
	expect_with_error(m, val);
	free(val);
	free(m);
	free(k);

	val = rep("v", METADATA_VALUE_MAX);
	m = fmt("\"metadata\":{\"order\":\"%s\"}", val);
	expect_with_ok(m);
	free(m);
	free(val);
	val = rep("v", METADATA_VALUE_MAX + 1);
	m = fmt("\"metadata\":{\"order\":\"%s\"}", val);
	expect_with_error(m, "metadata.order");
	free(m);
	free(val);
	val = rep("\xc3\xa9", METADATA_VALUE_MAX / 2 + 1);
	m = fmt("\"metadata\":{\"order\":\"%s\"}", val);
	expect_with_error(m, "metadata.order");
	free(m);
	free(val);

	expect_with_error("\"metadata\":{\"n\":1}", "metadata.n");
	expect_with_error("\"metadata\":{\"n\":null}", "metadata.n");
	expect_with_error("\"metadata\":{\"n\":true}", "metadata.n");
	expect_with_error("\"metadata\":{\"n\":{}}", "metadata.n");
	expect_with_error("\"metadata\":{\"n\":[\"x\"]}", "metadata.n");
	expect_with_error("\"metadata\":{\"\":\"v\"}", "metadata");
	expect_with_error("\"metadata\":[]", "metadata");
	expect_with_error("\"metadata\":\"k=v\"", "metadata");
	expect_with_error("\"metadata\":1", "metadata");
	expect_with_ok("\"metadata\":null");
	expect_with_ok("\"metadata\":{\"\xc3\xa9\":\"\xe2\x82\xac\"}");
	/* keys are case-sensitive: these are two keys */
	expect_with_ok("\"metadata\":{\"k\":\"1\",\"K\":\"2\"}");
}

/* "line_items":[ n items of {1 x unit} ] with amount = n * unit. */
static char *
line_items_body(size_t n, long long unit)
{
	FILE *f;
	char *s = NULL;
	size_t len = 0;

	f = open_memstream(&s, &len);
	assert_non_null(f);
	fprintf(f,
	    "{\"amount\":%lld,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[",
	    (long long)n * unit);
	for (size_t i = 0; i < n; i++)
		fprintf(f,
		    "%s{\"description\":\"item %zu\",\"quantity\":1,"
		    "\"unit_amount\":%lld}",
		    i ? "," : "", i, unit);
	fprintf(f, "]}");
	assert_int_equal(fclose(f), 0);
	return s;
}

/* One line item; amount given separately. */
static char *
item_body(long long amount, const char *item)
{
	return fmt(
	    "{\"amount\":%lld,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"line_items\":[%s]}",
	    amount, item);
}

static void
expect_item(long long amount, const char *item, const char *field)
{
	char *b = item_body(amount, item);

	if (field == NULL)
		expect_ok(b);
	else
		expect_only_error(b, field);
	free(b);
}

static void
test_line_items(void **state)
{
	char *b, *d, *item;

	(void)state;
	b = line_items_body(LINE_ITEMS_MAX, 3);
	expect_ok(b);
	free(b);
	b = line_items_body(LINE_ITEMS_MAX + 1, 3);
	expect_error(b, "line_items");
	free(b);
	b = line_items_body(1, 1999);
	expect_ok(b);
	free(b);

	/* quantity edges */
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":1,\"unit_amount\":10}", NULL);
	expect_item(100000,
	    "{\"description\":\"a\",\"quantity\":10000,\"unit_amount\":10}",
	    NULL);
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":0,\"unit_amount\":10}",
	    "line_items[0].quantity");
	expect_item(100010,
	    "{\"description\":\"a\",\"quantity\":10001,\"unit_amount\":10}",
	    "line_items[0].quantity");
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":-1,\"unit_amount\":10}",
	    "line_items[0].quantity");
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":1.0,\"unit_amount\":10}",
	    "line_items[0].quantity");
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":\"1\",\"unit_amount\":10}",
	    "line_items[0].quantity");

	/* unit_amount edges: 0 is allowed in an item, not as the only total */
	expect_item(5,
	    "{\"description\":\"a\",\"quantity\":1,\"unit_amount\":5},"
	    "{\"description\":\"free\",\"quantity\":3,\"unit_amount\":0}",
	    NULL);
	expect_item(99999999,
	    "{\"description\":\"a\",\"quantity\":1,"
	    "\"unit_amount\":99999999}",
	    NULL);
	expect_item(99999999,
	    "{\"description\":\"a\",\"quantity\":1,"
	    "\"unit_amount\":100000000}",
	    "line_items[0].unit_amount");
	expect_item(1,
	    "{\"description\":\"a\",\"quantity\":1,\"unit_amount\":-1}",
	    "line_items[0].unit_amount");
	expect_item(1,
	    "{\"description\":\"a\",\"quantity\":1,\"unit_amount\":1e0}",
	    "line_items[0].unit_amount");
	/* the sum is checked (and does not overflow) even when it exceeds max */
	expect_item(99999999,
	    "{\"description\":\"a\",\"quantity\":10000,"
	    "\"unit_amount\":99999999}",
	    "amount");

	/* sum mismatch names amount */
	expect_item(11,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5}",
	    "amount");
	expect_item(9,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5}",
	    "amount");
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5}", NULL);
	b = item_body(11,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5}");
	expect_message(b, "amount",
	    "must equal the sum of line_items quantity "
	    "* unit_amount (10)");
	free(b);

	/* missing and unknown members, wrong item types */
	expect_item(10, "{\"quantity\":2,\"unit_amount\":5}",
	    "line_items[0].description");
	expect_item(10, "{\"description\":\"a\",\"unit_amount\":5}",
	    "line_items[0].quantity");
	expect_item(10, "{\"description\":\"a\",\"quantity\":2}",
	    "line_items[0].unit_amount");
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5,"
	    "\"sku\":\"x\"}",
	    "line_items[0].sku");
	b = item_body(10,
	    "{\"description\":\"a\",\"quantity\":2,"
	    "\"Unit_amount\":5}");
	expect_error(b, "line_items[0].unit_amount");
	expect_error(b, "line_items[0].Unit_amount");
	free(b);
	expect_item(15,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5},"
	    "{\"description\":\"b\",\"quantity\":1,\"unit_amount\":5},"
	    "{\"description\":\"c\",\"quantity\":1,\"unit_amount\":5},"
	    "{\"description\":\"d\",\"unit_amount\":5}",
	    "line_items[3].quantity");
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5},"
	    "[]",
	    "line_items[1]");
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5},"
	    "null",
	    "line_items[1]");
	expect_item(10,
	    "{\"description\":null,\"quantity\":2,\"unit_amount\":5}",
	    "line_items[0].description");
	expect_item(10, "{\"description\":7,\"quantity\":2,\"unit_amount\":5}",
	    "line_items[0].description");

	/* description length */
	d = rep("x", LINE_ITEM_DESC_MAX);
	item = fmt("{\"description\":\"%s\",\"quantity\":1,\"unit_amount\":10}",
	    d);
	expect_item(10, item, NULL);
	free(item);
	free(d);
	d = rep("x", LINE_ITEM_DESC_MAX + 1);
	item = fmt("{\"description\":\"%s\",\"quantity\":1,\"unit_amount\":10}",
	    d);
	expect_item(10, item, "line_items[0].description");
	free(item);
	free(d);

	expect_with_error("\"line_items\":{}", "line_items");
	expect_with_error("\"line_items\":\"a\"", "line_items");
	expect_with_ok("\"line_items\":null");
	/* an empty list is the same as no list */
	expect_with_ok("\"line_items\":[]");
	expect_same(BASE, "{" BASE_MEMBERS ",\"line_items\":[]}");
}

static void
test_duplicates(void **state)
{
	(void)state;
	expect_message("{\"amount\":1999,\"amount\":1999,\"currency\":\"usd\","
	               "\"source\":\"tok_visa\"}",
	    "amount", "duplicate member");
	expect_only_error("{\"amount\":1999,\"currency\":\"usd\","
	                  "\"source\":\"tok_visa\",\"source\":\"tok_other\"}",
	    "source");
	/* a duplicate with a different value is still a duplicate */
	expect_error(
	    "{\"amount\":1,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"amount\":2}",
	    "amount");
	expect_with_error("\"metadata\":{\"k\":\"1\",\"j\":\"2\",\"k\":\"1\"}",
	    "metadata.k");
	expect_with_error("\"customer\":\"a\",\"customer\":null", "customer");
	expect_item(10,
	    "{\"description\":\"a\",\"quantity\":2,\"quantity\":2,"
	    "\"unit_amount\":5}",
	    "line_items[0].quantity");
	expect_item(15,
	    "{\"description\":\"a\",\"quantity\":2,\"unit_amount\":5},"
	    "{\"description\":\"b\",\"description\":\"b\",\"quantity\":1,"
	    "\"unit_amount\":5}",
	    "line_items[1].description");
	/* three times: reported once */
	{
		struct charge_params p;
		struct validation v;
		const char *b = "{\"amount\":1,\"amount\":1,\"amount\":1,"
		                "\"currency\":\"usd\",\"source\":\"tok_visa\"}";

		assert_int_equal(validate_charge(b, strlen(b), &p, &v), -1);
		assert_int_equal(v.n, 1);
		assert_string_equal(v.errors[0].field, "amount");
	}
	/* duplicates inside unknown members are found too */
	expect_with_error("\"x\":{\"a\":{\"b\":1,\"b\":2}}", "x.a.b");
}

static void
test_unknown(void **state)
{
	(void)state;
	expect_message("{" BASE_MEMBERS ",\"foo\":1}", "foo", "unknown field");
	expect_only_error("{" BASE_MEMBERS ",\"capture\":true}", "capture");
	/* member names are case-sensitive */
	expect_error(
	    "{\"Amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\"}",
	    "Amount");
	expect_error(
	    "{\"Amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\"}",
	    "amount");
	expect_only_error("{" BASE_MEMBERS ",\"\":1}", "");
}

static void
test_invalid_utf8(void **state)
{
	static const char *const bad[] = {
		"\xc0\xaf",
		"\x80",
		"\xed\xa0\x80",
		"\xe2\x82",
		"\xf4\x90\x80\x80",
		"\xff",
		"\xc3",
	};
	char *m, *b;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m = fmt("\"customer\":\"ab%scd\"", bad[i]);
		b = with(m);
		expect_only_error(b, "customer");
		free(b);
		free(m);
		m = fmt("\"metadata\":{\"k\":\"%s\"}", bad[i]);
		expect_with_error(m, "metadata.k");
		free(m);
		m = fmt(
		    "\"line_items\":[{\"description\":\"%s\",\"quantity\":1,"
		    "\"unit_amount\":1999}]",
		    bad[i]);
		expect_with_error(m, "line_items[0].description");
		free(m);
		/* in a member name: the field shows '?' and stays UTF-8 */
		m = fmt("\"metadata\":{\"k%s\":\"v\"}", bad[i]);
		b = with(m);
		{
			struct charge_params p;
			struct validation v;

			assert_int_equal(validate_charge(b, strlen(b), &p, &v),
			    -1);
			assert_true(v.n >= 1);
			for (int e = 0; e < v.n; e++)
				assert_int_equal(utf8_valid(v.errors[e].field,
				                     strlen(v.errors[e].field)),
				    1);
			assert_memory_equal(v.errors[0].field, "metadata.k?",
			    11);
		}
		free(b);
		free(m);
		/* outside any string */
		b = fmt("{" BASE_MEMBERS ",%s\"x\":1}", bad[i]);
		expect_only_error(b, "body");
		free(b);
	}
	/* valid multi-byte text everywhere is fine */
	expect_with_ok(
	    "\"description\":\"\xf0\x9f\x92\xb3 \xe2\x82\xac \xc3\xa9 "
	    "\xed\x9f\xbf \xef\xbf\xbf \xf4\x8f\xbf\xbf\"");
	expect_message("{" BASE_MEMBERS ",\"customer\":\"\xc0\xaf\"}",
	    "customer", "value is not valid UTF-8");
	/* escaped surrogate pairs are fine, lone ones are not JSON */
	expect_with_ok("\"description\":\"\\ud83d\\udcb3\"");
	expect_with_error("\"description\":\"\\ud83d\"", "body");
}

static void
test_control_and_nul(void **state)
{
	static const char nul_in_string[] =
	    "{" BASE_MEMBERS ",\"customer\":\"a\0b\"}";
	static const char nul_in_key[] =
	    "{" BASE_MEMBERS ",\"metadata\":{\"a\0b\":\"v\"}}";

	(void)state;
	expect_only_error("{" BASE_MEMBERS ",\"customer\":\"a\\u0000b\"}",
	    "customer");
	expect_message("{" BASE_MEMBERS ",\"customer\":\"a\\u0000b\"}",
	    "customer", "value must not contain \\u0000");
	expect_with_error("\"metadata\":{\"a\\u0000b\":\"v\"}", "metadata.a");
	expect_with_error("\"metadata\":{\"k\":\"\\u0000\"}", "metadata.k");
	expect_error(
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\\u0000x\"}",
	    "source");
	/* an escaped backslash followed by the text u0000 is fine */
	expect_with_ok("\"customer\":\"a\\\\u0000b\"");
	expect_with_ok("\"customer\":\"\\u0001\\u001f\\u0100\"");
	/* raw control characters are not JSON */
	expect_only_error("{" BASE_MEMBERS ",\"customer\":\"a\tb\"}",
	    "customer");
	expect_only_error("{" BASE_MEMBERS ",\"customer\":\"a\nb\"}",
	    "customer");
	expect_only_error("{" BASE_MEMBERS ",\"customer\":\"a\x01"
	                  "b\"}",
	    "customer");
	expect_error_n(nul_in_string, sizeof(nul_in_string) - 1, "customer");
	expect_error_n(nul_in_key, sizeof(nul_in_key) - 1, "metadata.a");
	/* DEL is a legal JSON string character */
	expect_with_ok("\"customer\":\"a\x7f"
	               "b\"");
}

static void
test_whitespace_and_garbage(void **state)
{
	static const char nul_after[] = BASE "\0";
	static const char nul_then_doc[] = BASE "\0{}";
	static const char nul_inside[] =
	    "{\"amount\":1999,\0\"currency\":\"usd\","
	    "\"source\":\"tok_visa\"}";

	(void)state;
	expect_ok(" \t\r\n" BASE " \t\r\n");
	expect_ok(
	    "{ \"amount\" : 1999 ,\n\"currency\":\"usd\",\"source\":\"tok_visa\" }");
	expect_only_error(BASE "x", "body");
	expect_only_error(BASE "{}", "body");
	expect_only_error(BASE ",", "body");
	expect_only_error(BASE "}", "body");
	expect_only_error(BASE " 1", "body");
	expect_message(BASE "xy", "body",
	    "has unexpected data after the JSON "
	    "value at byte 52");
	expect_error_n(nul_after, sizeof(nul_after) - 1, "body");
	expect_error_n(nul_then_doc, sizeof(nul_then_doc) - 1, "body");
	expect_error_n(nul_inside, sizeof(nul_inside) - 1, "body");
	/* only the four JSON whitespace characters are whitespace */
	expect_only_error("{\x01\"amount\":1999,\"currency\":\"usd\","
	                  "\"source\":\"tok_visa\"}",
	    "body");
	expect_only_error("\x0b" BASE, "body");
	expect_only_error(BASE "\x0c", "body");
	/* no byte order mark */
	expect_only_error("\xef\xbb\xbf" BASE, "body");
	/* the body is exactly len bytes: a prefix is malformed */
	expect_error_n(BASE, strlen(BASE) - 1, "body");
	{
		char *t = canon_n(BASE "garbage", strlen(BASE));

		assert_string_equal(t, BASE_CANON);
		free(t);
	}
}

static void
test_not_object(void **state)
{
	(void)state;
	expect_error_n("", 0, "body");
	expect_error_n(NULL, 0, "body");
	expect_error_n(BASE, 0, "body");
	expect_message("[]", "body", "must be a JSON object");
	expect_only_error("[" BASE "]", "body");
	expect_only_error("1", "body");
	expect_only_error("\"x\"", "body");
	expect_only_error("\"\"", "body");
	expect_only_error("null", "body");
	expect_only_error("true", "body");
	expect_only_error("   ", "body");
	expect_only_error("{", "body");
	expect_only_error("{\"amount\":}", "body");
	expect_only_error("{\"amount\":1999,}", "body");
	expect_only_error("{'amount':1999}", "body");
	expect_only_error("{amount:1999}", "body");
	expect_only_error("{\"amount\":1999 \"currency\":\"usd\"}", "body");
	expect_only_error("{\"a\":\"\\x41\"}", "body");
	expect_only_error("{\"a\":\"unterminated}", "body");
	expect_only_error("{\"amount\":+1}", "body");
	expect_only_error("{\"amount\":.5}", "body");
	expect_only_error("{\"amount\":NaN}", "body");
	expect_only_error("{\"amount\":True}", "body");
	expect_message("{\"amount\":}", "body",
	    "is not valid JSON (error at byte 10)");
}

static void
test_depth(void **state)
{
	char *open, *close, *m;

	(void)state;
	/* the body object is level 1: a member may nest JSON_DEPTH_MAX - 1 */
	open = rep("[", JSON_DEPTH_MAX - 1);
	close = rep("]", JSON_DEPTH_MAX - 1);
	m = fmt("\"x\":%s%s", open, close);
	expect_with_error(m, "x");
	free(m);
	free(open);
	free(close);
	open = rep("[", JSON_DEPTH_MAX);
	close = rep("]", JSON_DEPTH_MAX);
	m = fmt("\"x\":%s%s", open, close);
	expect_with_error(m, "body");
	{
		char *b = with(m);

		expect_only_error(b, "body");
		free(b);
	}
	free(m);
	free(open);
	free(close);
	/* metadata nesting: {"metadata":{"k":{"k":...}}} */
	open = rep("{\"k\":", JSON_DEPTH_MAX);
	close = rep("}", JSON_DEPTH_MAX);
	m = fmt("\"metadata\":%s\"v\"%s", open, close);
	expect_with_error(m, "body");
	free(m);
	free(open);
	free(close);
	/* far beyond, unbalanced, in strings: brackets in strings do not count */
	open = rep("[", 100000);
	expect_only_error(open, "body");
	free(open);
	open = rep("[", 100);
	m = fmt("\"customer\":\"%s\"", open);
	expect_with_ok(m);
	free(m);
	free(open);
}

static void
test_error_fields_and_cap(void **state)
{
	struct charge_params p;
	struct validation v;
	char *b, *s, *t;
	const char *body =
	    "{\"amount\":0,\"currency\":\"dollars\","
	    "\"source\":\"card\",\"customer\":1,\"description\":2,"
	    "\"metadata\":3,\"line_items\":4,\"extra\":5}";

	(void)state;
	assert_int_equal(validate_charge(body, strlen(body), &p, &v), -1);
	assert_int_equal(v.n, 8);
	assert_string_equal(v.errors[0].field, "extra");
	assert_string_equal(v.errors[1].field, "amount");
	assert_string_equal(v.errors[2].field, "currency");
	assert_string_equal(v.errors[3].field, "source");
	assert_string_equal(v.errors[4].field, "customer");
	assert_string_equal(v.errors[5].field, "description");
	assert_string_equal(v.errors[6].field, "metadata");
	assert_string_equal(v.errors[7].field, "line_items");

	/* at most VALIDATION_ERRORS_MAX errors are listed */
	s = fmt("%s", "");
	for (int i = 0; i < 3 * VALIDATION_ERRORS_MAX; i++) {
		t = fmt("%s,\"x%d\":%d", s, i, i);
		free(s);
		s = t;
	}
	b = fmt("{" BASE_MEMBERS "%s}", s);
	assert_int_equal(validate_charge(b, strlen(b), &p, &v), -1);
	assert_int_equal(v.n, VALIDATION_ERRORS_MAX);
	assert_string_equal(v.errors[0].field, "x0");
	assert_string_equal(v.errors[VALIDATION_ERRORS_MAX - 1].field, "x15");
	free(b);
	free(s);
	b = line_items_body(LINE_ITEMS_MAX, 0);
	assert_int_equal(validate_charge(b, strlen(b), &p, &v), -1);
	assert_true(v.n >= 1 && v.n <= VALIDATION_ERRORS_MAX);
	free(b);

	/* a long unknown name is cut to fit the field, on a UTF-8 boundary */
	s = rep("\xc3\xa9", 200);
	b = fmt("{" BASE_MEMBERS ",\"%s\":1}", s);
	assert_int_equal(validate_charge(b, strlen(b), &p, &v), -1);
	assert_int_equal(v.n, 1);
	assert_true(strlen(v.errors[0].field) < sizeof(v.errors[0].field));
	assert_true(strlen(v.errors[0].field) >= sizeof(v.errors[0].field) - 3);
	assert_int_equal(utf8_valid(v.errors[0].field,
	                     strlen(v.errors[0].field)),
	    1);
	free(b);
	free(s);
}

static void
test_failure_leaves_params(void **state)
{
	struct charge_params p;
	struct validation v;

	(void)state;
	memset(&p, 0x5a, sizeof(p));
	p.canonical = NULL;
	p.amount = 42;
	assert_int_equal(validate_charge("{\"amount\":7}", 12, &p, &v), -1);
	assert_int_equal(p.amount, 42);
	assert_null(p.canonical);
	assert_int_equal((unsigned char)p.currency[0], 0x5a);
	charge_params_free(NULL);
	charge_params_free(&p);
	charge_params_free(&p);
	assert_null(p.canonical);
	assert_int_equal(p.canonical_len, 0);
}

static void
test_canonical_equality(void **state)
{
	(void)state;
	/* whitespace and member order */
	expect_same(
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"customer\":\"c\",\"description\":\"d\","
	    "\"metadata\":{\"a\":\"1\",\"b\":\"2\"},"
	    "\"line_items\":[{\"description\":\"x\",\"quantity\":1,\"unit_amount\":1999}]}",
	    "\n{ \"line_items\" : [ { \"unit_amount\" : 1999 , \"quantity\" : 1 ,"
	    " \"description\" : \"x\" } ] ,\r\n \"metadata\" : { \"b\" : \"2\" , "
	    "\"a\" : \"1\" } , \"description\":\"d\", \"customer\":\"c\","
	    " \"source\":\"tok_visa\", \"currency\":\"USD\", \"amount\":1999 }\n");
	/* escapes that decode to the same text */
	expect_same("{" BASE_MEMBERS ",\"customer\":\"caf\xc3\xa9/\"}",
	    "{" BASE_MEMBERS ",\"customer\":\"caf\\u00E9\\/\"}");
	/* null is absent */
	expect_same(BASE,
	    "{" BASE_MEMBERS ",\"customer\":null,\"description\":null,"
	    "\"metadata\":null,\"line_items\":null}");
	expect_same(BASE, "{" BASE_MEMBERS ",\"metadata\":{}}");
	/* absent customer differs from an empty one */
	expect_differ(BASE, "{" BASE_MEMBERS ",\"customer\":\"\"}");
	/* any parameter change changes it */
	expect_differ(BASE,
	    "{\"amount\":2000,\"currency\":\"usd\",\"source\":\"tok_visa\"}");
	expect_differ(BASE,
	    "{\"amount\":1999,\"currency\":\"eur\",\"source\":\"tok_visa\"}");
	expect_differ(BASE,
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_Visa\"}");
	expect_differ(BASE, "{" BASE_MEMBERS ",\"customer\":\"c\"}");
	expect_differ(BASE, "{" BASE_MEMBERS ",\"description\":\"c\"}");
	expect_differ("{" BASE_MEMBERS ",\"customer\":\"c\"}",
	    "{" BASE_MEMBERS ",\"description\":\"c\"}");
	expect_differ("{" BASE_MEMBERS ",\"metadata\":{\"a\":\"1\"}}",
	    "{" BASE_MEMBERS ",\"metadata\":{\"a\":\"2\"}}");
	expect_differ("{" BASE_MEMBERS ",\"metadata\":{\"a\":\"1\"}}",
	    "{" BASE_MEMBERS ",\"metadata\":{\"A\":\"1\"}}");
	expect_differ("{" BASE_MEMBERS ",\"metadata\":{\"a\":\"1\"}}",
	    "{" BASE_MEMBERS ",\"metadata\":{\"a\":\"1\",\"b\":\"\"}}");
	expect_differ(
	    "{\"amount\":10,\"currency\":\"usd\",\"source\":\"tok_visa\",\"line_items\":"
	    "[{\"description\":\"x\",\"quantity\":2,\"unit_amount\":5}]}",
	    "{\"amount\":10,\"currency\":\"usd\",\"source\":\"tok_visa\",\"line_items\":"
	    "[{\"description\":\"x\",\"quantity\":1,\"unit_amount\":10}]}");
	expect_differ(
	    "{\"amount\":10,\"currency\":\"usd\",\"source\":\"tok_visa\",\"line_items\":"
	    "[{\"description\":\"x\",\"quantity\":1,\"unit_amount\":5},"
	    "{\"description\":\"y\",\"quantity\":1,\"unit_amount\":5}]}",
	    "{\"amount\":10,\"currency\":\"usd\",\"source\":\"tok_visa\",\"line_items\":"
	    "[{\"description\":\"y\",\"quantity\":1,\"unit_amount\":5},"
	    "{\"description\":\"x\",\"quantity\":1,\"unit_amount\":5}]}");
	expect_differ(
	    "{\"amount\":10,\"currency\":\"usd\",\"source\":\"tok_visa\",\"line_items\":"
	    "[{\"description\":\"x\",\"quantity\":1,\"unit_amount\":10}]}",
	    "{\"amount\":10,\"currency\":\"usd\",\"source\":\"tok_visa\",\"line_items\":"
	    "[{\"description\":\"X\",\"quantity\":1,\"unit_amount\":10}]}");
	/* metadata keys are sorted bytewise (upper case before lower case) */
	expect_canon("{" BASE_MEMBERS ",\"metadata\":{\"b\":\"\",\"a\":\"\","
	             "\"B\":\"\",\"_\":\"\",\"0\":\"\",\"aa\":\"\"}}",
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"customer\":null,\"description\":null,"
	    "\"metadata\":{\"0\":\"\",\"B\":\"\",\"_\":\"\",\"a\":\"\",\"aa\":\"\","
	    "\"b\":\"\"},\"line_items\":[]}");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_minimal),
		cmocka_unit_test(test_canonical_exact),
		cmocka_unit_test(test_amount),
		cmocka_unit_test(test_currency),
		cmocka_unit_test(test_source),
		cmocka_unit_test(test_customer),
		cmocka_unit_test(test_description),
		cmocka_unit_test(test_metadata),
		cmocka_unit_test(test_line_items),
		cmocka_unit_test(test_duplicates),
		cmocka_unit_test(test_unknown),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_control_and_nul),
		cmocka_unit_test(test_whitespace_and_garbage),
		cmocka_unit_test(test_not_object),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_error_fields_and_cap),
		cmocka_unit_test(test_failure_leaves_params),
		cmocka_unit_test(test_canonical_equality),
	};

	return cmocka_run_group_tests_name("validate", tests, NULL, NULL);
}
