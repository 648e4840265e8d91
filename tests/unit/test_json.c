/*
 * test_json.c - the strict JSON layer: statuses and the byte each names
 * (checked against cJSON's own parser, whose error offsets the 400 bodies
 * keep), the tree (plain integers against raw numbers, decoded strings), the
 * problems with their member paths, and UTF-8.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defaults.h"
#include "json.h"
#include "json_path.h"
#include "utf8.h"

/* n copies of unit, concatenated (caller frees). */
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

/* Where cJSON 1.7.15's parser reports an error in b[0..n), or -1 if none. */
static long
cjson_error_at(const char *b, size_t n)
{
	const char *end = NULL;
	cJSON *r = cJSON_ParseWithLengthOpts(b, n, &end, 0);

	if (r != NULL) {
		cJSON_Delete(r);
		return -1;
	}
	return end != NULL ? (long)(end - b) : -2;
}

static void
expect_status_n(const char *b, size_t n, enum json_status want, size_t at)
{
	struct json_doc doc;
	enum json_status st = json_parse(b, n, &doc);

	if (st != want ||
	    ((want == JSON_SYNTAX || want == JSON_BAD_BYTE ||
	         want == JSON_TRAILING) &&
	        doc.at != at))
		/* b may be NULL (n == 0); show at most 60 of its n bytes */
		fail_msg("%.*s: status %d at %zu, want %d at %zu",
		    b != NULL ? (int)(n < 60 ? n : 60) : 6,
		    b != NULL ? b : "(null)", st, doc.at, want, at);
	if (want == JSON_SYNTAX)
		assert_int_equal(cjson_error_at(b, n), (long)at);
	assert_true((st == JSON_OK) == (doc.root != NULL));
	json_doc_free(&doc);
}

static void
expect_status(const char *b, enum json_status want, size_t at)
{
	expect_status_n(b, strlen(b), want, at);
}

static void
test_status(void **state)
{
	static const char nul_ws[] = "{\"a\":1,\0\"b\":2}";
	static const char nul_after[] = "{}\0";
	char *deep, *s;

	(void)state;
	expect_status_n("", 0, JSON_EMPTY, 0);
	expect_status_n(NULL, 0, JSON_EMPTY, 0);
	expect_status("{}", JSON_OK, 0);
	expect_status(" [1, \"x\", null, true, false, {}] ", JSON_OK, 0);
	expect_status("1", JSON_OK, 0);
	/* syntax errors at cJSON's byte: after skipped whitespace, clamped */
	expect_status("   ", JSON_SYNTAX, 2);
	expect_status("{", JSON_SYNTAX, 0);
	expect_status("{\"a\":}", JSON_SYNTAX, 5);
	expect_status("{\"a\" 1}", JSON_SYNTAX, 5);
	expect_status("{\"a\":1 \"b\":2}", JSON_SYNTAX, 7);
	expect_status("[1,]", JSON_SYNTAX, 3);
	expect_status("[1 2]", JSON_SYNTAX, 3);
	expect_status("[nul]", JSON_SYNTAX, 1);
	expect_status("[True]", JSON_SYNTAX, 1);
	expect_status("[+1]", JSON_SYNTAX, 1);
	expect_status("[.5]", JSON_SYNTAX, 1);
	expect_status("[-]", JSON_SYNTAX, 1);
	expect_status("[1e5e5]", JSON_SYNTAX, 4);
	expect_status("[1.5.]", JSON_SYNTAX, 4);
	/* a missing member name: the byte after where its quote should be */
	expect_status("{a:1}", JSON_SYNTAX, 2);
	expect_status("{\"a\":1,}", JSON_SYNTAX, 7);
	expect_status("{\"a\":1,", JSON_SYNTAX, 6);
	/* strings: an unterminated one at its first byte, an escape at its \ */
	expect_status("{\"a\":\"xyz", JSON_SYNTAX, 6);
	expect_status("{\"a\":\"xyz\\", JSON_SYNTAX, 6);
	expect_status("{\"a\":\"x\\qz\"}", JSON_SYNTAX, 7);
	expect_status("{\"a\":\"x\\qz", JSON_SYNTAX, 6);
	expect_status("[\"\\ud83d\"]", JSON_SYNTAX, 2);
	expect_status("[\"\\udcb3\"]", JSON_SYNTAX, 2);
	expect_status("[\"\\ud83d\\u0041\"]", JSON_SYNTAX, 2);
	expect_status("[\"\\u12\"]", JSON_SYNTAX, 2);
	/* only the value counts: what follows is trailing, bad bytes in it */
	expect_status("{}x", JSON_TRAILING, 2);
	expect_status("{} \n{}", JSON_TRAILING, 4);
	expect_status("1.5e", JSON_TRAILING, 3);
	expect_status_n(nul_after, sizeof(nul_after) - 1, JSON_TRAILING, 2);
	expect_status("\x01{}", JSON_BAD_BYTE, 0);
	expect_status("{\"a\":1,\x0b\"b\":2}", JSON_BAD_BYTE, 7);
	expect_status_n(nul_ws, sizeof(nul_ws) - 1, JSON_BAD_BYTE, 7);
	expect_status("{}\x01", JSON_TRAILING, 2);
	/* a BOM, which cJSON skips only before two more bytes */
	expect_status("\xef\xbb\xbf{}", JSON_BAD_BYTE, 0);
	expect_status("\xef\xbb\xbf{", JSON_SYNTAX, 0);
	/* not UTF-8 wins over a syntax error, wherever the bytes are */
	expect_status("{\"a\":\"\xff\"", JSON_NOT_UTF8, 0);
	expect_status("{\"a\":\xff}", JSON_NOT_UTF8, 0);
	expect_status("{\"a\":} \xc0\xaf", JSON_NOT_UTF8, 0);
	expect_status("{\"a\":\"\\\xc3\"}", JSON_NOT_UTF8, 0);
	expect_status("{\"a\":\xc3\xa9}", JSON_SYNTAX, 5);
	expect_status("{\"a\":\"\\\xc3\xa9\"}", JSON_SYNTAX, 6);
	/* depth wins over everything, counted past errors and the value */
	deep = rep("[", JSON_DEPTH_MAX);
	s = malloc(strlen(deep) + 16);
	assert_non_null(s);
	expect_status(deep, JSON_SYNTAX, JSON_DEPTH_MAX - 1);
	sprintf(s, "[%s", deep);
	expect_status(s, JSON_TOO_DEEP, 0);
	sprintf(s, "{}%s[", deep);
	expect_status(s, JSON_TOO_DEEP, 0);
	sprintf(s, "{\"a\":}\xff%s[", deep);
	expect_status(s, JSON_TOO_DEEP, 0);
	sprintf(s, "{a%s[", deep);
	expect_status(s, JSON_TOO_DEEP, 0);
	/* brackets in strings do not count, nor after an unterminated one */
	sprintf(s, "[\"%s[\"]", deep);
	expect_status(s, JSON_OK, 0);
	sprintf(s, "{}\"%s[", deep);
	expect_status(s, JSON_TRAILING, 2);
	sprintf(s, "{}\"\\\"%s[\"", deep);
	expect_status(s, JSON_TRAILING, 2);
	free(s);
	free(deep);
}

static cJSON *
parse_ok(const char *b, struct json_doc *doc)
{
	assert_int_equal(json_parse(b, strlen(b), doc), JSON_OK);
	return doc->root;
}

static void
test_numbers(void **state)
{
	static const char *const raw[] = {
		"1.0",
		"1e2",
		"1E+2",
		"-0.5",
		"01",
		"-01",
		"00",
		"1.",
		"-.5",
		"1e400",
	};
	struct json_doc doc;
	cJSON *n;
	char b[64];

	(void)state;
	n = parse_ok("[0, -0, 7, -42, 999999999999999, 99999999999999999999]",
	    &doc);
	n = n->child;
	assert_true(cJSON_IsNumber(n) && n->valuedouble == 0 &&
	    !signbit(n->valuedouble));
	n = n->next;
	assert_true(cJSON_IsNumber(n) && n->valuedouble == 0 &&
	    signbit(n->valuedouble));
	assert_true(n->next->valuedouble == 7);
	assert_true(n->next->next->valuedouble == -42);
	n = n->next->next->next;
	assert_true(n->valuedouble == 999999999999999.0);
	assert_true(n->next->valuedouble == 1e15); /* saturated */
	json_doc_free(&doc);

	for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++) {
		snprintf(b, sizeof(b), "[%s]", raw[i]);
		n = parse_ok(b, &doc)->child;
		assert_true(cJSON_IsRaw(n));
		assert_false(cJSON_IsNumber(n));
		assert_string_equal(n->valuestring, raw[i]);
		json_doc_free(&doc);
	}
}

static void
test_strings(void **state)
{
	static const char nul_raw[] = "[\"a\0b\"]";
	struct json_doc doc;
	cJSON *s;

	(void)state;
	s = parse_ok("[\"\\b\\f\\n\\r\\t\\\"\\\\\\/\", \"caf\\u00e9\\u00E9\", "
	             "\"\\ud83d\\udcb3\", \"\xe2\x82\xac\", \"\\u20AC\"]",
	    &doc)
	        ->child;
	assert_string_equal(s->valuestring, "\b\f\n\r\t\"\\/");
	assert_string_equal(s->next->valuestring, "caf\xc3\xa9\xc3\xa9");
	assert_string_equal(s->next->next->valuestring, "\xf0\x9f\x92\xb3");
	assert_string_equal(s->next->next->next->valuestring, "\xe2\x82\xac");
	assert_string_equal(s->next->next->next->next->valuestring,
	    "\xe2\x82\xac");
	json_doc_free(&doc);

	/* the text ends at U+0000, escaped or raw, as cJSON keeps it */
	s = parse_ok("{\"k\\u0000x\":\"a\\u0000b\"}", &doc)->child;
	assert_string_equal(s->string, "k");
	assert_string_equal(s->valuestring, "a");
	json_doc_free(&doc);
	assert_int_equal(json_parse(nul_raw, sizeof(nul_raw) - 1, &doc),
	    JSON_OK);
	assert_string_equal(doc.root->child->valuestring, "a");
	json_doc_free(&doc);

	/* a long string leaves the stack scratch buffer */
	{
		char *long_s = rep("\\u00e9x", 500), *b = malloc(1024 * 8);

		assert_non_null(b);
		sprintf(b, "[\"%s\"]", long_s);
		s = parse_ok(b, &doc)->child;
		assert_int_equal(strlen(s->valuestring), 1500);
		json_doc_free(&doc);
		free(b);
		free(long_s);
	}
}

/*
 * cJSON decodes a \u escape whose four characters are not all hex digits as
 * U+0000 and reads on six bytes later: the string is cut there, and what
 * cJSON then rejects is still rejected at the byte cJSON names.
 */
static void
test_nonhex_unicode_escape(void **state)
{
	struct json_doc doc;

	(void)state;
	assert_string_equal(
	    parse_ok("[\"a\\uZZZZb\"]", &doc)->child->valuestring, "a");
	json_doc_free(&doc);
	assert_string_equal(
	    parse_ok("[\"a\\u12\\\\\\\"x\"]", &doc)->child->valuestring, "a");
	json_doc_free(&doc);
	/* cJSON's six bytes end on the closing quote's backslash */
	expect_status("[\"\\u123\\\\\"]", JSON_OK, 0);
	expect_status("[\"\\u1\\\"", JSON_SYNTAX, 2);
	expect_status("[\"\\u123x\\q\"]", JSON_SYNTAX, 8);
	expect_status("[\"\\uZZZZ\\ud800\"]", JSON_SYNTAX, 8);
	expect_status("[\"\\uZZ\"]", JSON_SYNTAX, 2);
}

/* Problems as "field: message" lines, in the order they were reported. */
static void
collect(void *ctx, const char *field, const char *message)
{
	char *out = ctx;
	size_t n = strlen(out);

	snprintf(out + n, 4096 - n, "%s: %s\n", field, message);
}

static void
expect_problems(const char *b, size_t n, const char *want)
{
	struct json_doc doc;
	char got[4096] = "";

	assert_int_equal(json_parse(b, n, &doc), JSON_OK);
	assert_int_equal(json_problems(&doc, collect, got), 0);
	assert_string_equal(got, want);
	json_doc_free(&doc);
}

static void
test_problems(void **state)
{
	static const char nul[] = "{\"a\0\":\"x\0\"}";
	const char *b;
	char *many;

	(void)state;
	expect_problems("{}", 2, "");
	expect_problems("[\"\\u0000\"]", 10,
	    "[0]: value must not contain \\u0000\n");
	/* an object's duplicates, sorted and once each, before its members */
	b = "{\"z\":{\"b\":1,\"b\":2},\"y\":\"\\u0000\",\"z\":1,\"y\":2,"
	    "\"y\":3,\"x\\u0000\":[\"\xff\", \"a\x01\"]}";
	expect_problems(b, strlen(b),
	    "y: duplicate member\n"
	    "z: duplicate member\n"
	    "z.b: duplicate member\n"
	    "y: value must not contain \\u0000\n"
	    "x: member name must not contain \\u0000\n"
	    "x[0]: value is not valid UTF-8\n"
	    "x[1]: value contains an unescaped control character\n");
	/* every problem of one string, names shown UTF-8 */
	b = "{\"k\xff\x01\\u0000\":{\"\xc3\xa9\":\"\x01\"}}";
	expect_problems(b, strlen(b),
	    "k?\x01: member name is not valid UTF-8\n"
	    "k?\x01: member name contains an unescaped control character\n"
	    "k?\x01: member name must not contain \\u0000\n"
	    "k?\x01.\xc3\xa9: value contains an unescaped control character\n");
	expect_problems(nul, sizeof(nul) - 1,
	    "a: member name contains an unescaped control character\n"
	    "a: value contains an unescaped control character\n");
	/* an object large enough to be sorted for duplicates */
	many = malloc(64 * 40);
	assert_non_null(many);
	strcpy(many, "{");
	for (int i = 0; i < 40; i++)
		sprintf(many + strlen(many), "%s\"k%d\":%d", i ? "," : "",
		    i % 37, i);
	strcat(many, "}");
	expect_problems(many, strlen(many),
	    "k0: duplicate member\nk1: duplicate member\n"
	    "k2: duplicate member\n");
	free(many);
}

static void
test_paths(void **state)
{
	char f[JSON_FIELD_SIZE], *parent, *name;

	(void)state;
	json_path_member(f, sizeof(f), "", "amount");
	assert_string_equal(f, "amount");
	json_path_member(f, sizeof(f), "metadata", "");
	assert_string_equal(f, "metadata.");
	json_path_member(f, sizeof(f), "a", "b\xc3");
	assert_string_equal(f, "a.b?");
	json_path_index(f, sizeof(f), "line_items", 3);
	assert_string_equal(f, "line_items[3]");
	/* cut on a UTF-8 boundary; an index that does not fit is left out */
	name = rep("\xc3\xa9", 100);
	json_path_member(f, sizeof(f), "m", name);
	assert_int_equal(strlen(f), 94);
	assert_int_equal(utf8_valid(f, strlen(f)), 1);
	parent = rep("p", JSON_FIELD_SIZE - 3);
	json_path_index(f, sizeof(f), parent, 7);
	assert_string_equal(f, parent);
	free(parent);
	free(name);
}

static int fail_after = -1; /* allocations before one fails; -1: none */

static void *
failing_malloc(size_t n)
{
	if (fail_after == 0)
		return NULL;
	if (fail_after > 0)
		fail_after--;
	return malloc(n);
}

/* Every cJSON allocation failing in turn: JSON_NOMEM, nothing leaked. */
static void
test_out_of_memory(void **state)
{
	static const char b[] = "{\"a\":[1,2.5,\"x\\u00e9\"],\"a\":{\"k\":null,"
	                        "\"l\":true,\"m\":false},\"n\":\"\\u0000\"}";
	cJSON_Hooks hooks = { failing_malloc, free };
	struct json_doc doc;
	enum json_status st;
	int n;

	(void)state;
	cJSON_InitHooks(&hooks);
	for (n = 0;; n++) {
		fail_after = n;
		st = json_parse(b, sizeof(b) - 1, &doc);
		if (st == JSON_OK)
			break;
		assert_int_equal(st, JSON_NOMEM);
		assert_null(doc.root);
		json_doc_free(&doc);
	}
	assert_true(n > 10);
	assert_int_equal(doc.nmarks, 2);
	json_doc_free(&doc);
	fail_after = -1;
	cJSON_InitHooks(NULL);
}

static void
test_utf8_valid(void **state)
{
	(void)state;
	assert_int_equal(utf8_valid("", 0), 1);
	assert_int_equal(utf8_valid("abc", 3), 1);
	assert_int_equal(utf8_valid("a\0b", 3), 1);
	assert_int_equal(utf8_valid("\xc2\x80", 2), 1);         /* U+0080 */
	assert_int_equal(utf8_valid("\xdf\xbf", 2), 1);         /* U+07FF */
	assert_int_equal(utf8_valid("\xe0\xa0\x80", 3), 1);     /* U+0800 */
	assert_int_equal(utf8_valid("\xed\x9f\xbf", 3), 1);     /* U+D7FF */
	assert_int_equal(utf8_valid("\xee\x80\x80", 3), 1);     /* U+E000 */
	assert_int_equal(utf8_valid("\xef\xbf\xbf", 3), 1);     /* U+FFFF */
	assert_int_equal(utf8_valid("\xf0\x90\x80\x80", 4), 1); /* U+10000 */
	assert_int_equal(utf8_valid("\xf4\x8f\xbf\xbf", 4), 1); /* U+10FFFF */

	assert_int_equal(utf8_valid("\xc0\xaf", 2), 0); /* overlong / */
	assert_int_equal(utf8_valid("\xc1\xbf", 2), 0);
	assert_int_equal(utf8_valid("\xe0\x80\xaf", 3), 0);
	assert_int_equal(utf8_valid("\xe0\x9f\xbf", 3), 0);
	assert_int_equal(utf8_valid("\xf0\x80\x80\xaf", 4), 0);
	assert_int_equal(utf8_valid("\xf0\x8f\xbf\xbf", 4), 0);
	assert_int_equal(utf8_valid("\xed\xa0\x80", 3), 0);     /* U+D800 */
	assert_int_equal(utf8_valid("\xed\xbf\xbf", 3), 0);     /* U+DFFF */
	assert_int_equal(utf8_valid("\xf4\x90\x80\x80", 4), 0); /* U+110000 */
	assert_int_equal(utf8_valid("\xf5\x80\x80\x80", 4), 0);
	assert_int_equal(utf8_valid("\xff", 1), 0);
	assert_int_equal(utf8_valid("\xfe", 1), 0);
	assert_int_equal(utf8_valid("\x80", 1), 0); /* lone continuation */
	assert_int_equal(utf8_valid("a\xbf", 2), 0);
	assert_int_equal(utf8_valid("\xc3", 1), 0); /* truncated */
	assert_int_equal(utf8_valid("\xe2\x82", 2), 0);
	assert_int_equal(utf8_valid("\xf0\x9f\x92", 3), 0);
	assert_int_equal(utf8_valid("\xe2\x82\xac", 2), 0); /* cut by n */
	assert_int_equal(utf8_valid("\xc3\x28", 2), 0);
	assert_int_equal(utf8_valid("\xe2\x28\xa1", 3), 0);
	assert_int_equal(utf8_valid("\xf0\x9f\x28\xb3", 4), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_nonhex_unicode_escape),
		cmocka_unit_test(test_problems),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_out_of_memory),
		cmocka_unit_test(test_utf8_valid),
	};

	return cmocka_run_group_tests_name("json", tests, NULL, NULL);
}
