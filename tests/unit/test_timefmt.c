/*
 * test_timefmt.c - HTTP-date (IMF-fixdate) and RFC 3339 at known instants,
 * leap days and years, the epoch and the edges of the supported range;
 * every day of 1970-2100 against gmtime_r.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "timefmt.h"

static const char *
http(long long ms)
{
	static char buf[HTTP_DATE_LEN + 1];

	assert_int_equal(timefmt_http_date(ms, buf, sizeof(buf)), 0);
	return buf;
}

static const char *
rfc(long long ms)
{
	static char buf[RFC3339_MS_LEN + 1];

	assert_int_equal(timefmt_rfc3339_ms(ms, buf, sizeof(buf)), 0);
	return buf;
}

static void
test_known_instants(void **state)
{
	(void)state;
	/* RFC 9110's own example */
	assert_string_equal(http(784111777000LL),
	    "Sun, 06 Nov 1994 08:49:37 GMT");
	assert_string_equal(http(784111777999LL),
	    "Sun, 06 Nov 1994 08:49:37 GMT");
	assert_string_equal(rfc(784111777123LL), "1994-11-06T08:49:37.123Z");
	assert_string_equal(http(1000000000000LL),
	    "Sun, 09 Sep 2001 01:46:40 GMT");
	assert_string_equal(http(1763740800000LL),
	    "Fri, 21 Nov 2025 16:00:00 GMT");
	assert_string_equal(rfc(1795460400123LL), "2026-11-23T19:00:00.123Z");
	assert_string_equal(http(2147483647000LL),
	    "Tue, 19 Jan 2038 03:14:07 GMT");
	assert_string_equal(http(2147483648000LL),
	    "Tue, 19 Jan 2038 03:14:08 GMT");
}

static void
test_epoch_and_edges(void **state)
{
	char buf[64];

	(void)state;
	assert_string_equal(http(0), "Thu, 01 Jan 1970 00:00:00 GMT");
	assert_string_equal(rfc(0), "1970-01-01T00:00:00.000Z");
	assert_string_equal(rfc(999), "1970-01-01T00:00:00.999Z");
	assert_string_equal(http(86399999), "Thu, 01 Jan 1970 23:59:59 GMT");
	assert_string_equal(http(86400000), "Fri, 02 Jan 1970 00:00:00 GMT");
	assert_string_equal(rfc(253402300799999LL), "9999-12-31T23:59:59.999Z");
	assert_string_equal(http(253402300799999LL),
	    "Fri, 31 Dec 9999 23:59:59 GMT");
	/* outside 1970-9999: refused, out emptied */
	assert_int_equal(timefmt_http_date(-1, buf, sizeof(buf)), -1);
	assert_string_equal(buf, "");
	assert_int_equal(timefmt_rfc3339_ms(253402300800000LL, buf,
	                     sizeof(buf)),
	    -1);
	assert_string_equal(buf, "");
	/* a buffer one byte short: refused */
	assert_int_equal(timefmt_http_date(0, buf, HTTP_DATE_LEN), -1);
	assert_int_equal(timefmt_rfc3339_ms(0, buf, RFC3339_MS_LEN), -1);
}

static void
test_leap_years(void **state)
{
	(void)state;
	/* 2000: divisible by 400, a leap year */
	assert_string_equal(http(951782400000LL),
	    "Tue, 29 Feb 2000 00:00:00 GMT");
	assert_string_equal(http(951868800000LL),
	    "Wed, 01 Mar 2000 00:00:00 GMT");
	/* 2024 leap day, last millisecond */
	assert_string_equal(rfc(1709251199999LL), "2024-02-29T23:59:59.999Z");
	assert_string_equal(rfc(1709251200000LL), "2024-03-01T00:00:00.000Z");
	/* 2100: divisible by 100, not 400: no 29 Feb */
	assert_string_equal(http(4107456000000LL),
	    "Sun, 28 Feb 2100 00:00:00 GMT");
	assert_string_equal(http(4107542400000LL),
	    "Mon, 01 Mar 2100 00:00:00 GMT");
	/* 31 Dec of a leap year is day 366 */
	assert_string_equal(rfc(1735603200000LL), "2024-12-31T00:00:00.000Z");
	assert_string_equal(rfc(1735689600000LL), "2025-01-01T00:00:00.000Z");
}

/* Every day at 12:34:56.789 from 1970 to 2100 agrees with gmtime_r. */
static void
test_against_gmtime(void **state)
{
	static const char *wd[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri",
		"Sat" };
	static const char *mo[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
		"Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	char want[64];
	long long day;
	struct tm tm;
	time_t t;

	(void)state;
	for (day = 0; day < 47847; day++) {
		t = (time_t)(day * 86400 + 45296);
		assert_non_null(gmtime_r(&t, &tm));
		(void)snprintf(want, sizeof(want),
		    "%s, %02d %s %04d 12:34:56 GMT", wd[tm.tm_wday], tm.tm_mday,
		    mo[tm.tm_mon], tm.tm_year + 1900);
		assert_string_equal(http((long long)t * 1000 + 789), want);
		(void)snprintf(want, sizeof(want),
		    "%04d-%02d-%02dT12:34:56.789Z", tm.tm_year + 1900,
		    tm.tm_mon + 1, tm.tm_mday);
		assert_string_equal(rfc((long long)t * 1000 + 789), want);
		/* and back: the provider's Date header (issue 36) */
		{
			long long ms;
			const char *h = http((long long)t * 1000 + 789);

			assert_int_equal(timefmt_http_date_parse(h, strlen(h),
			                     &ms),
			    0);
			assert_true(ms == (long long)t * 1000);
		}
	}
}

/* Parsing an HTTP-date: IMF-fixdate only, every field at its edge. */
static void
test_parse(void **state)
{
	static const char *const bad[] = {
		"Sun, 06 Nov 1994 08:49:37 UTC",  /* not GMT */
		"Sunday, 06-Nov-94 08:49:37 GMT", /* RFC 850 */
		"Sun Nov  6 08:49:37 1994",       /* asctime */
		"Sun, 06 Nov 1994 24:00:00 GMT",
		"Sun, 06 Nov 1994 08:60:00 GMT",
		"Sun, 31 Feb 1994 08:49:37 GMT",
		"Sun, 00 Nov 1994 08:49:37 GMT",
		"Sun, 06 Foo 1994 08:49:37 GMT",
		"Sun, 06 Nov 1969 23:59:59 GMT",
		"Sun, 06 Nov 1994 08:49:37 GMT ",
		"Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 19a4 08:49:37 GMT",
		""
	};
	long long ms;
	size_t i;

	(void)state;
	assert_int_equal(
	    timefmt_http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT",
	        HTTP_DATE_LEN, &ms),
	    0);
	assert_true(ms == 784111777000LL);
	assert_int_equal(
	    timefmt_http_date_parse("Thu, 01 Jan 1970 00:00:00 GMT",
	        HTTP_DATE_LEN, &ms),
	    0);
	assert_true(ms == 0);
	assert_int_equal(
	    timefmt_http_date_parse("Fri, 31 Dec 9999 23:59:59 GMT",
	        HTTP_DATE_LEN, &ms),
	    0);
	assert_true(ms == 253402300799000LL);
	assert_int_equal(
	    timefmt_http_date_parse("Thu, 29 Feb 2024 00:00:00 GMT",
	        HTTP_DATE_LEN, &ms),
	    0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (timefmt_http_date_parse(bad[i], strlen(bad[i]), &ms) == 0)
			fail_msg("parsed %s", bad[i]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_known_instants),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_epoch_and_edges),
		cmocka_unit_test(test_leap_years),
		cmocka_unit_test(test_against_gmtime),
	};

	return cmocka_run_group_tests_name("timefmt", tests, NULL, NULL);
}
