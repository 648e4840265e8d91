/*
 * test_canon.c - the canonical text, byte for byte what cJSON 1.7.15 prints
 * for the canonical object built member by member (the form stored
 * fingerprints were computed over): member order, absent members, sorted
 * metadata keys, string escapes, numbers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "json.h"
#include "schema.h"

#define BASE "\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\""

static int
name_cmp(const void *a, const void *b)
{
	const cJSON *const *x = a, *const *y = b;

	return strcmp((*x)->string, (*y)->string);
}

/* The canonical object as a cJSON tree, printed by cJSON (caller frees). */
static char *
cjson_canonical(const struct charge_fields *f)
{
	cJSON *o = cJSON_CreateObject(), *m, *a, *item;
	const cJSON *kv[METADATA_KEYS_MAX], *c;
	size_t n = 0;
	char *s;

	assert_non_null(o);
	cJSON_AddNumberToObject(o, "amount", (double)f->amount);
	cJSON_AddStringToObject(o, "currency", f->currency);
	cJSON_AddStringToObject(o, "source", f->source);
	if (f->customer != NULL)
		cJSON_AddStringToObject(o, "customer",
		    f->customer->valuestring);
	else
		cJSON_AddNullToObject(o, "customer");
	if (f->description != NULL)
		cJSON_AddStringToObject(o, "description",
		    f->description->valuestring);
	else
		cJSON_AddNullToObject(o, "description");
	m = cJSON_AddObjectToObject(o, "metadata");
	for (c = f->metadata != NULL ? f->metadata->child : NULL; c;
	     c = c->next)
		kv[n++] = c;
	qsort(kv, n, sizeof(kv[0]), name_cmp);
	for (size_t i = 0; i < n; i++)
		cJSON_AddStringToObject(m, kv[i]->string, kv[i]->valuestring);
	a = cJSON_AddArrayToObject(o, "line_items");
	for (c = f->line_items != NULL ? f->line_items->child : NULL; c;
	     c = c->next) {
		item = cJSON_CreateObject();
		cJSON_AddItemToArray(a, item);
		cJSON_AddStringToObject(item, "description",
		    cJSON_GetObjectItemCaseSensitive(c, "description")
		        ->valuestring);
		cJSON_AddNumberToObject(item, "quantity",
		    cJSON_GetObjectItemCaseSensitive(c, "quantity")
		        ->valuedouble);
		cJSON_AddNumberToObject(item, "unit_amount",
		    cJSON_GetObjectItemCaseSensitive(c, "unit_amount")
		        ->valuedouble);
	}
	s = cJSON_PrintUnformatted(o);
	assert_non_null(s);
	cJSON_Delete(o);
	return s;
}

/* canon_text() of body b, checked against cJSON's print (caller frees). */
static char *
canon(const char *b)
{
	struct json_doc doc;
	struct charge_fields f;
	struct validation v;
	size_t n = 0;
	char *text, *want;

	v.n = 0;
	assert_int_equal(json_parse(b, strlen(b), &doc), JSON_OK);
	schema_check(doc.root, &f, &v);
	assert_int_equal(v.n, 0);
	text = canon_text(&f, &n);
	assert_non_null(text);
	assert_int_equal(n, strlen(text));
	want = cjson_canonical(&f);
	assert_string_equal(text, want);
	cJSON_free(want);
	json_doc_free(&doc);
	return text;
}

static void
expect_canon(const char *b, const char *want)
{
	char *text = canon(b);

	assert_string_equal(text, want);
	free(text);
}

static void
test_members(void **state)
{
	(void)state;
	expect_canon("{" BASE "}",
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"customer\":null,\"description\":null,\"metadata\":{},"
	    "\"line_items\":[]}");
	expect_canon(
	    "{\"line_items\":[{\"unit_amount\":0,\"quantity\":10000,"
	    "\"description\":\"\"},{\"quantity\":1,\"description\":\"b\","
	    "\"unit_amount\":99999999}],\"description\":\"\",\"customer\":\"c\","
	    "\"source\":\"tok_x\",\"currency\":\"USD\",\"amount\":99999999}",
	    "{\"amount\":99999999,\"currency\":\"usd\",\"source\":\"tok_x\","
	    "\"customer\":\"c\",\"description\":\"\",\"metadata\":{},"
	    "\"line_items\":[{\"description\":\"\",\"quantity\":10000,"
	    "\"unit_amount\":0},{\"description\":\"b\",\"quantity\":1,"
	    "\"unit_amount\":99999999}]}");
}

/*
 * A unit_amount written -0 is the value 0 (docs/API.md §7.1: formatting
 * must not matter, values must): it prints 0, and the body fingerprints as
 * the one written 0.
 */
static void
test_negative_zero(void **state)
{
	(void)state;
	expect_canon("{\"amount\":5,\"currency\":\"usd\",\"source\":\"tok_x\","
	             "\"line_items\":[{\"description\":\"a\",\"quantity\":1,"
	             "\"unit_amount\":5},{\"description\":\"b\",\"quantity\":1,"
	             "\"unit_amount\":-0}]}",
	    "{\"amount\":5,\"currency\":\"usd\",\"source\":\"tok_x\","
	    "\"customer\":null,\"description\":null,\"metadata\":{},"
	    "\"line_items\":[{\"description\":\"a\",\"quantity\":1,"
	    "\"unit_amount\":5},{\"description\":\"b\",\"quantity\":1,"
	    "\"unit_amount\":0}]}");
	expect_canon("{\"amount\":5,\"currency\":\"usd\",\"source\":\"tok_x\","
	             "\"line_items\":[{\"description\":\"a\",\"quantity\":1,"
	             "\"unit_amount\":5},{\"description\":\"b\",\"quantity\":1,"
	             "\"unit_amount\":0}]}",
	    "{\"amount\":5,\"currency\":\"usd\",\"source\":\"tok_x\","
	    "\"customer\":null,\"description\":null,\"metadata\":{},"
	    "\"line_items\":[{\"description\":\"a\",\"quantity\":1,"
	    "\"unit_amount\":5},{\"description\":\"b\",\"quantity\":1,"
	    "\"unit_amount\":0}]}");
}

static void
test_metadata_sorted(void **state)
{
	(void)state;
	expect_canon(
	    "{" BASE ",\"metadata\":{\"\xc3\xa9\":\"1\",\"b\":\"2\","
	    "\"B\":\"3\",\"a\":\"4\",\"aa\":\"5\",\"a0\":\"6\",\"_\":\"7\"}}",
	    "{\"amount\":1999,\"currency\":\"usd\",\"source\":\"tok_visa\","
	    "\"customer\":null,\"description\":null,\"metadata\":{\"B\":\"3\","
	    "\"_\":\"7\",\"a\":\"4\",\"a0\":\"6\",\"aa\":\"5\",\"b\":\"2\","
	    "\"\xc3\xa9\":\"1\"},\"line_items\":[]}");
}

/* Every escape JSON has, and every byte from 0x01 to 0x7f, in each place. */
static void
test_escapes(void **state)
{
	char esc[7 * 128], *b;
	size_t n = 0;

	(void)state;
	for (int c = 1; c < 0x80; c++)
		n += (size_t)snprintf(esc + n, sizeof(esc) - n, "\\u%04x", c);
	b = malloc(8 * sizeof(esc));
	assert_non_null(b);
	snprintf(b, 8 * sizeof(esc),
	    "{" BASE ",\"customer\":\"%s\","
	    "\"description\":\"\\b\\f\\n\\r\\t\\\"\\\\\\/\\u00e9\xe2\x82\xac\","
	    "\"metadata\":{\"%.120s\":\"%s\"},\"line_items\":[{"
	    "\"description\":\"%.198s\",\"quantity\":1,\"unit_amount\":1999}]}",
	    esc, esc, esc, esc);
	free(canon(b));
	free(b);
}

static void
test_large(void **state)
{
	char *b = malloc(64 * 1024), *text;
	size_t n = 0;

	(void)state;
	assert_non_null(b);
	n += (size_t)sprintf(b + n,
	    "{\"amount\":%d,\"currency\":\"usd\","
	    "\"source\":\"tok_visa\",\"metadata\":{",
	    3 * LINE_ITEMS_MAX);
	for (int i = METADATA_KEYS_MAX; i > 0; i--)
		n += (size_t)sprintf(b + n, "%s\"k%d\":\"v%d\"",
		    i < METADATA_KEYS_MAX ? "," : "", i, i);
	n += (size_t)sprintf(b + n, "},\"line_items\":[");
	for (int i = 0; i < LINE_ITEMS_MAX; i++)
		n += (size_t)sprintf(b + n,
		    "%s{\"description\":\"item %d\","
		    "\"quantity\":3,\"unit_amount\":1}",
		    i ? "," : "", i);
	sprintf(b + n, "]}");
	text = canon(b);
	assert_true(strlen(text) > 40000);
	free(text);
	free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_members),
		cmocka_unit_test(test_negative_zero),
		cmocka_unit_test(test_metadata_sorted),
		cmocka_unit_test(test_escapes),
		cmocka_unit_test(test_large),
	};

	return cmocka_run_group_tests_name("canon", tests, NULL, NULL);
}
