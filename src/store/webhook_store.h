/*
 * webhook_store.h - what the provider's webhook route keeps in Redis
 * beside the records, through lua/webhook.lua (one key per call): a
 * record read without a write (peek), and each event's id (<prefix>event:
 * <id>), claimed by one delivery and then kept with what it came to, so a
 * redelivered event changes nothing.
 */
#ifndef CHARGE_WEBHOOK_STORE_H
#define CHARGE_WEBHOOK_STORE_H

#include <stddef.h>

#include "idem.h"
#include "redis.h"

enum wstore_status {
	WSTORE_NEW,       /* begin: this delivery decides the event */
	WSTORE_SEEN,      /* begin: decided before: res.seen */
	WSTORE_BUSY,      /* begin: another delivery is deciding it now */
	WSTORE_DONE,      /* done, forget */
	WSTORE_FOUND,     /* peek: res.rec, res.fingerprint, res.request */
	WSTORE_ABSENT,    /* peek: no record */
	WSTORE_ERR_REDIS, /* errstr */
};

#define WSTORE_SEEN_MAX 32 /* what an event came to: "settled", ... */

struct wstore_result {
	enum wstore_status st;
	char seen[WSTORE_SEEN_MAX];
	/*
	 * peek: state, status, body (inline, malloc'd: the callback may take
	 * it), body_file, body_len, body_sha256 of the record
	 */
	struct idem_record rec;
	char fingerprint[65];
	char *request; /* unknown records: the kept request (freed after) */
	size_t request_len;
	const char *errstr;
};

typedef void wstore_cb(struct wstore_result *res, void *arg);

/* Room for <prefix>event:<id> (an id of at most WEBHOOK_EVENT_ID_MAX). */
#define WSTORE_EKEY_MAX (KEY_PREFIX_MAX + 8 + WEBHOOK_EVENT_ID_MAX)

/* Builds <prefix>event:<id> into out. Length, or -1 if too long. */
int wstore_event_name(char *out, size_t outlen, const char *prefix,
    const char *id);

/*
 * Each sends one script and returns 0 (cb will be called once, never
 * before the call returned), or -1 (ENOMEM; cb will not be called).
 * wstore_peek: FOUND or ABSENT. wstore_event_begin: NEW (claimed for
 * lease_ms), SEEN, BUSY. wstore_event_done: DONE (kept ttl_ms).
 * wstore_event_forget: DONE (the claim gone unless decided meanwhile).
 * Any of them: ERR_REDIS.
 */
int wstore_peek(struct redis_client *c, const char *rkey, wstore_cb *cb,
    void *arg);
int wstore_event_begin(struct redis_client *c, const char *ekey,
    long long lease_ms, wstore_cb *cb, void *arg);
int wstore_event_done(struct redis_client *c, const char *ekey,
    const char *result, long long ttl_ms, wstore_cb *cb, void *arg);
int wstore_event_forget(struct redis_client *c, const char *ekey, wstore_cb *cb,
    void *arg);

/* Loads the script's SHA-1. 0 or -1. */
int wstore_init(void);

#endif
