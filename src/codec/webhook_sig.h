/*
 * webhook_sig.h - the provider's webhook signature as Stripe documents it:
 * Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]; each v1 is
 * the hex HMAC-SHA256, keyed with the endpoint's secret, of "<t>.<raw
 * body>". Several v1 values come while a secret is rolled; other schemes
 * (v0, ...) are ignored. Pure: the caller passes the clock.
 */
#ifndef CHARGE_WEBHOOK_SIG_H
#define CHARGE_WEBHOOK_SIG_H

#include <stddef.h>

enum wsig_status {
	WSIG_OK,        /* a v1 matches a secret, t within the tolerance */
	WSIG_MISSING,   /* no header, or an empty one (400) */
	WSIG_MALFORMED, /* not t=<unix>,v1=<64 hex>[,...] (400) */
	WSIG_NO_V1,     /* a t but no v1 signature (400) */
	WSIG_MISMATCH, /* no v1 is the HMAC of the payload with a secret (401) */
	WSIG_STALE,    /* signed, but t is older than the tolerance (401) */
	WSIG_FUTURE, /* signed, but t is ahead by more than the tolerance (401) */
	WSIG_ERROR, /* the digest failed (500) */
};

#define WSIG_HEX_LEN 64 /* a v1 signature: hex HMAC-SHA256 */

/*
 * Verifies header (NULL: missing) over payload[0..len) with any of the
 * nsecrets secrets (NUL-terminated; empty ones skipped), now_s the wall
 * clock (Unix seconds): t may differ from it by at most tolerance_s either
 * way. As Stripe's libraries do, the signature is checked first, the time
 * second: STALE and FUTURE are said only of a signed header. Constant-time
 * comparison. *t_out (may be NULL): the header's t once it parsed.
 */
enum wsig_status webhook_sig_verify(const char *header, const char *payload,
    size_t len, const char *const *secrets, size_t nsecrets, long long now_s,
    long tolerance_s, long long *t_out);

/*
 * The v1 signature of payload at t with secret, as hex into
 * out[WSIG_HEX_LEN + 1] (what the provider sends; for tests and tools).
 * 0 or -1.
 */
int webhook_sig_sign(const char *secret, long long t, const char *payload,
    size_t len, char out[WSIG_HEX_LEN + 1]);

/* What is wrong, one sentence for a problem's detail (static). */
const char *webhook_sig_detail(enum wsig_status st);

/* A short name for logs and metrics ("bad_signature", ...; static). */
const char *webhook_sig_name(enum wsig_status st);

#endif
