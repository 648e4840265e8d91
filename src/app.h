/*
 * app.h - the worker and the routes: /charge, /healthz, /metrics.
 */
#ifndef CHARGE_APP_H
#define CHARGE_APP_H

#include "auth.h"
#include "config.h"
#include "redis.h"
#include "request.h"
#include "response.h"

/* Everything one worker thread owns. */
struct worker {
	const struct config *cfg;
	const struct auth_table *auth;
	struct redis_conn redis;
	int ledger_fd;          /* the provider ledger, -1 until first used */
	int id;
};

/* 0 or -1 (bad redis_url). */
int worker_init(struct worker *w, const struct config *cfg,
    const struct auth_table *auth, int id);
void worker_close(struct worker *w);

/*
 * Opens the worker's Redis connection and ledger before its first request,
 * so that a later shortage of descriptors cannot stop it serving. Failures
 * are logged; the request path retries them.
 */
void worker_warm(struct worker *w);

/* Routes the request and fills resp (always: errors become problems). */
void app_handle(struct worker *w, const struct request *req,
    struct response *resp);

/* The /charge use case (charge.c). */
void charge_handle(struct worker *w, const struct request *req,
    struct response *resp);

#endif
