/*
 * timefmt.h - Unix time as text: the HTTP-date of RFC 9110 section 5.6.7
 * (IMF-fixdate) and RFC 3339 UTC timestamps with milliseconds. Pure: no
 * time zone, no locale, no clock.
 */
#ifndef CHARGE_TIMEFMT_H
#define CHARGE_TIMEFMT_H

#include <stddef.h>

#define HTTP_DATE_LEN 29  /* "Sun, 06 Nov 1994 08:49:37 GMT" */
#define RFC3339_MS_LEN 24 /* "1994-11-06T08:49:37.123Z" */

/*
 * IMF-fixdate of the second that holds ms (Unix milliseconds, rounded
 * down) into out[HTTP_DATE_LEN + 1]. Years 1970-9999 only. 0, or -1 when
 * ms is outside them (out is then "").
 */
int timefmt_http_date(long long ms, char *out, size_t outlen);

/*
 * An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", exactly, len bytes,
 * not NUL-terminated) into *ms (Unix milliseconds). Years 1970-9999. 0, or
 * -1 when it is not one (the obsolete forms are refused).
 */
int timefmt_http_date_parse(const char *s, size_t len, long long *ms);

/*
 * "YYYY-MM-DDThh:mm:ss.mmmZ" of ms (Unix milliseconds) into
 * out[RFC3339_MS_LEN + 1]. Years 1970-9999 only. 0 or -1, as above.
 */
int timefmt_rfc3339_ms(long long ms, char *out, size_t outlen);

#endif
