/*
 * test_util.c - the shared leaf helpers: the one decimal parser at its
 * edges, the hex check and the UTF-8-safe prefix.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "util.h"

static enum util_dec
dec(const char *s, unsigned long long max, unsigned long long *v)
{
	return util_decimal(s, strlen(s), max, v);
}

static void
test_decimal(void **state)
{
	unsigned long long v = 7;

	(void)state;
	assert_int_equal(dec("0", 10, &v), UTIL_DEC_OK);
	assert_int_equal(v, 0);
	assert_int_equal(dec("10", 10, &v), UTIL_DEC_OK);
	assert_int_equal(v, 10);
	assert_int_equal(dec("007", 10, &v), UTIL_DEC_OK);
	assert_int_equal(v, 7);
	/* one above max: OVER, saturated */
	assert_int_equal(dec("11", 10, &v), UTIL_DEC_OVER);
	assert_int_equal(v, 10);
	/* the type's own edge */
	assert_int_equal(dec("18446744073709551615", ULLONG_MAX, &v),
	    UTIL_DEC_OK);
	assert_true(v == ULLONG_MAX);
	assert_int_equal(dec("18446744073709551616", ULLONG_MAX, &v),
	    UTIL_DEC_OVER);
	assert_int_equal(dec("99999999999999999999999999", LONG_MAX, &v),
	    UTIL_DEC_OVER);
	assert_true(v == LONG_MAX);
	/* syntax is checked even past max */
	v = 5;
	assert_int_equal(dec("99999999999999999999x", 10, &v), UTIL_DEC_BAD);
	assert_int_equal(v, 5);
	assert_int_equal(dec("", 10, &v), UTIL_DEC_BAD);
	assert_int_equal(dec("-1", 10, &v), UTIL_DEC_BAD);
	assert_int_equal(dec("+1", 10, &v), UTIL_DEC_BAD);
	assert_int_equal(dec(" 1", 10, &v), UTIL_DEC_BAD);
	assert_int_equal(dec("1 ", 10, &v), UTIL_DEC_BAD);
	assert_int_equal(dec("1.0", 10, &v), UTIL_DEC_BAD);
	/* n bounds the read: "12" of "123" */
	assert_int_equal(util_decimal("123", 2, 100, &v), UTIL_DEC_OK);
	assert_int_equal(v, 12);
	/* max 0 */
	assert_int_equal(dec("0", 0, &v), UTIL_DEC_OK);
	assert_int_equal(dec("1", 0, &v), UTIL_DEC_OVER);
}

static void
test_hex_and_utf8(void **state)
{
	(void)state;
	assert_int_equal(util_is_hex("09af", 4), 1);
	assert_int_equal(util_is_hex("09AF", 4), 0);
	assert_int_equal(util_is_hex("0g", 2), 0);
	assert_int_equal(util_hex_digit('0'), 0);
	assert_int_equal(util_hex_digit('9'), 9);
	assert_int_equal(util_hex_digit('a'), 10);
	assert_int_equal(util_hex_digit('F'), 15);
	assert_int_equal(util_hex_digit('g'), -1);
	assert_int_equal(util_hex_digit('\0'), -1);
	/* "é" is 2 bytes: a 3-byte limit keeps "aé", a 2-byte one only "a" */
	assert_int_equal(util_utf8_prefix("a\xc3\xa9z", 3), 3);
	assert_int_equal(util_utf8_prefix("a\xc3\xa9z", 2), 1);
	assert_int_equal(util_utf8_prefix("abc", 10), 3);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decimal),
		cmocka_unit_test(test_hex_and_utf8),
	};

	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
