/*
 * webhook.h - the simulator's webhooks, sent like Stripe's: one signed event
 * per charge outcome (charge.succeeded, charge.failed) to every configured
 * endpoint, over a small HTTP/1.1 client on the server's libuv loop
 * (uv_tcp or uv_pipe, llhttp reading the answer; never blocking), retried
 * with exponential backoff on a non-2xx answer or none, with seeded faults
 * (dropped, duplicated, delayed so that later events overtake them). Events
 * and their delivery attempts are kept in memory (bounded) for
 * GET /_sim/events.
 */
#ifndef SIM_WEBHOOK_H
#define SIM_WEBHOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "defaults.h"
#include "store.h"

struct sim_webhook_config {
	const char *urls[SIM_MAX_WEBHOOK_URLS];
	size_t n_urls;
	const char *secrets[SIM_MAX_WEBHOOK_SECRETS]; /* each signs a v1 */
	size_t n_secrets;
	unsigned attempts;     /* per delivery, the first included */
	unsigned retry_ms;     /* the first backoff, doubled per attempt */
	unsigned retry_max_ms; /* the backoff's cap */
	unsigned timeout_ms;   /* one attempt, connect to the answer's end */
	double drop_rate;      /* a delivery is never sent */
	double dup_rate;       /* a delivery is sent twice */
	double shuffle_rate;   /* a delivery waits up to shuffle_ms first */
	unsigned shuffle_ms;
	size_t max_events;  /* kept for /_sim/events; the oldest go first */
	size_t concurrency; /* attempts in flight at once */
	uint64_t seed;      /* of the fault draws */
};

struct sim_webhooks;

/*
 * Checks that url is http://HOST[:PORT][/PATH] (HOST an IPv4 or [IPv6]
 * literal, or localhost) or unix:SOCKET[:/PATH]; false with a message.
 */
bool sim_webhook_url_check(const char *url, char *err, size_t errlen);

/* The endpoints of cfg, ready on loop (cfg must outlive them). */
struct sim_webhooks *sim_webhooks_new(uv_loop_t *loop,
    const struct sim_webhook_config *cfg);

/*
 * A charge was created (status 200: charge.succeeded, 402: charge.failed):
 * its event is queued for every endpoint; the first attempts start at
 * sim_webhooks_committed. idem[0..idem_len) is the request's
 * Idempotency-Key (idem NULL: none).
 */
void sim_webhooks_charge(struct sim_webhooks *w, const struct sim_charge *c,
    const char *idem, size_t idem_len);

/* The store's records of this loop turn are on disk (the group commit):
 * the events queued meanwhile may go out. */
void sim_webhooks_committed(struct sim_webhooks *w);

/*
 * Appends {"events":[...]} (oldest first; only those of charge when
 * charge_len > 0) or, with id_len > 0, the one event named id (false when
 * there is none).
 */
bool sim_webhooks_render(struct sim_webhooks *w, struct sim_buf *b,
    const char *id, size_t id_len, const char *charge, size_t charge_len);

/* Appends the "webhooks" member of /_sim/stats: ,"webhooks":{...}. */
void sim_webhooks_stats(const struct sim_webhooks *w, struct sim_buf *b);

/* Stops: no new attempt; those in flight are closed (the loop then ends). */
void sim_webhooks_stop(struct sim_webhooks *w);

/* Frees everything, after the loop has run the close callbacks. */
void sim_webhooks_free(struct sim_webhooks *w);

#endif
