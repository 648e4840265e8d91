/*
 * timefmt.c - civil dates from Unix time without gmtime(): the proleptic
 * Gregorian calendar by arithmetic (days to year/month/day as in Howard
 * Hinnant's civil_from_days), so the result needs no time zone data and
 * is the same in every process and thread.
 */
#include <string.h>

#include "timefmt.h"

#define MS_PER_DAY 86400000LL
/* 9999-12-31T23:59:59.999Z */
#define TIMEFMT_MAX_MS 253402300799999LL

struct civil {
	long long y;
	int mon, day, wday, hh, mm, ss, msec;
};

static int
civil_from_ms(long long ms, struct civil *cv)
{
	long long days, rem, z, era, doe, yoe, doy, mp;

	if (ms < 0 || ms > TIMEFMT_MAX_MS)
		return -1;
	days = ms / MS_PER_DAY;
	rem = ms % MS_PER_DAY;
	cv->msec = (int)(rem % 1000);
	rem /= 1000;
	cv->hh = (int)(rem / 3600);
	cv->mm = (int)(rem / 60 % 60);
	cv->ss = (int)(rem % 60);
	cv->wday = (int)((days + 4) % 7); /* 1970-01-01 was a Thursday */
	z = days + 719468;                /* days since 0000-03-01 */
	era = z / 146097;
	doe = z - era * 146097; /* [0, 146096] */
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153; /* March = 0 */
	cv->day = (int)(doy - (153 * mp + 2) / 5 + 1);
	cv->mon = (int)(mp < 10 ? mp + 3 : mp - 9);
	cv->y = yoe + era * 400 + (cv->mon <= 2);
	return 0;
}

/* v (0 <= v < 10^width) as exactly width decimal digits at p. */
static void
put_digits(char *p, long long v, int width)
{
	while (width-- > 0) {
		p[width] = (char)('0' + v % 10);
		v /= 10;
	}
}

static int
fail(char *out, size_t outlen)
{
	if (outlen > 0)
		out[0] = '\0';
	return -1;
}

/* Writes "HH:MM:SS" (8 bytes, no NUL) at out. */
static void
put_clock(char *out, const struct civil *cv)
{
	put_digits(out, cv->hh, 2);
	out[2] = ':';
	put_digits(out + 3, cv->mm, 2);
	out[5] = ':';
	put_digits(out + 6, cv->ss, 2);
}

int
timefmt_http_date(long long ms, char *out, size_t outlen)
{
	static const char wdays[7][4] = {
		"Sun",
		"Mon",
		"Tue",
		"Wed",
		"Thu",
		"Fri",
		"Sat",
	};
	static const char months[12][4] = {
		"Jan",
		"Feb",
		"Mar",
		"Apr",
		"May",
		"Jun",
		"Jul",
		"Aug",
		"Sep",
		"Oct",
		"Nov",
		"Dec",
	};
	struct civil cv;

	if (civil_from_ms(ms, &cv) != 0)
		return fail(out, outlen);
	if (outlen <= HTTP_DATE_LEN || cv.y < 0 || cv.y > 9999)
		return fail(out, outlen);
	/* "Sun, 06 Nov 1994 08:49:37 GMT", written digit by digit: this runs
	 * on every response that carries a record, and snprintf cost more than
	 * the calendar arithmetic */
	memcpy(out, wdays[cv.wday], 3);
	memcpy(out + 3, ", ", 2);
	put_digits(out + 5, cv.day, 2);
	out[7] = ' ';
	memcpy(out + 8, months[cv.mon - 1], 3);
	out[11] = ' ';
	put_digits(out + 12, cv.y, 4);
	out[16] = ' ';
	put_clock(out + 17, &cv);
	memcpy(out + 25, " GMT", 5);
	return 0;
}

int
timefmt_rfc3339_ms(long long ms, char *out, size_t outlen)
{
	struct civil cv;

	if (civil_from_ms(ms, &cv) != 0)
		return fail(out, outlen);
	if (outlen <= RFC3339_MS_LEN || cv.y < 0 || cv.y > 9999)
		return fail(out, outlen);
	/* "2026-11-23T19:00:00.123Z" */
	put_digits(out, cv.y, 4);
	out[4] = '-';
	put_digits(out + 5, cv.mon, 2);
	out[7] = '-';
	put_digits(out + 8, cv.day, 2);
	out[10] = 'T';
	put_clock(out + 11, &cv);
	out[19] = '.';
	put_digits(out + 20, cv.msec, 3);
	memcpy(out + 23, "Z", 2);
	return 0;
}
