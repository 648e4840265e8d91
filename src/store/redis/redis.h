/*
 * redis.h - Redis for one event loop (libuv): one asynchronous hiredis
 * connection per Redis node the loop talks to (the single Redis; the
 * primary behind the sentinels; each cluster primary). Commands queued in
 * one loop turn leave in one write (hiredis buffers them until the socket
 * is writable) and replies are matched in order. hiredis 0.14 has no
 * timeouts: every command carries a timer of the loop. Nothing here blocks
 * the loop: the sentinels are asked on the loop with asynchronous contexts
 * too (see redis_sentinel.c). Only redis_startup_check() blocks (its own
 * loop).
 */
#ifndef CHARGE_REDIS_H
#define CHARGE_REDIS_H

#include <stddef.h>

#include <uv.h>

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

/*
 * A reply as the client's callers read it, through the functions below
 * (each NULL-safe: a NULL reply is of type REDIS_R_OTHER and empty):
 * hiredis's own type stays inside src/store/redis/. Owned by the client, valid
 * only during the callback that was given it.
 */
struct redis_reply;

enum redis_reply_type {
	REDIS_R_STRING,  /* a bulk string */
	REDIS_R_STATUS,  /* a status (+OK, +PONG) */
	REDIS_R_INTEGER, /* an integer */
	REDIS_R_ARRAY,   /* an array of replies */
	REDIS_R_NIL,     /* nil */
	REDIS_R_OTHER,   /* anything else (never an error: see redis_result) */
};

enum redis_reply_type redis_reply_type(const struct redis_reply *r);
/*
 * A string's or a status's bytes (binary-safe, *len of them, followed by a
 * NUL); NULL for any other type.
 */
const char *redis_reply_str(const struct redis_reply *r, size_t *len);
/* An integer's value; 0 for any other type. */
long long redis_reply_int(const struct redis_reply *r);
/* An array's number of elements; 0 for any other type. */
size_t redis_reply_len(const struct redis_reply *r);
/* An array's element i, or NULL (not an array, or i past its end). */
const struct redis_reply *redis_reply_at(const struct redis_reply *r, size_t i);

/* What a command came to; valid only during the callback. */
struct redis_result {
	/*
	 * The reply (never an error reply), or NULL when the command failed:
	 * errstr says why (connection error, timeout, error reply such as
	 * OOM, NOPERM, BUSY, or the script's own error).
	 */
	const struct redis_reply *reply;
	/*
	 * 1 when the command may have run: it was sent and its reply was lost
	 * or did not come within the timeout (a command re-sent once, see
	 * redis_eval(), counts its first send too). 0 when it surely did not
	 * run (never sent, or Redis answered every send with an error).
	 */
	int outcome_unknown;
	/*
	 * With wait: 1 when min_replicas replicas acknowledged this
	 * connection's writes in time (always 1 without WAIT or when
	 * min_replicas is 0); else 0 and errstr says "WAIT: n of m ...". The
	 * reply is still given.
	 */
	int durable;
	char errstr[128];
};

/* Called exactly once per command, never before redis_eval() returns. */
typedef void redis_cb(const struct redis_result *res, void *arg);

struct redis_client; /* one per loop, owned by it */

/*
 * A client on loop for target t (single, unix, sentinel or cluster).
 * timeout_ms bounds each command from the call to its callback, including
 * connecting, discovery, failover retries and redirections (with wait,
 * plus replica_timeout_ms). min_replicas > 0: commands sent with wait are
 * followed by WAIT min_replicas replica_timeout_ms: one WAIT after the last
 * of those sent on a connection in one loop turn covers them all (WAIT
 * counts the replicas that have every earlier write of the connection).
 * Connects lazily. NULL on ENOMEM.
 */
struct redis_client *redis_client_new(uv_loop_t *loop,
    const struct redis_target *t, int timeout_ms, int min_replicas,
    int replica_timeout_ms);

/*
 * Closes every connection and timer; commands still pending get their
 * callback (reply NULL, errstr "shutting down", outcome_unknown when sent)
 * before this returns. From inside one of its own callbacks (a loop that
 * stops when the reply of its last request comes) the client is closed at
 * once (redis_eval() and redis_ping() refuse) and freed on the loop's next
 * turn, out of hiredis's callbacks: the commands still pending get their
 * callbacks then. Either way the loop must then run until its handles
 * closed. NULL-safe.
 */
void redis_client_free(struct redis_client *c);

/*
 * EVALSHA of script s with one key and argc arguments (binary-safe),
 * EVAL on NOSCRIPT. Behind sentinels an error that means nothing ran on a
 * node that is no longer the primary (READONLY, MASTERDOWN, LOADING) or a
 * failed connect asks the sentinels again and resends, within the
 * timeout; in a cluster it follows MOVED and ASK (with ASKING) and retries
 * TRYAGAIN and CLUSTERDOWN within the timeout. A command whose reply was
 * lost after it was sent is never sent again (outcome_unknown), except
 * once: when the peer closed or reset the connection (EOF, ECONNRESET,
 * EPIPE; not a timeout, not an error reply), the connection had been used
 * before (it was not opened for this command) and the command was not
 * re-sent yet, it is re-sent on a new connection within the timeout. So
 * a script may run twice: it must be idempotent for its caller (claim,
 * record and release are, for the same owner). A second loss ends it with
 * outcome_unknown.
 * 0 (cb will be called), or -1 when it cannot be queued (ENOMEM, too many
 * arguments; cb will not be called).
 */
int redis_eval(struct redis_client *c, struct lua_script *s, const char *key,
    size_t keylen, int argc, const char **argv, const size_t *argvlen, int wait,
    redis_cb *cb, void *arg);

/*
 * PING the single Redis, the primary behind the sentinels, or every
 * primary of the cluster (which must serve every slot). res->reply is the
 * last PONG, or NULL with errstr.
 */
int redis_ping(struct redis_client *c, redis_cb *cb, void *arg);

/*
 * Blocking, for start-up only (before any loop runs): connects once and
 * checks that Redis does not evict (maxmemory-policy noeviction). 0 when
 * reachable and safe; 1 when unreachable (errstr; serving may start, it
 * answers 503 until Redis is back); -1 when Redis may evict records
 * (errstr; the start must fail).
 */
int redis_startup_check(const struct redis_target *t, int timeout_ms,
    char *errstr, size_t errlen);

#endif
