/*
 * rc_wire.c - charge-reconcile's pure parts: times of the window, the
 * provider's list pages and charge objects, a record's 201 body.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cJSON.h>

#include "rc_wire.h"
#include "util.h"

/* Seconds in a unit of a duration, or 0. */
static long long
unit_seconds(char u)
{
	switch (u) {
	case 's': return 1;
	case 'm': return 60;
	case 'h': return 3600;
	case 'd': return 86400;
	default: return 0;
	}
}

/* n digits of s as a number (no sign); -1 when one is not a digit. */
static long
digits(const char *s, size_t n)
{
	long v = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's). */
static long long
days_from_civil(long y, long m, long d)
{
	long era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return (long long)era * 146097 + doe - 719468;
}

static int
days_in_month(long y, long m)
{
	static const int dm[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30,
		31 };

	if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
		return 29;
	return dm[m - 1];
}

/* "YYYY-MM-DD[THH:MM:SS[.frac](Z|±HH:MM)]"; 0 or -1. */
static int
rfc3339_parse(const char *s, long long *out)
{
	size_t n = strlen(s), i;
	long y, mo, d, h = 0, mi = 0, se = 0, oh, om;
	long long off = 0;

	if (n < 10 || s[4] != '-' || s[7] != '-')
		return -1;
	y = digits(s, 4);
	mo = digits(s + 5, 2);
	d = digits(s + 8, 2);
	if (y < 1970 || y > 9999 || mo < 1 || mo > 12 || d < 1 ||
	    d > days_in_month(y, mo))
		return -1;
	if (n > 10) {
		if ((s[10] != 'T' && s[10] != 't' && s[10] != ' ') || n < 20 ||
		    s[13] != ':' || s[16] != ':')
			return -1;
		h = digits(s + 11, 2);
		mi = digits(s + 14, 2);
		se = digits(s + 17, 2);
		if (h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 60)
			return -1;
		i = 19;
		if (s[i] == '.') {
			for (i++; isdigit((unsigned char)s[i]); i++)
				;
			if (i == 20)
				return -1;
		}
		if ((s[i] == 'Z' || s[i] == 'z') && s[i + 1] == '\0')
			off = 0;
		else if ((s[i] == '+' || s[i] == '-') && strlen(s + i) == 6 &&
		    s[i + 3] == ':') {
			oh = digits(s + i + 1, 2);
			om = digits(s + i + 4, 2);
			if (oh < 0 || oh > 23 || om < 0 || om > 59)
				return -1;
			off = (oh * 60 + om) * 60;
			if (s[i] == '-')
				off = -off;
		} else
			return -1;
	}
	*out =
	    days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - off;
	return 0;
}

int
rc_time_parse(const char *s, long long now_s, long long *out_s, char *errstr,
    size_t errlen)
{
	size_t n = strlen(s);
	unsigned long long v;
	long long u;

	if (strcmp(s, "now") == 0) {
		*out_s = now_s;
		return 0;
	}
	if (n >= 2 && s[0] == '@') {
		if (util_decimal(s + 1, n - 1, 253402300799ULL, &v) !=
		    UTIL_DEC_OK)
			goto bad;
		*out_s = (long long)v;
		return 0;
	}
	if (n >= 2 && (u = unit_seconds(s[n - 1])) != 0 &&
	    util_decimal(s, n - 1, 3650ULL * 86400, &v) == UTIL_DEC_OK) {
		if ((long long)v * u > 3650LL * 86400)
			goto bad;
		*out_s = now_s - (long long)v * u;
		return 0;
	}
	if (rfc3339_parse(s, out_s) == 0)
		return 0;
bad:
	util_err(errstr, errlen,
	    "'%s' is no time: a duration before now (24h, 90m, 3600s, 7d), @<unix seconds>, 2026-11-26T10:00:00Z or 2026-11-26",
	    s);
	return -1;
}

/* Copies a string member into out[outlen]: 0, or -1 when absent or too long. */
static int
member_str(const cJSON *o, const char *name, char *out, size_t outlen,
    size_t *len)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	size_t n;

	out[0] = '\0';
	if (!cJSON_IsString(v) || v->valuestring == NULL)
		return -1;
	if ((n = strlen(v->valuestring)) >= outlen)
		return -1;
	memcpy(out, v->valuestring, n + 1);
	if (len != NULL)
		*len = n;
	return 0;
}

/* A whole number member in [min, max], else -1. */
static long long
member_int(const cJSON *o, const char *name, long long min, long long max)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsNumber(v) || v->valuedouble < (double)min ||
	    v->valuedouble > (double)max ||
	    v->valuedouble != (double)(long long)v->valuedouble)
		return -1;
	return (long long)v->valuedouble;
}

static int
charge_from(const cJSON *o, struct rc_charge *c)
{
	const cJSON *md;
	char status[32];

	memset(c, 0, sizeof(*c));
	if (!cJSON_IsObject(o) ||
	    member_str(o, "id", c->id, sizeof(c->id), NULL) != 0 ||
	    c->id[0] == '\0')
		return -1;
	c->amount = member_int(o, "amount", 0, 999999999999LL);
	(void)member_str(o, "currency", c->currency, sizeof(c->currency), NULL);
	c->created = member_int(o, "created", 0, 253402300799LL);
	(void)member_str(o, "status", status, sizeof(status), NULL);
	c->status = strcmp(status, "succeeded") == 0 ? RC_CHARGE_SUCCEEDED
	    : strcmp(status, "failed") == 0          ? RC_CHARGE_FAILED
	                                             : RC_CHARGE_OTHER;
	md = cJSON_GetObjectItemCaseSensitive(o, "metadata");
	if (cJSON_IsObject(md)) {
		if (member_str(md, "charge_principal", c->principal,
		        sizeof(c->principal), NULL) != 0 ||
		    member_str(md, "charge_idempotency_key", c->key,
		        sizeof(c->key), &c->keylen) != 0 ||
		    c->principal[0] == '\0' || c->keylen == 0) {
			/* both or neither: a half is nobody's request */
			c->principal[0] = '\0';
			c->key[0] = '\0';
			c->keylen = 0;
		}
		if (member_str(md, "charge_request", c->request,
		        sizeof(c->request), NULL) != 0 ||
		    !rc_is_request(c->request))
			c->request[0] = '\0';
	}
	return 0;
}

int
rc_page_parse(const char *body, size_t len, struct rc_charge *out, size_t max,
    size_t *n, int *has_more, char *errstr, size_t errlen)
{
	const cJSON *data, *more, *obj, *it;
	cJSON *root;
	int rc = -1;

	*n = 0;
	*has_more = 0;
	if ((root = cJSON_ParseWithLength(body, len)) == NULL) {
		util_err(errstr, errlen, "the list is not JSON");
		return -1;
	}
	obj = cJSON_GetObjectItemCaseSensitive(root, "object");
	data = cJSON_GetObjectItemCaseSensitive(root, "data");
	more = cJSON_GetObjectItemCaseSensitive(root, "has_more");
	if (!cJSON_IsString(obj) || strcmp(obj->valuestring, "list") != 0 ||
	    !cJSON_IsArray(data) || !cJSON_IsBool(more)) {
		util_err(errstr, errlen,
		    "the answer is not a list (object, data, has_more)");
		goto done;
	}
	cJSON_ArrayForEach(it, data)
	{
		if (*n == max) {
			util_err(errstr, errlen,
			    "the list holds more than %zu charges", max);
			goto done;
		}
		if (charge_from(it, &out[*n]) != 0) {
			util_err(errstr, errlen,
			    "charge %zu of the list has no id", *n + 1);
			goto done;
		}
		(*n)++;
	}
	*has_more = cJSON_IsTrue(more);
	rc = 0;
done:
	cJSON_Delete(root);
	return rc;
}

int
rc_charge_parse(const char *body, size_t len, struct rc_charge *c, char *errstr,
    size_t errlen)
{
	cJSON *root;
	int rc;

	if ((root = cJSON_ParseWithLength(body, len)) == NULL) {
		util_err(errstr, errlen, "the charge is not JSON");
		return -1;
	}
	if ((rc = charge_from(root, c)) != 0)
		util_err(errstr, errlen, "the answer is not a charge object");
	cJSON_Delete(root);
	return rc;
}

int
rc_body_charge(const char *body, size_t len, char id[RC_ID_MAX],
    long long *amount, char currency[RC_CURRENCY_MAX])
{
	const cJSON *obj;
	cJSON *root;
	int rc = -1;

	id[0] = '\0';
	currency[0] = '\0';
	if ((root = cJSON_ParseWithLength(body, len)) == NULL)
		return -1;
	obj = cJSON_GetObjectItemCaseSensitive(root, "object");
	if (cJSON_IsString(obj) && strcmp(obj->valuestring, "charge") == 0 &&
	    member_str(root, "id", id, RC_ID_MAX, NULL) == 0 &&
	    member_str(root, "currency", currency, RC_CURRENCY_MAX, NULL) ==
	        0 &&
	    (*amount = member_int(root, "amount", 0, 999999999999LL)) >= 0)
		rc = 0;
	cJSON_Delete(root);
	return rc;
}

/* Percent-encodes s into b: unreserved bytes as they are. */
static void
url_escape(struct util_buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char e[3];

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '~') {
			util_buf_put(b, s, 1);
			continue;
		}
		e[0] = '%';
		e[1] = hex[c >> 4];
		e[2] = hex[c & 15];
		util_buf_put(b, e, 3);
	}
}

int
rc_list_path(long long gte, long long lte, const char *after, char *out,
    size_t outlen)
{
	struct util_buf b;

	util_buf_init(&b, out, outlen);
	util_buf_str(&b, "/v1/charges?created%5Bgte%5D=");
	util_buf_ll(&b, gte);
	util_buf_str(&b, "&created%5Blte%5D=");
	util_buf_ll(&b, lte);
	util_buf_str(&b, "&limit=");
	util_buf_ll(&b, RC_PAGE_LIMIT);
	if (after != NULL && after[0] != '\0') {
		util_buf_str(&b, "&starting_after=");
		url_escape(&b, after);
	}
	return (int)util_buf_len(&b);
}

int
rc_charge_path(const char *id, char *out, size_t outlen)
{
	struct util_buf b;

	util_buf_init(&b, out, outlen);
	util_buf_str(&b, "/v1/charges/");
	url_escape(&b, id);
	return (int)util_buf_len(&b);
}

int
rc_is_request(const char *s)
{
	size_t p = sizeof(WIRE_KEY_PREFIX) - 1;

	return strlen(s) == WIRE_KEY_LEN &&
	    strncmp(s, WIRE_KEY_PREFIX, p) == 0 &&
	    util_is_hex(s + p, WIRE_KEY_LEN - p);
}

unsigned long long
rc_request_hash(const char *s)
{
	unsigned long long v = 0;
	size_t i;

	for (i = sizeof(WIRE_KEY_PREFIX) - 1;
	     i < sizeof(WIRE_KEY_PREFIX) - 1 + 16; i++)
		v = (v << 4) |
		    (unsigned)(s[i] <= '9' ? s[i] - '0' : s[i] - 'a' + 10);
	return v;
}

unsigned long long
rc_id_hash(const char *s, size_t n)
{
	unsigned long long h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}
