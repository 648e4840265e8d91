/*
 * redis_sync.h - Redis read synchronously, for charge-reconcile: the
 * records of a page of charges (HMGET, pipelined), and a walk over every
 * record (SCAN on the single Redis, on the primary the sentinels name, or
 * on every primary of a cluster). Blocking hiredis, one connection per
 * node: a command-line tool reads one batch after another, and the
 * responder's client (redis.h) runs only one-key scripts on an event loop,
 * with no SCAN and no way to reach every primary. What it shares with that
 * client is the target (redis_url.h), the cluster's key space (cluster.h)
 * and how a reply is read (redis.h's redis_reply_* accessors): hiredis's
 * own types stay inside src/store/redis/. Reads only: AUTH, SELECT, ROLE,
 * SENTINEL get-master-addr-by-name, CLUSTER SLOTS, HMGET and SCAN are the
 * only commands it sends.
 */
#ifndef CHARGE_REDIS_SYNC_H
#define CHARGE_REDIS_SYNC_H

#include <stddef.h>

#include "redis_url.h"

struct redis_sync;
/* A reply, read with redis.h's accessors; freed with redis_sync_free. */
struct redis_reply;

/*
 * Connects to t (each command, connecting included, bounded by
 * timeout_ms): the single Redis, the primary the sentinels name (ROLE
 * master), or a cluster's slot map from its seed nodes. NULL with errstr.
 */
struct redis_sync *redis_sync_open(const struct redis_target *t, int timeout_ms,
    char *errstr, size_t errlen);

/* NULL-safe. */
void redis_sync_close(struct redis_sync *r);

/*
 * HMGET key fields... for each of keys[0..n) (lengths keylens), pipelined
 * per node; in a cluster a MOVED or ASK re-reads the slot map and asks
 * again. out[i] receives each key's reply: an array of nfields, or an
 * error reply (WRONGTYPE: the name is no hash: redis_sync_error); the
 * caller frees each with redis_sync_free. 0, or -1 with errstr (out holds nothing then).
 */
int redis_sync_hmget(struct redis_sync *r, const char *const *keys,
    const size_t *keylens, size_t n, const char *const *fields, int nfields,
    struct redis_reply **out, char *errstr, size_t errlen);

/* A walk over every primary, one SCAN reply at a time. */
struct redis_sync_scan {
	int node;        /* index into the primaries; -1 before the first */
	char cursor[32]; /* "0" to start a node */
	int done;        /* every primary walked */
};

void redis_sync_scan_init(struct redis_sync_scan *it);

/*
 * The next SCAN batch of names matching pattern (COUNT count): *keys is
 * the reply's array of names (the caller frees it with redis_sync_free;
 * it may be empty). 1 while there is more to come, 0 when this was the
 * last batch, -1 with errstr.
 */
int redis_sync_scan(struct redis_sync *r, struct redis_sync_scan *it,
    const char *pattern, int count, struct redis_reply **keys, char *errstr,
    size_t errlen);

/*
 * The pattern of SCAN MATCH for every record: key_prefix (its glob
 * characters escaped) + "idem:*". Its length, or -1 when it does not fit
 * in out[outlen].
 */
int redis_sync_match(const char *key_prefix, char *out, size_t outlen);

/* The message of an error reply, or NULL when r is none. */
const char *redis_sync_error(const struct redis_reply *r);

/* Frees a reply of redis_sync_hmget or redis_sync_scan; NULL-safe. */
void redis_sync_free(struct redis_reply *r);

#endif
