/*
 * test_rc_table.c - the table of a window's charges: its bound, sorting
 * with a charge listed twice, the entries of one request, duplicates and
 * the orphans inside them, amount and currency compared.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rc_table.h"

static void
req_of(int n, char out[WIRE_KEY_LEN + 1])
{
	/* "charge_" + 64 hex whose first 16 encode n */
	(void)snprintf(out, WIRE_KEY_LEN + 1, "charge_%016x%048d", (unsigned)n,
	    0);
}

static struct rc_charge
mk(const char *id, long long amount, const char *cur, enum rc_charge_status st)
{
	struct rc_charge c;

	memset(&c, 0, sizeof(c));
	(void)snprintf(c.id, sizeof(c.id), "%s", id);
	c.amount = amount;
	(void)snprintf(c.currency, sizeof(c.currency), "%s", cur);
	c.status = st;
	return c;
}

static void
test_bound(void **state)
{
	struct rc_table t;
	struct rc_charge c = mk("ch_1", 1, "usd", RC_CHARGE_SUCCEEDED);
	char req[WIRE_KEY_LEN + 1];
	int i;

	(void)state;
	assert_int_equal(sizeof(struct rc_entry), 24);
	rc_table_init(&t, 5000);
	req_of(1, req);
	for (i = 0; i < 5000; i++) {
		(void)snprintf(c.id, sizeof(c.id), "ch_%d", i);
		assert_int_equal(rc_table_add(&t, &c, req, 0), 0);
	}
	assert_int_equal(rc_table_add(&t, &c, req, 0), -1);
	assert_true(t.cap <= 5000);
	rc_table_free(&t);
	rc_table_free(&t);
	rc_table_free(NULL);
}

static void
test_find_and_duplicates(void **state)
{
	struct rc_table t;
	struct rc_charge a = mk("ch_a", 100, "usd", RC_CHARGE_SUCCEEDED);
	struct rc_charge b = mk("ch_b", 100, "usd", RC_CHARGE_SUCCEEDED);
	struct rc_charge c = mk("ch_c", 7, "eur", RC_CHARGE_FAILED);
	struct rc_charge d = mk("ch_d", 9, "usd", RC_CHARGE_SUCCEEDED);
	char r1[WIRE_KEY_LEN + 1], r2[WIRE_KEY_LEN + 1], r3[WIRE_KEY_LEN + 1];
	const struct rc_entry *e;
	long long charges, orphans;
	uint64_t dups[4];
	size_t n;

	(void)state;
	req_of(1, r1);
	req_of(2, r2);
	req_of(3, r3);
	rc_table_init(&t, 100);
	assert_int_equal(rc_table_add(&t, &d, r3, 0), 0);
	assert_int_equal(rc_table_add(&t, &a, r1, 0), 0);
	assert_int_equal(rc_table_add(&t, &b, r1, 1), 0);
	assert_int_equal(rc_table_add(&t, &c, r2, 1), 0);
	assert_int_equal(rc_table_add(&t, &b, r1, 0), 0); /* listed twice */
	assert_null(rc_table_find(&t, 1, &n));            /* not sorted yet */
	rc_table_sort(&t);
	assert_int_equal(t.n, 4);
	e = rc_table_find(&t, 1, &n);
	assert_non_null(e);
	assert_int_equal(n, 2);
	assert_true(e[0].req == 1 && e[1].req == 1);
	e = rc_table_find(&t, 2, &n);
	assert_int_equal(n, 1);
	assert_int_equal(e->flags & RC_F_STATUS, RC_CHARGE_FAILED);
	assert_true(e->flags & RC_F_ORPHAN);
	assert_null(rc_table_find(&t, 4, &n));
	assert_int_equal(n, 0);
	assert_null(rc_table_find(&t, 0, &n));
	assert_int_equal(rc_table_duplicates(&t, dups, 4, &charges, &orphans),
	    1);
	assert_true(dups[0] == 1);
	assert_int_equal(charges, 2);
	assert_int_equal(orphans, 1); /* ch_b, its flag kept when folded */
	assert_int_equal(rc_table_duplicates(&t, dups, 0, &charges, &orphans),
	    1);
	assert_true(rc_req_in(dups, 1, 1));
	assert_false(rc_req_in(dups, 1, 2));
	assert_false(rc_req_in(dups, 0, 1));
	rc_table_free(&t);
}

static void
test_money(void **state)
{
	struct rc_table t;
	struct rc_charge a = mk("ch_a", 1999, "usd", RC_CHARGE_SUCCEEDED);
	struct rc_charge big = mk("ch_b", 5000000000LL, "us", RC_CHARGE_OTHER);
	char r[WIRE_KEY_LEN + 1];

	(void)state;
	req_of(1, r);
	rc_table_init(&t, 10);
	assert_int_equal(rc_table_add(&t, &a, r, 0), 0);
	assert_int_equal(rc_table_add(&t, &big, r, 0), 0);
	assert_true(rc_entry_same_money(&t.v[0], 1999, "usd"));
	assert_false(rc_entry_same_money(&t.v[0], 1998, "usd"));
	assert_false(rc_entry_same_money(&t.v[0], 1999, "eur"));
	assert_false(rc_entry_same_money(&t.v[0], 1999, "usdx"));
	assert_false(rc_entry_same_money(&t.v[0], 1999, ""));
	assert_false(rc_entry_same_money(&t.v[0], -1, "usd"));
	/* an amount past 32 bits matches nothing */
	assert_false(rc_entry_same_money(&t.v[1], 5000000000LL, "us"));
	assert_true(rc_entry_same_money(&t.v[1], UINT32_MAX, "us") == 0);
	rc_table_free(&t);
}

static void
test_many(void **state)
{
	struct rc_table t;
	struct rc_charge c = mk("", 1, "usd", RC_CHARGE_SUCCEEDED);
	char r[WIRE_KEY_LEN + 1];
	long long charges, orphans;
	uint64_t dups[8];
	size_t n;
	int i;

	(void)state;
	rc_table_init(&t, 100000);
	for (i = 0; i < 100000; i++) {
		/* requests 0..49999; 0, 10000 ... 40000 get a second charge */
		req_of(i < 50000 ? i : i - 50000, r);
		(void)snprintf(c.id, sizeof(c.id), "ch_%d", i);
		if (i >= 50000 && (i - 50000) % 10000 != 0)
			req_of(50000 + i, r);
		assert_int_equal(rc_table_add(&t, &c, r, 0), 0);
	}
	rc_table_sort(&t);
	assert_int_equal(t.n, 100000);
	n = rc_table_duplicates(&t, dups, 8, &charges, &orphans);
	assert_int_equal(n, 5);
	assert_int_equal(charges, 10);
	assert_true(dups[0] == 0 && dups[1] == 10000 && dups[4] == 40000);
	assert_non_null(rc_table_find(&t, 49999, &n));
	assert_int_equal(n, 1);
	rc_table_free(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bound),
		cmocka_unit_test(test_find_and_duplicates),
		cmocka_unit_test(test_money),
		cmocka_unit_test(test_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
