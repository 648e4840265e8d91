/*
 * redis.h - one Redis connection per worker: connect (TCP or unix socket),
 * AUTH, SELECT, timeouts, reconnect, EVALSHA with NOSCRIPT reload, and the
 * start-up check that Redis does not evict.
 */
#ifndef CHARGE_REDIS_H
#define CHARGE_REDIS_H

#include <stddef.h>

#include <hiredis.h>

#include "defaults.h"
#include "redis_url.h"

struct lua_script {
	const char *name;       /* "claim" */
	const char *src;
	size_t len;
	char sha[41];           /* filled by redis_script_init() */
};

/* Computes the script's SHA-1. 0 or -1. */
int redis_script_init(struct lua_script *s);

struct redis_conn {
	redisContext *ctx;      /* NULL until connected; freed after any error */
	struct redis_target target;
	int timeout_ms;
	/*
	 * 1 after a failed command that may have reached Redis (its reply was
	 * lost): a script's writes may or may not have happened. 0 when it
	 * failed before being sent, or Redis answered with an error.
	 */
	int outcome_unknown;
	/* 1 when the last connect found a Redis that may evict records */
	int evicting;
	char errstr[128];
};

/* Prepares (does not connect). */
void redis_conn_init(struct redis_conn *c, const struct redis_target *t,
    int timeout_ms);
/* NULL-safe; frees the context. */
void redis_conn_close(struct redis_conn *c);

/*
 * Runs the script with one key and argc arguments (binary-safe). Connects
 * first when needed; retries once on a connection that was found closed.
 * Returns the reply (caller frees with freeReplyObject), or NULL with
 * c->errstr set: connection errors, timeouts and error replies (OOM,
 * READONLY, NOPERM...) alike. After NULL the outcome of a write is unknown.
 */
redisReply *redis_eval(struct redis_conn *c, struct lua_script *s,
    const char *key, size_t keylen, int argc, const char **argv,
    const size_t *argvlen);

/* PING. 0 or -1 (errstr). */
int redis_ping(struct redis_conn *c);

#endif
