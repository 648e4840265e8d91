/*
 * test_sim_form.c - the simulator's pure parts: form decoding at its edges,
 * the token chains, percent-encoding back and forth, JSON strings, UTF-8,
 * and the hash table with deletions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "form.h"
#include "table.h"

static void
test_form_decode(void **state)
{
	static struct sim_form f;
	char dst[128];
	const char *in = "a=1&&b=x+y%21&metadata%5Bk%5D=v&flag";

	(void)state;
	assert_int_equal(sim_form_decode(in, strlen(in), dst, &f), SIM_FORM_OK);
	assert_int_equal(f.n, 4);
	assert_memory_equal(f.pairs[1].value, "x y!", 4);
	assert_int_equal(f.pairs[2].name_len, 11);
	assert_memory_equal(f.pairs[2].name, "metadata[k]", 11);
	assert_int_equal(f.pairs[3].name_len, 4);
	assert_int_equal(f.pairs[3].value_len, 0);
	/* a % without two hex digits, even at the very end */
	assert_int_equal(sim_form_decode("a=%4", 4, dst, &f),
	    SIM_FORM_BAD_ENCODING);
	assert_int_equal(sim_form_decode("a=%zz", 5, dst, &f),
	    SIM_FORM_BAD_ENCODING);
	assert_int_equal(sim_form_decode("", 0, dst, &f), SIM_FORM_OK);
	assert_int_equal(f.n, 0);
}

static void
test_form_too_many(void **state)
{
	static struct sim_form f;
	char src[4 * (SIM_MAX_PAIRS + 1)], dst[sizeof(src)];
	size_t i, n = 0;

	(void)state;
	for (i = 0; i < SIM_MAX_PAIRS; i++) {
		memcpy(src + n, "a=1&", 4);
		n += 4;
	}
	assert_int_equal(sim_form_decode(src, n, dst, &f), SIM_FORM_OK);
	assert_int_equal(f.n, SIM_MAX_PAIRS);
	memcpy(src + n, "b=2", 3);
	assert_int_equal(sim_form_decode(src, n + 3, dst, &f),
	    SIM_FORM_TOO_MANY);
}

static void
test_form_sort_and_pct(void **state)
{
	static struct sim_form f, g;
	struct sim_buf b = { 0 };
	char dst[64], dst2[128];
	const char *in = "b=2&a=2&a=1";

	(void)state;
	assert_int_equal(sim_form_decode(in, strlen(in), dst, &f), SIM_FORM_OK);
	sim_form_sort(&f);
	assert_memory_equal(f.pairs[0].value, "1", 1);
	assert_memory_equal(f.pairs[1].value, "2", 1);
	assert_memory_equal(f.pairs[2].name, "b", 1);
	/* encoding then decoding gives the bytes back */
	sim_pct_encode(&b, "k=v&+ %\t\n\xc3\xa9", 11);
	assert_string_equal(b.p, "k%3Dv%26%2B%20%25%09%0A%C3%A9");
	assert_int_equal(sim_form_decode(b.p, b.len, dst2, &g), SIM_FORM_OK);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.pairs[0].name_len, 11);
	assert_memory_equal(g.pairs[0].name, "k=v&+ %\t\n\xc3\xa9", 11);
	sim_buf_free(&b);
}

static void
test_pct_decode(void **state)
{
	char dst[32];

	(void)state;
	assert_int_equal(sim_pct_decode("a%2Bb+c%20", 10, dst), 6);
	assert_memory_equal(dst, "a+b+c ", 6);
	assert_int_equal(sim_pct_decode("%2", 2, dst), -1);
	assert_int_equal(sim_pct_decode("x%g0", 4, dst), -1);
	assert_int_equal(sim_pct_decode("", 0, dst), 0);
}

static void
test_tokens(void **state)
{
	const char *chain = "tok_providerError|tok_providerError|tok_visa|n42";

	(void)state;
	assert_int_equal(sim_token_of("tok_visa", 8), SIM_TOK_SUCCEED);
	assert_int_equal(sim_token_of("tok_somethingNew", 16), SIM_TOK_SUCCEED);
	assert_int_equal(sim_token_of("tok_chargeDeclined", 18),
	    SIM_TOK_DECLINE_GENERIC);
	assert_int_equal(sim_token_of("tok_insufficientFunds", 21),
	    SIM_TOK_DECLINE_FUNDS);
	assert_int_equal(sim_token_of("tok_providerTimeout", 19),
	    SIM_TOK_CHARGED_LATE);
	assert_int_equal(sim_token_pick(chain, strlen(chain), 0),
	    SIM_TOK_ERROR);
	assert_int_equal(sim_token_pick(chain, strlen(chain), 1),
	    SIM_TOK_ERROR);
	assert_int_equal(sim_token_pick(chain, strlen(chain), 2),
	    SIM_TOK_SUCCEED);
	/* the last token repeats, nonces are skipped */
	assert_int_equal(sim_token_pick(chain, strlen(chain), 9),
	    SIM_TOK_SUCCEED);
	assert_int_equal(sim_token_pick("n1|tok_chargeDeclined", 21, 0),
	    SIM_TOK_DECLINE_GENERIC);
	assert_int_equal(sim_token_pick("n1|n2", 5, 0), SIM_TOK_NONE);
	assert_int_equal(sim_token_pick("", 0, 0), SIM_TOK_NONE);
	assert_int_equal(sim_token_pick("tok_|", 5, 3), SIM_TOK_SUCCEED);
	assert_true(sim_token_is_fault(SIM_TOK_SLOW));
	assert_false(sim_token_is_fault(SIM_TOK_DECLINE_FRAUD));
}

static void
test_json_and_utf8(void **state)
{
	struct sim_buf b = { 0 };

	(void)state;
	sim_json_str(&b, "a\"b\\c\n\x01\xc3\xa9", 9);
	assert_string_equal(b.p, "\"a\\\"b\\\\c\\u000a\\u0001\xc3\xa9\"");
	sim_buf_free(&b);
	assert_true(sim_utf8_valid("caf\xc3\xa9", 5));
	assert_false(sim_utf8_valid("caf\xc3", 4));         /* cut */
	assert_false(sim_utf8_valid("\xc0\xaf", 2));        /* overlong */
	assert_false(sim_utf8_valid("\xed\xa0\x80", 3));    /* surrogate */
	assert_false(sim_utf8_valid("a\0b", 3));            /* NUL */
	assert_true(sim_utf8_valid("\xf0\x9f\x92\xb3", 4)); /* U+1F4B3 */
}

struct item {
	char k[16];
	size_t n;
};

static const char *
item_key(const void *p, size_t *n)
{
	const struct item *it = p;

	*n = it->n;
	return it->k;
}

static void
test_table(void **state)
{
	enum { N = 5000 };
	struct sim_table t;
	struct item *items = calloc(N, sizeof(*items));
	size_t i;

	(void)state;
	assert_non_null(items);
	sim_table_init(&t, item_key);
	for (i = 0; i < N; i++) {
		items[i].n = (size_t)snprintf(items[i].k, sizeof(items[i].k),
		    "key-%zu", i);
		sim_table_put(&t, &items[i]);
	}
	assert_int_equal(t.n, N);
	/* delete every third: the others stay reachable (backward shift) */
	for (i = 0; i < N; i += 3)
		sim_table_del(&t, &items[i]);
	for (i = 0; i < N; i++) {
		void *got = sim_table_get(&t, items[i].k, items[i].n);

		if (i % 3 == 0)
			assert_null(got);
		else
			assert_ptr_equal(got, &items[i]);
	}
	assert_null(sim_table_get(&t, "nope", 4));
	sim_table_free(&t);
	free(items);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_form_decode),
		cmocka_unit_test(test_form_too_many),
		cmocka_unit_test(test_form_sort_and_pct),
		cmocka_unit_test(test_pct_decode),
		cmocka_unit_test(test_tokens),
		cmocka_unit_test(test_json_and_utf8),
		cmocka_unit_test(test_table),
	};

	return cmocka_run_group_tests_name("sim_form", tests, NULL, NULL);
}
