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

#define ESC_LEN (7 * 128) /* every byte from 0x01 to 0x7f as \u00xx */

/* esc = every byte from 0x01 to 0x7f escaped; a body's room (free it). */
static char *
escaped_body(char *esc, size_t size)
{
	size_t n = 0;
	char *b;

	for (int c = 1; c < 0x80; c++)
		n += (size_t)snprintf(esc + n, size - n, "\\u%04x", c);
	b = malloc(8 * size);
	assert_non_null(b);
	return b;
}

/* Every escape JSON has, and every byte from 0x01 to 0x7f, in each place. */
static void
test_escapes(void **state)
{
	char esc[ESC_LEN], *b;

	(void)state;
	b = escaped_body(esc, sizeof(esc));
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

/* The decoded bytes of a member canon_string_member() found (caller frees). */
static char *
member(const char *text, size_t len, const char *name)
{
	const char *s;
	size_t n, i = 0, o = 0;
	char *d;
	int c;

	if (canon_string_member(text, len, name, &s, &n) != 1)
		return NULL;
	d = malloc(n + 1);
	assert_non_null(d);
	while (i < n) {
		assert_true((c = canon_string_byte(s, n, &i)) >= 0);
		d[o++] = (char)c;
	}
	d[o] = '\0';
	return d;
}

/*
 * canon_string_member() and canon_string_byte() read back what
 * canon_text() wrote: every escape and byte the schema lets through, in
 * the description and the customer; a description named inside metadata
 * or line_items is not the member; a cut text is read within its bounds.
 */
static void
test_string_member(void **state)
{
	char esc[ESC_LEN], *b, *text, *got, *cut;
	struct json_doc doc;
	struct charge_fields f;
	struct validation v;
	size_t n = 0, len;
	const char *s;

	(void)state;
	b = escaped_body(esc, sizeof(esc));
	snprintf(b, 8 * sizeof(esc),
	    "{" BASE ",\"customer\":\"%.300s\","
	    "\"description\":\"%s\\\"x\xc3\xa9\xe2\x82\xac\","
	    "\"metadata\":{\"description\":\"no\"}}",
	    esc, esc);
	v.n = 0;
	assert_int_equal(json_parse(b, strlen(b), &doc), JSON_OK);
	schema_check(doc.root, &f, &v);
	assert_int_equal(v.n, 0);
	text = canon_text(&f, &len);
	assert_non_null(text);
	got = member(text, len, "description");
	assert_non_null(got);
	assert_string_equal(got, f.description->valuestring);
	free(got);
	got = member(text, len, "customer");
	assert_string_equal(got, f.customer->valuestring);
	free(got);
	got = member(text, len, "currency");
	assert_string_equal(got, "usd");
	free(got);
	/* a number is not a string member */
	assert_int_equal(canon_string_member(text, len, "amount", &s, &n), -1);
	assert_int_equal(canon_string_member(text, len, "nothing", &s, &n), 0);
	/* every cut of the text: read within it (ASan), never a wrong value */
	for (size_t k = 0; k < len; k++) {
		int r;

		cut = malloc(k + 1);
		assert_non_null(cut);
		memcpy(cut, text, k);
		r = canon_string_member(cut, k, "description", &s, &n);
		if (r == 1)
			assert_memory_equal(s,
			    strstr(text, ",\"description\":\"") + 16, n);
		else
			assert_int_equal(r, -1);
		free(cut);
	}
	free(text);
	json_doc_free(&doc);
	free(b);

	/* null, and a "description" only inside metadata and line_items */
	text = canon("{" BASE ",\"metadata\":{\"description\":\"m\"},"
	             "\"line_items\":[{\"description\":\"l\",\"quantity\":1,"
	             "\"unit_amount\":1999}]}");
	assert_int_equal(canon_string_member(text, strlen(text), "description",
	                     &s, &n),
	    0);
	free(text);
	/* texts canon_text() does not write */
	assert_int_equal(canon_string_member("", 0, "description", &s, &n), -1);
	assert_int_equal(canon_string_member("[]", 2, "description", &s, &n),
	    -1);
	assert_int_equal(canon_string_member("{}", 2, "description", &s, &n),
	    0);
	assert_int_equal(canon_string_member("{\"description\" :\"a\"}", 19,
	                     "description", &s, &n),
	    -1);
	assert_int_equal(canon_string_member("{\"description\":{}}", 18,
	                     "description", &s, &n),
	    -1);
	/* escapes put_string() does not write */
	{
		static const char *const bad[] = { "\\u00e9", "\\u0120", "\\/",
			"\\x", "\\", "\\u00" };
		size_t i;

		for (size_t j = 0; j < sizeof(bad) / sizeof(bad[0]); j++) {
			i = 0;
			assert_int_equal(canon_string_byte(bad[j],
			                     strlen(bad[j]), &i),
			    -1);
		}
		i = 0;
		assert_int_equal(canon_string_byte("\\u001f", 6, &i), 0x1f);
		assert_int_equal(i, 6);
	}
}

/* canon_value_end(): where each kind of value ends, and texts cut inside. */
static void
test_value_end(void **state)
{
	static const struct {
		const char *text;
		long end; /* offset of the end, -1: NULL */
	} cases[] = {
		{ "1999,", 4 },
		{ "1999", 4 },
		{ "null}", 4 },
		{ "\"a,b}\\\"\",", 8 },
		{ "{\"a\":[1,{\"b\":\"]}\"}]},", 20 },
		{ "[],", 2 },
		{ "\"open", -1 },
		{ "\"esc\\\"", -1 },
		{ "{\"a\":[1,2]", -1 },
		{ "[[]", -1 },
	};
	const char *e;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *t = cases[i].text;

		e = canon_value_end(t, t + strlen(t));
		if (cases[i].end < 0 ? e != NULL : e != t + cases[i].end)
			fail_msg("case %zu: %s", i, t);
	}
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
		cmocka_unit_test(test_string_member),
		cmocka_unit_test(test_value_end),
	};

	return cmocka_run_group_tests_name("canon", tests, NULL, NULL);
}
