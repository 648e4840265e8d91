/*
 * settle.h - how the attempts of one request, and the read-only probes of
 * its record, settle its outcome (docs/API.md §17.3). Pure: no I/O, no
 * clock; the HTTP client, the in-process provider, the use case, the
 * completer and the webhook route all decide through it.
 *
 * Ambiguity is sticky: once a delivery may have executed (no answer after
 * sending, a 5xx, a 409 in use, a 400 idempotency_error, a saved answer
 * replayed, a charge that is not this request's, an unknown record taken
 * over), only a charge proven this request's, a
 * decline, or a read that proves no charge exists after no delivery can
 * still execute settles it. A refusal (4xx, 401, 403, 404, a certificate)
 * after that proves nothing.
 */
#ifndef CHARGE_SETTLE_H
#define CHARGE_SETTLE_H

#include <stddef.h>

/* What one delivery came to, as far as settling is concerned. */
enum settle_class {
	SC_CHARGE,   /* a succeeded charge proven this request's */
	SC_DECLINE,  /* a 402: declined, with or without the failed charge */
	SC_NOT_OURS, /* a charge object that is not this request's */
	SC_REJECTED, /* the provider refused this delivery (a 4xx): it did not execute */
	SC_NOT_SENT, /* nothing reached the provider (no connection, no TLS) */
	SC_LATER,    /* not executed, try again (429, Stripe-Should-Retry) */
	SC_MAYBE,    /* may have executed: no answer after sending, 5xx, 409 */
	/*
	 * 400 idempotency_error: a delivery under the key executed earlier
	 * with other parameters (another version's form): may have executed,
	 * and every re-send meets the same refusal (an alert)
	 */
	SC_KEY_USED,
};

/* The verdict after an attempt, a probe, or the end of a call. */
enum settle_verdict {
	SV_RETRY,     /* nothing proven yet: another attempt may tell */
	SV_COMPLETED, /* this request's charge */
	SV_DECLINED,  /* a decline: final */
	SV_FAILED,    /* nothing was charged, proven */
	SV_UNKNOWN,   /* still ambiguous: record unknown, ask again later */
};

/* The attempts of one call folded into what they proved. */
struct settle_fold {
	int ambiguous; /* a delivery may have executed */
	int attempts;
	int mismatches; /* charges that were not this request's (alert) */
	int refused_after_ambiguity; /* 4xx after a delivery that may have executed (alert) */
	int key_used; /* idempotency_error: executed earlier with other parameters (alert) */
};

/*
 * Starts the fold of one call. resumed: the record was unknown before (a
 * retry or the completer asks again): ambiguous from the start.
 */
void settle_begin(struct settle_fold *f, int resumed);

/* Folds one attempt in; the verdict so far (SV_RETRY: not settled). */
enum settle_verdict settle_attempt(struct settle_fold *f, enum settle_class c);

/*
 * No further attempt (the deadline came, or retrying cannot help): what
 * the call ends with. Never SV_RETRY.
 */
enum settle_verdict settle_end(const struct settle_fold *f);

/* What a read-only probe (the list of charges, every page) found. */
enum settle_probe {
	PROBE_FOUND,          /* a succeeded charge proven this request's */
	PROBE_FOUND_DECLINED, /* a failed (declined) charge proven this request's */
	PROBE_NONE,           /* every page read: none carries this request */
	PROBE_NOT_OURS, /* one names this request but amount or currency differ */
	PROBE_INCOMPLETE, /* an error, an unreadable page, or too many pages */
};

/*
 * The verdict of a probe whose first page was sent at sent_ms, for a
 * record whose deliveries all went out by quiet_ms (Unix ms); execute_ms:
 * how long after its send a delivery can still execute (settle_execute_ms).
 * "None" proves absence only when the list was asked for after every
 * delivery stopped being able to execute. A 409 (a delivery executing
 * now) is always seen before the record's quiet_ms, so this is never
 * before the last 409 plus execute_ms either.
 */
enum settle_verdict settle_probe(enum settle_probe p, long long sent_ms,
    long long quiet_ms, long long execute_ms);

/*
 * How long after its send a delivery may still execute: the stated
 * assumption provider_execute_max_ms, and never less than one attempt's
 * provider_timeout_ms.
 */
long long settle_execute_ms(long long timeout_ms, long long execute_max_ms);

/*
 * How far the created range of a list reaches beyond the provider's clock
 * as measured (either way): the Date header's second and the answer's
 * trip, and a clock that moved between the delivery and the read.
 */
#define SETTLE_RANGE_MARGIN_MS 60000
/* What one Date measures to: its second and the answer's trip */
#define SETTLE_DATE_RES_MS 2000

/*
 * The created range (Unix seconds, the provider's clock) that holds every
 * charge a delivery sent from created_ms to quiet_ms can have made, when
 * the provider's clock is off_ms ahead of ours (negative: behind), give or
 * take margin_ms: [created + off - margin, quiet + execute + off + margin].
 */
void settle_list_range(long long created_ms, long long quiet_ms,
    long long execute_ms, long long off_ms, long long margin_ms,
    long long *gte_s, long long *lte_s);

/*
 * 1 when a list read over a range shifted by used_ms can prove absence:
 * the provider's clock was measured during the read (known: its Date,
 * measured_ms = its Date less our clock when it came) within allowance_ms
 * of ours, and within margin_ms - SETTLE_DATE_RES_MS of the offset the
 * range was shifted by. allowance_ms 0: not measured (the clocks are taken
 * to agree within margin_ms; a provider that sends no Date). Else 0: the
 * read may find a charge but never proves there is none.
 */
int settle_clock_proves(int known, long long measured_ms, long long used_ms,
    long long margin_ms, long long allowance_ms);

/* The times the step of an unknown record is decided on (Unix ms). */
struct settle_clock {
	long long now_ms;
	long long created_ms; /* the request's first claim */
	long long
	    quiet_ms; /* the latest an earlier delivery may have been sent; 0: not known */
	long long window_ms;   /* provider_execute_window_s */
	long long timeout_ms;  /* provider_timeout_ms */
	long long execute_ms;  /* settle_execute_ms */
	long long deadline_ms; /* provider_deadline_ms */
};

enum settle_action {
	SETTLE_RESEND, /* ask again with the same downstream key (may execute) */
	SETTLE_PROBE,  /* read only: list the charges */
};

/*
 * The step for an unknown record taken over, by its client's retry or by
 * the completer alike: re-send only within the execute window after the
 * request was created; after it, probe read-only. *wait_ms: how long to
 * wait before the probe so that its "none" can prove absence (quiet +
 * execute_ms; 0: now); a wait longer than timeout_ms is not worth holding
 * a request for: 0, and the probe can still find a charge but not prove
 * there is none.
 */
enum settle_action settle_step(const struct settle_clock *c,
    long long *wait_ms);

/* The latest moment a delivery of the record may have gone out. */
long long settle_quiet_ms(const struct settle_clock *c);

/* What a charge object says of itself, for settle_is_ours. */
struct settle_seen {
	const char *request; /* metadata.charge_request; NULL: absent */
	long long amount;
	const char *currency;
};

/* What this request sent. */
struct settle_expect {
	const char *request; /* the downstream key */
	long long amount;
	const char *currency;
};

/*
 * 1 when the charge is this request's: its metadata names the request's
 * downstream key and its amount and currency are the request's; else 0.
 */
int settle_is_ours(const struct settle_expect *e, const struct settle_seen *s);

/* Names for logs and metrics (static strings). */
const char *settle_verdict_name(enum settle_verdict v);

#endif
