/*
 * rc_redis.h - charge-reconcile's reads from Redis: the records of a page
 * of charges (HMGET, pipelined), and a walk over every record (SCAN on the
 * single Redis, on the primary the sentinels name, or on every primary of
 * a cluster). Synchronous hiredis, one connection per node: a command-line
 * tool reads one batch after another, and the responder's client (redis.h)
 * runs only one-key scripts on an event loop, with no SCAN and no way to
 * reach every primary. What it shares with the responder is the target
 * (redis_url.h) and the cluster's key space (cluster.h). Reads only: AUTH,
 * SELECT, ROLE, SENTINEL get-master-addr-by-name, CLUSTER SLOTS, HMGET and
 * SCAN are the only commands it sends.
 */
#ifndef CHARGE_RC_REDIS_H
#define CHARGE_RC_REDIS_H

#include <stddef.h>

#include <hiredis.h>

#include "redis_url.h"

struct rc_redis;

/*
 * Connects to t (each command, connecting included, bounded by
 * timeout_ms): the single Redis, the primary the sentinels name (ROLE
 * master), or a cluster's slot map from its seed nodes. NULL with errstr.
 */
struct rc_redis *rc_redis_open(const struct redis_target *t, int timeout_ms,
    char *errstr, size_t errlen);

/* NULL-safe. */
void rc_redis_close(struct rc_redis *r);

/*
 * HMGET key fields... for each of keys[0..n) (lengths keylens), pipelined
 * per node; in a cluster a MOVED or ASK re-reads the slot map and asks
 * again. out[i] receives each key's reply: an array of nfields, or an
 * error reply (WRONGTYPE: the name is no hash); the caller frees each with
 * freeReplyObject. 0, or -1 with errstr (out holds nothing then).
 */
int rc_redis_hmget(struct rc_redis *r, const char *const *keys,
    const size_t *keylens, size_t n, const char *const *fields, int nfields,
    redisReply **out, char *errstr, size_t errlen);

/* A walk over every primary, one SCAN reply at a time. */
struct rc_scan {
	int node;        /* index into the primaries; -1 before the first */
	char cursor[32]; /* "0" to start a node */
	int done;        /* every primary walked */
};

void rc_scan_init(struct rc_scan *it);

/*
 * The next SCAN batch of names matching pattern (COUNT count): *keys is
 * the reply's array of names (the caller frees it with freeReplyObject;
 * it may be empty). 1 while there is more to come, 0 when this was the
 * last batch, -1 with errstr.
 */
int rc_redis_scan(struct rc_redis *r, struct rc_scan *it, const char *pattern,
    int count, redisReply **keys, char *errstr, size_t errlen);

/*
 * The pattern of SCAN MATCH for every record: key_prefix (its glob
 * characters escaped) + "idem:*". Its length, or -1 when it does not fit
 * in out[outlen].
 */
int rc_redis_match(const char *key_prefix, char *out, size_t outlen);

#endif
