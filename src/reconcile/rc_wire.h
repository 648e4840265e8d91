/*
 * rc_wire.h - the pure parts of charge-reconcile: the window's times as
 * the command line gives them, a page of the provider's list of charges
 * (GET /v1/charges), and the charge a completed record's 201 body names.
 * No I/O, no clock: the caller passes "now".
 */
#ifndef CHARGE_RC_WIRE_H
#define CHARGE_RC_WIRE_H

#include <stddef.h>

#include "defaults.h"
#include "provider_wire.h"

#define RC_ID_MAX 256      /* bytes of a provider's charge id, NUL included */
#define RC_CURRENCY_MAX 16 /* bytes of a currency code, NUL included */
#define RC_PAGE_LIMIT 100  /* charges per page: the list API's maximum */

/*
 * When: a time for --since or --until, in Unix seconds. Accepts "now"; a
 * duration before now, "<N>s", "<N>m", "<N>h", "<N>d" ("24h"); "@<unix
 * seconds>"; an RFC 3339 time "2026-11-26T10:00:00Z" (a fraction is
 * dropped, an offset "+01:00" is honoured); a date "2026-11-26" (midnight
 * UTC). 0, or -1 with errstr.
 */
int rc_time_parse(const char *s, long long now_s, long long *out_s,
    char *errstr, size_t errlen);

enum rc_charge_status {
	RC_CHARGE_SUCCEEDED,
	RC_CHARGE_FAILED, /* a declined charge: no money taken */
	RC_CHARGE_OTHER,  /* pending or anything else */
};

/* One charge of the provider's list, as reconciliation needs it. */
struct rc_charge {
	char id[RC_ID_MAX];
	long long amount; /* minor units; -1 when absent or not a number */
	char currency[RC_CURRENCY_MAX]; /* lower case as the provider says */
	enum rc_charge_status status;
	long long created; /* Unix seconds */
	/* metadata the responder sends; "" when absent or out of bounds */
	char principal[PRINCIPAL_MAX + 1];
	char key[IDEM_KEY_MAX + 1];
	size_t keylen;
	char request[WIRE_KEY_LEN + 1]; /* the downstream key */
};

/*
 * Parses a list page {"object":"list","data":[...],"has_more":bool} into
 * out[0..max): *n charges, *has_more. Members the charge does not carry, or
 * carries out of our bounds, are left empty (a charge without the
 * responder's metadata is someone else's). 0, or -1 with errstr when the
 * body is not a list, holds more than max charges, or a charge has no id.
 */
int rc_page_parse(const char *body, size_t len, struct rc_charge *out,
    size_t max, size_t *n, int *has_more, char *errstr, size_t errlen);

/*
 * One charge object (GET /v1/charges/<id>) into c. 0, or -1 with errstr.
 */
int rc_charge_parse(const char *body, size_t len, struct rc_charge *c,
    char *errstr, size_t errlen);

/*
 * The charge a completed record's body (the 201 charge object of
 * docs/API.md §11) names: id, amount, currency. 0, or -1 when the body is
 * no charge object.
 */
int rc_body_charge(const char *body, size_t len, char id[RC_ID_MAX],
    long long *amount, char currency[RC_CURRENCY_MAX]);

/*
 * The path and query of one page of the list: GET /v1/charges with
 * created[gte]=gte, created[lte]=lte (Unix seconds), limit=RC_PAGE_LIMIT
 * and, after the first page, starting_after=after (the last id of the
 * page before; NULL or "" for the first). Brackets and the id are
 * percent-encoded. Its length, or -1 when it does not fit.
 */
int rc_list_path(long long gte, long long lte, const char *after, char *out,
    size_t outlen);

/* GET /v1/charges/<id, percent-encoded>. Its length, or -1. */
int rc_charge_path(const char *id, char *out, size_t outlen);

/*
 * 1 when s is a downstream key as the responder makes them ("charge_" and
 * 64 lower-case hex digits), else 0.
 */
int rc_is_request(const char *s);

/*
 * The first 64 bits of a downstream key's HMAC (its first 16 hex digits
 * after "charge_"): the request's name in the table. s must pass
 * rc_is_request.
 */
unsigned long long rc_request_hash(const char *s);

/* 64-bit FNV-1a of s[0..n): a charge id's name in the table. */
unsigned long long rc_id_hash(const char *s, size_t n);

#endif
