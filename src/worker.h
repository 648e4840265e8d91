/*
 * worker.h - everything one worker thread owns: its Redis connection and
 * ledger descriptor, with the read-only configuration and API keys.
 */
#ifndef CHARGE_WORKER_H
#define CHARGE_WORKER_H

#include "auth.h"
#include "config.h"
#include "redis.h"

struct worker {
	const struct config *cfg;
	const struct auth_table *auth;
	struct redis_conn redis;
	int ledger_fd; /* the provider ledger, -1 until first used */
	int id;
};

/* Prepares w for cfg->redis (does not connect). */
void worker_init(struct worker *w, const struct config *cfg,
    const struct auth_table *auth, int id);

/* NULL-safe: closes the Redis connection and the ledger. */
void worker_close(struct worker *w);

/*
 * Opens the worker's Redis connection and ledger before its first request,
 * so that a later shortage of descriptors cannot stop it serving. Failures
 * are logged; the request path retries them.
 */
void worker_warm(struct worker *w);

#endif
