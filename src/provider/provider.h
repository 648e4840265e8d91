/*
 * provider.h - the payment provider as the use case sees it: one interface
 * (provider_charge_start with a completion callback), two implementations
 * chosen once per loop: the in-process simulation below (provider_url
 * empty: CGI test set-ups, unit tests, like-for-like benchmarks) and the
 * HTTP(S) client of provider_http.h (a Stripe-compatible peer).
 *
 * The simulation is idempotent like a real provider without shared state:
 * the charge id is a keyed hash of the principal, the Idempotency-Key and
 * the request's fingerprint, so the same request under a key always gets
 * the same charge, and a different request under a reused key (after its
 * FAILED record expired) is a new charge. Every call appends one line to
 * the ledger file.
 */
#ifndef CHARGE_PROVIDER_H
#define CHARGE_PROVIDER_H

#include <stddef.h>

#include <uv.h>

#include "config.h"
#include "digest.h"
#include "validate.h"

enum provider_outcome {
	PROV_SUCCEEDED, /* a charge: charge_id, created */
	PROV_DECLINED,  /* a failed charge: charge_id, decline_code */
	PROV_ERROR,     /* definitive failure, nothing charged (502) */
	PROV_TIMEOUT,   /* the simulation's tok_providerTimeout (unknown) */
	PROV_LAPSED,    /* not called: the caller's deadline had passed */
	PROV_UNKNOWN,   /* ambiguous at the deadline: may have charged */
	PROV_ABSENT,    /* a probe proved the provider has no charge for it */
};

#define PROVIDER_ID_MAX 256 /* bytes of a provider's charge id, NUL included */
#define PROVIDER_CODE_MAX 64
#define PROVIDER_REQUEST_MAX 80 /* metadata.charge_request, NUL included */
#define PROVIDER_CURRENCY_MAX 8

struct provider_result {
	enum provider_outcome outcome;
	char charge_id[PROVIDER_ID_MAX]; /* "ch_..." */
	const char
	    *decline_code; /* static or decline_buf; NULL unless declined */
	char decline_buf[PROVIDER_CODE_MAX];
	long long created; /* Unix seconds, the provider's */
	int attempts;      /* deliveries made for this call */
	/* what the charge object said of itself (settle_is_ours) */
	char seen_request[PROVIDER_REQUEST_MAX]; /* metadata.charge_request */
	long long seen_amount;
	char seen_currency[PROVIDER_CURRENCY_MAX];
	int replayed; /* the first delivery was answered Idempotent-Replayed: true */
	/*
	 * A read-only probe sent nothing: the record's quiet point (Unix ms)
	 * it keeps when recorded unknown again; 0: this call may have sent
	 * (the record's time then)
	 */
	long long quiet_ms;
	/* a probe cut short: where the next one goes on from (0: the top) */
	long long probe_lte;
	int mismatches; /* charges that were not this request's (alert) */
	int refused_after_ambiguity; /* 4xx after a delivery that may have executed (alert) */
	char why[128]; /* for the log: what the last attempt came to */
};

/* What one charge asks the provider; borrowed for the call. */
struct provider_call {
	const char *principal;
	const char *key; /* the client's Idempotency-Key */
	size_t keylen;
	const char *fingerprint; /* hex SHA-256 of the request */
	/* what it asks for: amount, currency, source, the canonical text */
	const struct charge_params *params;
	/*
	 * Monotonic microseconds: when the claim stops protecting the key
	 * (less the time a record takes). No attempt starts after it.
	 */
	long long deadline_us;
	/* 1: the outcome was unknown before (a retry or the completer asks again) */
	int resume;
	/*
	 * 1: past the execute window (settle_step): read only, never send the
	 * charge again; list the provider's charges for one carrying this
	 * request (every page). Its "none" proves absence only when asked
	 * after quiet_ms + provider_timeout_ms.
	 */
	int probe;
	long long created_ms; /* Unix ms: the request's first claim (probe) */
	/* Unix ms: no delivery starts at or after it (a re-send: the end of the execute window); 0: none */
	long long resend_until_ms;
	long long
	    quiet_ms; /* Unix ms: the latest an earlier delivery may have been sent (probe) */
	/*
	 * The request's id and W3C trace, for the log and sent on as
	 * X-Request-Id and traceparent (NULL: none, e.g. the completer's).
	 */
	const char *request_id;
	const char *trace_id;
	const char *traceparent;
	/* a probe: the list goes on from created[lte] = this (0: the top) */
	long long probe_lte;
};

/*
 * The request's part of call: who asks (principal, key[0..keylen)), its
 * fingerprint, and what it asks for (params). All borrowed; the rest of
 * call is left as it is.
 */
void provider_call_request(struct provider_call *call, const char *principal,
    const char *key, size_t keylen, const char *fingerprint,
    const struct charge_params *params);

/* Called exactly once per call, never before provider_charge_start returned. */
typedef void provider_cb(const struct provider_result *res, void *arg);

/* One implementation: a table of operations, chosen once per loop. */
struct provider_ops {
	int (*start)(void *impl, const struct provider_call *call,
	    provider_cb *cb, void *arg);
	void (*free)(void *impl);
	/* NULL: the implementation has no API key (the simulation) */
	int (*set_api_key)(void *impl, const char *key);
};

struct provider {
	const struct provider_ops *ops;
	void *impl;
};

/*
 * Asks the provider for one charge. 0 (cb will be called), or -1 when it
 * could not start (ENOMEM; cb will not be called).
 */
int provider_charge_start(struct provider *p, const struct provider_call *call,
    provider_cb *cb, void *arg);

/*
 * NULL-safe. Calls still pending get their callback first (PROV_UNKNOWN,
 * "shutting down"). Run the loop afterwards until its handles closed.
 */
void provider_free(struct provider *p);

/*
 * A reload's provider_api_key: calls started from now on send it. 0, or -1
 * (too long: the old one stays).
 */
int provider_set_api_key(struct provider *p, const char *key);

/*
 * The in-process simulation on loop: the token decides, after
 * provider_latency_ms (provider_timeout_ms for tok_providerTimeout, whose
 * outcome is then unknown; asked again, it answers PROV_ABSENT: it knows it
 * never charged). NULL on ENOMEM.
 */
struct provider *provider_sim_new(uv_loop_t *loop, const struct config *cfg,
    int *ledger_fd);

/* The outcome the token decides; decline_code set for declines. Pure. */
enum provider_outcome provider_outcome_for(const char *source,
    const char **decline_code);

/*
 * HMAC-SHA256(secret, principal NUL key NUL fingerprint): what names one
 * request under one key, for the in-process charge id and the downstream
 * Idempotency-Key alike. 0 or -1 (a part too long).
 */
int provider_request_mac(const char *secret, const char *principal,
    const char *key, size_t keylen, const char *fingerprint,
    unsigned char mac[SHA256_LEN]);

/* "ch_" + the first 24 hex of provider_request_mac. 0 or -1. */
int provider_charge_id(const char *secret, const char *principal,
    const char *key, size_t keylen, const char *fingerprint,
    char out[4 + CHARGE_ID_HEX_LEN]);

/*
 * The two halves of a call, for an event loop that waits in between
 * without a thread. provider_prepare: the outcome the source token decides,
 * the charge id, and *delay_ms, how long the provider takes to answer
 * (provider_latency_ms, or provider_timeout_ms for tok_providerTimeout).
 * 0, or -1 (a part too long).
 */
int provider_prepare(const struct config *cfg, const char *principal,
    const char *key, size_t keylen, const char *fingerprint, const char *source,
    struct provider_result *out, int *delay_ms);

/*
 * After the delay: deadline_us (monotonic, 0 for none) is when the
 * caller's claim on the key stops protecting it: a call that reaches the
 * charge after it charges nothing and answers PROV_LAPSED, as a real
 * provider drops a request past its deadline. Otherwise sets created and
 * appends the ledger line (one write(2) of at most LEDGER_LINE_MAX bytes
 * on an O_APPEND descriptor, no fsync: bounded, so it runs on the loop).
 * *ledger_fd is the caller's (-1: opened on first use). 0, or -1 when the
 * ledger cannot be written (a provider error for the caller).
 */
int provider_complete(const struct config *cfg, int *ledger_fd,
    const char *principal, const char *key, size_t keylen, long long amount,
    const char *currency, long long deadline_us, struct provider_result *out);

/* Both halves with a sleep between: for tests and tools, not a loop. */
int provider_charge(const struct config *cfg, int *ledger_fd,
    const char *principal, const char *key, size_t keylen,
    const char *fingerprint, long long amount, const char *currency,
    const char *source, long long deadline_us, struct provider_result *out);

/* Opens the ledger into *ledger_fd unless already open. 0 or -1 (errno). */
int provider_open(const char *path, int *ledger_fd);

/* Closes a ledger descriptor opened by provider_charge; sets it to -1. */
void provider_close(int *ledger_fd);

#endif
