/*
 * redis.h - one Redis connection per worker: connect (TCP or unix socket),
 * AUTH, SELECT, timeouts, reconnect, EVALSHA with NOSCRIPT reload, and the
 * start-up check that Redis does not evict. Behind a redis-sentinel:// URL
 * the connection goes to the primary the sentinels name, and again after a
 * failover; behind redis-cluster:// each script goes to the node owning its
 * key (one connection per node, see cluster.h). Records may be followed by
 * WAIT in the same round trip.
 */
#ifndef CHARGE_REDIS_H
#define CHARGE_REDIS_H

#include <stddef.h>

#include <hiredis.h>

#include "defaults.h"
#include "redis_url.h"

struct lua_script {
	const char *name; /* "claim" */
	const char *src;
	size_t len;
	char sha[41]; /* filled by redis_script_init() */
};

/* Computes the script's SHA-1. 0 or -1. */
int redis_script_init(struct lua_script *s);

struct cluster;

struct redis_conn {
	redisContext *ctx; /* NULL until connected; freed after any error */
	struct redis_target target;
	int timeout_ms;     /* connect and reply; bounds failover retries */
	int io_timeout_ms;  /* timeout_ms, plus the WAIT timeout */
	int min_replicas;   /* redis_eval_durable() sends WAIT; 0: never */
	char wait_cmd[128]; /* "WAIT <min_replicas> <ms>", RESP-framed */
	size_t wait_len;
	/*
	 * 1 after a failed command that may have reached Redis (its reply was
	 * lost): a script's writes may or may not have happened. 0 when it
	 * failed before being sent, or Redis answered with an error.
	 */
	int outcome_unknown;
	/* 1 when the last connect found a Redis that may evict records */
	int evicting;
	/* sentinel: the primary last connected to, the sentinel to ask first */
	char primary[REDIS_HOST_MAX + 1];
	int primary_port;
	int sentinel_next;
	struct cluster *cluster; /* cluster: slot map and nodes, lazily */
	char errstr[128];
};

/* Prepares (does not connect). */
void redis_conn_init(struct redis_conn *c, const struct redis_target *t,
    int timeout_ms);
/*
 * Makes redis_eval_durable() wait for min_replicas replicas (0: it does
 * not), at most replica_timeout_ms; replies may then take that much longer.
 * Call before the first command.
 */
void redis_conn_set_wait(struct redis_conn *c, int min_replicas,
    int replica_timeout_ms);
/* NULL-safe; frees the context(s). */
void redis_conn_close(struct redis_conn *c);

/*
 * Runs the script with one key and argc arguments (binary-safe). Connects
 * first when needed; retries once on a connection that was found closed.
 * Behind sentinels, an error that means nothing ran on a node that is no
 * longer the primary (READONLY, MASTERDOWN, LOADING) or a failed connect
 * sends it again to the primary the sentinels name, until timeout_ms; in a
 * cluster it follows MOVED and ASK, and retries TRYAGAIN and CLUSTERDOWN
 * until timeout_ms. Returns the reply (caller frees with freeReplyObject),
 * or NULL with c->errstr set: connection errors, timeouts and error replies
 * (OOM, READONLY, NOPERM...) alike. After NULL the outcome of a write is
 * unknown.
 */
redisReply *redis_eval(struct redis_conn *c, struct lua_script *s,
    const char *key, size_t keylen, int argc, const char **argv,
    const size_t *argvlen);

/*
 * redis_eval(), followed in the same round trip by WAIT when min_replicas
 * is set. *durable: 1 when that many replicas acknowledged this
 * connection's writes in time (always 1 without WAIT), else 0 (the reply
 * is still returned).
 */
redisReply *redis_eval_durable(struct redis_conn *c, struct lua_script *s,
    const char *key, size_t keylen, int argc, const char **argv,
    const size_t *argvlen, int *durable);

/*
 * PING: the one Redis, the primary behind the sentinels, or every primary
 * of the cluster (which must serve every slot). 0 or -1 (errstr).
 */
int redis_ping(struct redis_conn *c);

#endif
