/*
 * provider.h - the simulated payment provider. Idempotent like a real one
 * without shared state: the charge id is a keyed hash of the principal, the
 * Idempotency-Key and the request's fingerprint, so the same request under a
 * key always gets the same charge, and a different request under a reused
 * key (after its FAILED record expired) is a new charge. Every call appends
 * one line to the ledger file.
 */
#ifndef CHARGE_PROVIDER_H
#define CHARGE_PROVIDER_H

#include <stddef.h>

#include "config.h"

enum provider_outcome {
	PROV_SUCCEEDED,
	PROV_DECLINED,
	PROV_ERROR,
	PROV_TIMEOUT,
	PROV_LAPSED, /* not called: the caller's deadline had passed */
};

struct provider_result {
	enum provider_outcome outcome;
	char charge_id[4 + CHARGE_ID_HEX_LEN]; /* "ch_" + hex */
	const char *decline_code; /* static; NULL unless declined */
	long long created;        /* Unix seconds */
};

/* The outcome the token decides; decline_code set for declines. Pure. */
enum provider_outcome provider_outcome_for(const char *source,
    const char **decline_code);

/*
 * "ch_" + 24 hex of HMAC-SHA256(secret, principal NUL key NUL fingerprint).
 * 0 or -1 (a part too long).
 */
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
