/*
 * provider_wire.h - the pure parts of talking to a Stripe-compatible
 * provider over HTTP: the downstream Idempotency-Key, the form body, the
 * one table that classifies an attempt, the provider's JSON, the backoff
 * between attempts and the completer's schedule. No I/O.
 */
#ifndef CHARGE_PROVIDER_WIRE_H
#define CHARGE_PROVIDER_WIRE_H

#include <stddef.h>

#include "metrics.h"
#include "provider.h"
#include "settle.h"

#define WIRE_KEY_PREFIX "charge_"
/* "charge_" + 64 hex + NUL */
#define WIRE_KEY_LEN (sizeof(WIRE_KEY_PREFIX) - 1 + 64)

/*
 * The downstream key: "charge_" + hex HMAC-SHA256(secret, principal NUL
 * key NUL fingerprint), the same on every attempt, process and re-run.
 * 0, or -1 (a part too long).
 */
int wire_downstream_key(const char *secret, const char *principal,
    const char *key, size_t keylen, const char *fingerprint,
    char out[WIRE_KEY_LEN + 1]);

/*
 * The form body of POST /v1/charges for call: its amount, currency and
 * source, the description of its canonical text (none sent when null),
 * metadata[charge_principal], metadata[charge_idempotency_key] and
 * metadata[charge_request] (dkey, the downstream key: what proves a charge
 * is this request's). Values percent-encoded. Malloc'd, NUL-terminated,
 * length in *len; NULL on ENOMEM or when call->params->canonical is not a
 * charge's canonical text.
 */
char *wire_form_body(const struct provider_call *call, const char *dkey,
    size_t *len);

#define WIRE_LIST_LIMIT 100 /* charges per page of the list, Stripe's most */

/*
 * The query string of one page of the charges list (GET /v1/charges):
 * created in [gte, lte] (Unix seconds), WIRE_LIST_LIMIT a page, after the
 * charge id after (NULL or "": the first page). Length, or -1 when it does
 * not fit.
 */
int wire_list_query(long long gte, long long lte, const char *after, char *out,
    size_t outlen);

/*
 * The query string of one page of the search for the charges that carry
 * the downstream key dkey (GET /v1/charges/search):
 * query=metadata['charge_request']:'dkey', WIRE_LIST_LIMIT a page, the
 * page token page (NULL or "": the first; percent-encoded here). Length,
 * or -1 when it does not fit or dkey is not letters, digits and '_'.
 */
int wire_search_query(const char *dkey, const char *page, char *out,
    size_t outlen);

/* What one attempt came to, as the classification table sees it. */
struct wire_attempt {
	long status;          /* HTTP status; 0: no answer (transport) */
	const char *err_type; /* error.type of the body, or NULL */
	const char *err_code; /* error.code, or NULL */
	int should_retry;     /* Stripe-Should-Retry: 1, 0, -1 absent */
};

enum wire_class {
	WIRE_CHARGE,   /* 200: recorded completed */
	WIRE_DECLINE,  /* 402: recorded failed with the failed charge */
	WIRE_REJECTED, /* a 4xx of the request: recorded failed, 502 */
	WIRE_RETRY,    /* retried with the same key within the deadline */
	WIRE_BUG, /* 400 idempotency_error: logged, unknown (never failed) */
};

/* The row of the table that a matched: its classes and its metrics label. */
struct wire_verdict {
	enum wire_class cls;
	enum settle_class settle; /* what the attempt proves */
	enum metrics_attempt
	    attempt;       /* charge_provider_attempts_total{class} */
	const char *label; /* static: its label, metrics_attempt_labels */
};

struct wire_verdict wire_classify(const struct wire_attempt *a);

/*
 * Clears what an answer's parse leaves in res: outcome (PROV_UNKNOWN), the
 * charge id, the decline code, created and what the charge said of itself.
 * attempts, replayed, why and the alert counts are kept.
 */
void wire_result_clear(struct provider_result *res);

/* One answered attempt as the socket saw it. */
struct wire_answer {
	long status;      /* not 0 */
	const char *body; /* NULL: none */
	size_t len;
	int should_retry; /* Stripe-Should-Retry: 1, 0, -1 absent */
	int replayed;     /* this answer said Idempotent-Replayed: true */
};

/*
 * What one answered attempt proves, from its own answer alone (issue 36):
 * res is cleared first, and keeps what the answer said only when it is a
 * charge proven this request's (SC_CHARGE: e) or a decline (SC_DECLINE).
 * A 200 that is no succeeded charge, a 402 without an error object, and a
 * saved answer replayed that proves neither (Idempotent-Replayed on a
 * refusal) are SC_MAYBE. *v: the table's row; code: the error's code ("":
 * none). Pure.
 */
enum settle_class wire_answer_class(const struct wire_answer *a,
    const struct settle_expect *e, struct provider_result *res,
    struct wire_verdict *v, char code[PROVIDER_CODE_MAX]);

/*
 * A 200's charge object into res (PROV_SUCCEEDED: id, created; and what it
 * says of itself: seen_request, seen_amount, seen_currency). 0, or -1
 * when the body is not a succeeded charge object.
 */
int wire_parse_charge(const char *body, size_t len,
    struct provider_result *res);

/*
 * An error body: type and code copied into type/code (each
 * PROVIDER_CODE_MAX; "" when absent); for a 402 also res (PROV_DECLINED:
 * decline_code, and the charge id from error.charge, "" when it names
 * none). 0, or -1 when no error object.
 */
int wire_parse_error(const char *body, size_t len, long status,
    char type[PROVIDER_CODE_MAX], char code[PROVIDER_CODE_MAX],
    struct provider_result *res);

/*
 * One page of the charges list: the first charge whose metadata names the
 * request e->request. PROBE_FOUND (res filled: PROV_SUCCEEDED) or
 * PROBE_FOUND_DECLINED (PROV_DECLINED) when it is this request's
 * (settle_is_ours); PROBE_NOT_OURS when one names the request but its
 * amount or currency differ (and none is ours); PROBE_NONE when none on
 * this page names it; PROBE_INCOMPLETE when the body is not a list.
 * *has_more: the list's has_more; after (PROVIDER_ID_MAX): the page's last
 * charge id, for the next page's starting_after ("" when the page is empty);
 * *last_created (NULL: not asked): that charge's created (0: none).
 */
enum settle_probe wire_parse_list(const char *body, size_t len,
    const struct settle_expect *e, struct provider_result *res, int *has_more,
    char after[PROVIDER_ID_MAX], long long *last_created);

/*
 * One page of the search (GET /v1/charges/search, a "search_result"), as
 * wire_parse_list reads a list's; next (PROVIDER_ID_MAX): its next_page
 * token ("" when none; a page with has_more and no token, or one too long,
 * is PROBE_INCOMPLETE).
 */
enum settle_probe wire_parse_search(const char *body, size_t len,
    const struct settle_expect *e, struct provider_result *res, int *has_more,
    char next[PROVIDER_ID_MAX]);

#define WIRE_BACKOFF_BASE_MS 250
#define WIRE_BACKOFF_CAP_MS 2000

/*
 * The pause before attempt n+1 after n failed attempts (n >= 1), with
 * jitter r in [0, 1): base 250 ms doubling per attempt, times 1 + r,
 * capped at 2 s. So the first pause is 250-500 ms.
 */
long wire_backoff_ms(int n, double r);

/*
 * When to ask next about a record created at created_ms, now now_ms: the
 * first step whose age is still ahead. Sets *last when it is the last
 * step (or all are past: then now_ms + the last interval). Unix ms.
 */
long long wire_schedule_next(const long *steps, int n, long long created_ms,
    long long now_ms, int *last);

/*
 * A charge object already parsed (a webhook event's data.object) into res
 * as a poll would read it: PROV_SUCCEEDED (id, created) or PROV_DECLINED
 * (id, created, decline_code). 0, or -1 when it is not a settled charge.
 */
struct cJSON;
int wire_charge_object(const struct cJSON *o, struct provider_result *res);

#endif
