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

/* width decimal digits at p into *v; 0 or -1. */
static int
get_digits(const char *p, int width, long long *v)
{
	*v = 0;
	while (width-- > 0) {
		if (*p < '0' || *p > '9')
			return -1;
		*v = *v * 10 + (*p++ - '0');
	}
	return 0;
}

/* Days since 1970-01-01 of y-m-d (Hinnant's days_from_civil). */
static long long
days_from_civil(long long y, long long m, long long d)
{
	long long era, yoe, doy, doe;

	y -= m <= 2;
	era = y / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

int
timefmt_http_date_parse(const char *s, size_t len, long long *ms)
{
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	long long day, year, hh, mm, ss, mon;
	const char *m;
	char back[HTTP_DATE_LEN + 1];

	if (len != HTTP_DATE_LEN || s[3] != ',' || s[4] != ' ' || s[7] != ' ' ||
	    s[11] != ' ' || s[16] != ' ' || s[19] != ':' || s[22] != ':' ||
	    memcmp(s + 25, " GMT", 4) != 0 || get_digits(s + 5, 2, &day) != 0 ||
	    get_digits(s + 12, 4, &year) != 0 ||
	    get_digits(s + 17, 2, &hh) != 0 ||
	    get_digits(s + 20, 2, &mm) != 0 ||
	    get_digits(s + 23, 2, &ss) != 0 || year < 1970 || hh > 23 ||
	    mm > 59 || ss > 60 || day < 1 || day > 31)
		return -1;
	for (m = months; *m != '\0' && memcmp(m, s + 8, 3) != 0; m += 3)
		;
	if (*m == '\0')
		return -1;
	mon = (m - months) / 3 + 1;
	*ms = (days_from_civil(year, mon, day) * 86400 + hh * 3600 + mm * 60 +
	          (ss > 59 ? 59 : ss)) *
	    1000;
	/* a day that the month does not have (31 Feb) comes back otherwise */
	if (timefmt_http_date(*ms, back, sizeof(back)) != 0 ||
	    memcmp(back + 5, s + 5, 11) != 0)
		return -1;
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
