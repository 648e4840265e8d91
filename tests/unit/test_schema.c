/*
 * test_schema.c - the /charge schema over a parsed tree: which members it
 * takes (the first of equal names), the order of its errors, the fields they
 * name (built only for an error), numbers that are not plain integers, and
 * the error list itself.
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
#include "schema.h"
#include "utf8.h"

#define BASE "\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\""

/* Parses b and checks it; the errors as "field: message" lines. */
static void
check(const char *b, struct json_doc *doc, struct charge_fields *f,
    struct validation *v, char *lines, size_t size)
{
	size_t n = 0;

	assert_int_equal(json_parse(b, strlen(b), doc), JSON_OK);
	assert_true(cJSON_IsObject(doc->root));
	v->n = 0;
	schema_check(doc->root, f, v);
	lines[0] = '\0';
	for (int i = 0; i < v->n && n < size; i++)
		n += (size_t)snprintf(lines + n, size - n, "%s: %s\n",
		    v->errors[i].field, v->errors[i].message);
}

static void
expect_errors(const char *b, const char *want)
{
	struct json_doc doc;
	struct charge_fields f;
	struct validation v;
	char got[4096];

	check(b, &doc, &f, &v, got, sizeof(got));
	assert_string_equal(got, want);
	json_doc_free(&doc);
}

static void
test_fields(void **state)
{
	struct json_doc doc;
	struct charge_fields f;
	struct validation v;
	char got[1024];

	(void)state;
	check(
	    "{\"line_items\":[{\"description\":\"d\",\"quantity\":2,"
	    "\"unit_amount\":5}],\"metadata\":{\"k\":\"v\"},\"description\":null,"
	    "\"customer\":\"cus_1\",\"source\":\"tok_A_1\",\"currency\":\"EuR\","
	    "\"amount\":10}",
	    &doc, &f, &v, got, sizeof(got));
	assert_string_equal(got, "");
	assert_int_equal(f.amount, 10);
	assert_string_equal(f.currency, "eur");
	assert_string_equal(f.source, "tok_A_1");
	assert_string_equal(f.customer->valuestring, "cus_1");
	assert_null(f.description);
	assert_string_equal(f.metadata->child->string, "k");
	assert_int_equal(cJSON_GetArraySize(f.line_items), 1);
	json_doc_free(&doc);

	check("{" BASE ",\"metadata\":null,\"line_items\":null}", &doc, &f, &v,
	    got, sizeof(got));
	assert_string_equal(got, "");
	assert_null(f.customer);
	assert_null(f.metadata);
	assert_null(f.line_items);
	json_doc_free(&doc);

	/* the first of equal names is the member (json.c reports the rest) */
	check("{" BASE ",\"amount\":\"x\",\"customer\":\"a\",\"customer\":7}",
	    &doc, &f, &v, got, sizeof(got));
	assert_string_equal(got, "");
	assert_int_equal(f.amount, 1999);
	assert_string_equal(f.customer->valuestring, "a");
	json_doc_free(&doc);
}

static void
test_numbers(void **state)
{
	(void)state;
	expect_errors(
	    "{\"amount\":1.0,\"currency\":\"usd\",\"source\":\"tok_a\"}",
	    "amount: must be an integer, without fraction, exponent or "
	    "leading zero\n");
	expect_errors(
	    "{\"amount\":\"1\",\"currency\":\"usd\",\"source\":\"tok_a\"}",
	    "amount: must be an integer\n");
	expect_errors(
	    "{\"amount\":-0,\"currency\":\"usd\",\"source\":\"tok_a\"}",
	    "amount: must be between 1 and 99999999\n");
	expect_errors("{\"amount\":12345678901234567890,\"currency\":\"usd\","
	              "\"source\":\"tok_a\"}",
	    "amount: must be between 1 and 99999999\n");
	expect_errors("{\"amount\":1,\"currency\":\"usd\",\"source\":\"tok_a\","
	              "\"line_items\":[{\"description\":\"d\",\"quantity\":01,"
	              "\"unit_amount\":1e0}]}",
	    "line_items[0].quantity: must be an integer, without fraction, "
	    "exponent or leading zero\n"
	    "line_items[0].unit_amount: must be an integer, without fraction, "
	    "exponent or leading zero\n");
}

static void
test_order_and_fields(void **state)
{
	(void)state;
	expect_errors(
	    "{\"z\":1,\"amount\":0,\"currency\":\"dollars\",\"a\":2,"
	    "\"customer\":1,\"description\":[],\"metadata\":{\"\":1,\"k\":\"v\","
	    "\""
	    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
	    "\":\"v\"},"
	    "\"line_items\":[{\"description\":\"d\",\"sku\":1,\"quantity\":2,"
	    "\"x\":2},7,{\"quantity\":0,\"unit_amount\":100000000,"
	    "\"description\":\"d\"}]}",
	    "z: unknown field\n"
	    "a: unknown field\n"
	    "amount: must be between 1 and 99999999\n"
	    "currency: must be a three-letter currency code\n"
	    "source: is required\n"
	    "customer: must be a string\n"
	    "description: must be a string\n"
	    "metadata: keys must not be empty\n"
	    "metadata.: must be a string\n"
	    "metadata.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk: key must be "
	    "at most 40 bytes\n"
	    "line_items[0].sku: unknown field\n"
	    "line_items[0].x: unknown field\n"
	    "line_items[0].unit_amount: is required\n"
	    "line_items[1]: must be an object\n"
	    "line_items[2].quantity: must be between 1 and 10000\n"
	    "line_items[2].unit_amount: must be between 0 and 99999999\n");
	/* the sum is reported on amount, and only when every item is valid */
	expect_errors("{" BASE ",\"line_items\":[{\"description\":\"d\","
	              "\"quantity\":3,\"unit_amount\":5}]}",
	    "amount: must equal the sum of line_items quantity * unit_amount "
	    "(15)\n");
	expect_errors("{" BASE ",\"line_items\":[{\"description\":\"d\","
	              "\"quantity\":3,\"unit_amount\":5},{}]}",
	    "line_items[1].description: is required\n"
	    "line_items[1].quantity: is required\n"
	    "line_items[1].unit_amount: is required\n");
	expect_errors("{" BASE ",\"line_items\":[]}", "");
}

static void
test_error_list(void **state)
{
	struct validation v;
	char *field;

	(void)state;
	v.n = 0;
	for (int i = 0; i < VALIDATION_ERRORS_MAX + 5; i++)
		schema_error(&v, "f", "error %d", i);
	assert_int_equal(v.n, VALIDATION_ERRORS_MAX);
	assert_string_equal(v.errors[VALIDATION_ERRORS_MAX - 1].message,
	    "error 15");
	/* a field too long is cut on a UTF-8 boundary */
	field = malloc(201);
	assert_non_null(field);
	for (int i = 0; i < 100; i++)
		memcpy(field + 2 * i, "\xc3\xa9", 2);
	field[200] = '\0';
	v.n = 0;
	schema_error(&v, field, "%s", "m");
	assert_int_equal(strlen(v.errors[0].field), 94);
	assert_int_equal(utf8_valid(v.errors[0].field, 94), 1);
	free(field);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fields),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_order_and_fields),
		cmocka_unit_test(test_error_list),
	};

	return cmocka_run_group_tests_name("schema", tests, NULL, NULL);
}
