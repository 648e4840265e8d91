/*
 * floor.c - the cheapest any Redis-backed design can be, for bench/run:
 * the baseline responder (read the body, answer 201 with a charge-sized
 * JSON) plus FLOOR_ROUNDTRIPS blocking EVALSHA round trips through hiredis
 * of a script as small as a claim (floor_script below), all on one new
 * key per request, bench:floor:<pid>:<thread>:<sequence>. Deliberately
 * naive: hiredis' generic command formatting and reply objects.
 *
 * Environment: FLOOR_REDIS_SOCKET (unix socket path, required),
 * FLOOR_ROUNDTRIPS (1..FLOOR_ROUNDTRIPS_MAX, default 1), FLOOR_THREADS
 * (worker threads, 1..64, default 1: the responder's `threads`; each
 * thread has its own Redis connection, opened before the first accept).
 * Runs on fd 0 (lighttpd bin-path) or on its own socket: floor --listen ADDR.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <fcgiapp.h>
#include <hiredis.h>

#include "bench_fcgi.h"

#define FLOOR_ROUNDTRIPS_MAX 4
#define FLOOR_TIMEOUT_MS 1000 /* connect and command timeout */
#define FLOOR_TTL_MS                                                           \
	"86400000"       /* like completed_ttl_s: no expiry during a run */
#define FLOOR_KEY_MAX 64 /* bytes */
#define FLOOR_SHA_MAX 41 /* hex SHA-1 + NUL */

/* One HSET of one field plus a PEXPIRE: a claim without its HMGET. */
static const char floor_script[] =
    "redis.call('HSET', KEYS[1], 'state', ARGV[1])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "return 1\n";

static const char reply_created[] =
    "Status: 201 Created\r\n"
    "Content-Type: application/json\r\n"
    "Cache-Control: no-store\r\n"
    "X-Request-Id: 00000000000000000000000000000000\r\n"
    "Idempotent-Replayed: false\r\n"
    "\r\n"
    "{\"id\":\"ch_000000000000000000000000\",\"object\":\"charge\","
    "\"status\":\"succeeded\",\"amount\":1999,\"currency\":\"usd\","
    "\"source\":\"tok_visa\",\"customer\":null,\"description\":null,"
    "\"metadata\":{},\"line_items\":[],\"created\":1763740800,"
    "\"idempotency_key\":\"floor\"}";

static const char reply_bad_request[] = "Status: 400 Bad Request\r\n"
                                        "Content-Type: text/plain\r\n"
                                        "\r\n"
                                        "bad body\n";

static const char reply_unavailable[] = "Status: 503 Service Unavailable\r\n"
                                        "Content-Type: text/plain\r\n"
                                        "Retry-After: 1\r\n"
                                        "\r\n"
                                        "redis failed\n";

struct floor_state {
	redisContext *redis;
	char sha[FLOOR_SHA_MAX];
	int roundtrips;
	long pid;
	int thread;
	unsigned long seq;
};

/* Connects to the unix socket and loads the script. 0 or -1 (message on stderr). */
static int
floor_connect_redis(struct floor_state *st, const char *path)
{
	struct timeval tv = { FLOOR_TIMEOUT_MS / 1000,
		(FLOOR_TIMEOUT_MS % 1000) * 1000 };
	redisReply *r = NULL;
	int rc = -1;

	st->redis = redisConnectUnixWithTimeout(path, tv);
	if (st->redis == NULL || st->redis->err) {
		fprintf(stderr, "floor: connect %s: %s\n", path,
		    st->redis ? st->redis->errstr : "out of memory");
		goto fail;
	}
	if (redisSetTimeout(st->redis, tv) != REDIS_OK) {
		fprintf(stderr, "floor: redisSetTimeout failed\n");
		goto fail;
	}
	r = redisCommand(st->redis, "SCRIPT LOAD %s", floor_script);
	if (r == NULL || r->type != REDIS_REPLY_STRING ||
	    r->len >= (int)sizeof(st->sha)) {
		fprintf(stderr, "floor: SCRIPT LOAD failed\n");
		goto fail;
	}
	memcpy(st->sha, r->str, (size_t)r->len);
	st->sha[r->len] = '\0';
	rc = 0;
fail:
	if (r != NULL)
		freeReplyObject(r);
	return rc;
}

/* Runs the script roundtrips times on a new key. 0 or -1. */
static int
floor_run_script(struct floor_state *st)
{
	char key[FLOOR_KEY_MAX], val[16];
	const char *argv[6];
	size_t argvlen[6];
	redisReply *r;
	int i, n;

	n = snprintf(key, sizeof(key), "bench:floor:%ld:%d:%lu", st->pid,
	    st->thread, st->seq++);
	if (n < 0 || (size_t)n >= sizeof(key))
		return -1;
	for (i = 0; i < st->roundtrips; i++) {
		if (snprintf(val, sizeof(val), "r%d", i + 1) < 0)
			return -1;
		argv[0] = "EVALSHA";
		argv[1] = st->sha;
		argv[2] = "1";
		argv[3] = key;
		argv[4] = val;
		argv[5] = FLOOR_TTL_MS;
		for (n = 0; n < 6; n++)
			argvlen[n] = strlen(argv[n]);
		r = redisCommandArgv(st->redis, 6, argv, argvlen);
		if (r == NULL) {
			fprintf(stderr, "floor: redis: %s\n",
			    st->redis->errstr);
			return -1;
		}
		if (r->type != REDIS_REPLY_INTEGER) {
			fprintf(stderr, "floor: unexpected reply type %d %s\n",
			    r->type,
			    r->type == REDIS_REPLY_ERROR ? r->str : "");
			freeReplyObject(r);
			return -1;
		}
		freeReplyObject(r);
	}
	return 0;
}

static void
floor_handle(FCGX_Request *req, void *state, char *body)
{
	struct floor_state *st = state;
	const char *reply;
	int len;

	if (bench_read_body(req, body, BENCH_BODY_MAX) < 0) {
		reply = reply_bad_request;
		len = (int)sizeof(reply_bad_request) - 1;
	} else if (floor_run_script(st) != 0) {
		reply = reply_unavailable;
		len = (int)sizeof(reply_unavailable) - 1;
	} else {
		reply = reply_created;
		len = (int)sizeof(reply_created) - 1;
	}
	if (FCGX_PutStr(reply, len, req->out) < 0)
		fprintf(stderr, "floor: write failed\n");
}

int
main(int argc, char *argv[])
{
	struct floor_state *st;
	const char *path, *rt;
	char *end;
	long v;
	int i, sock, threads, roundtrips = 1;

	path = getenv("FLOOR_REDIS_SOCKET");
	if (path == NULL || *path == '\0') {
		fprintf(stderr, "floor: FLOOR_REDIS_SOCKET is not set\n");
		return 1;
	}
	rt = getenv("FLOOR_ROUNDTRIPS");
	if (rt != NULL && *rt != '\0') {
		errno = 0;
		v = strtol(rt, &end, 10);
		if (errno != 0 || *end != '\0' || v < 1 ||
		    v > FLOOR_ROUNDTRIPS_MAX) {
			fprintf(stderr,
			    "floor: FLOOR_ROUNDTRIPS must be 1..%d\n",
			    FLOOR_ROUNDTRIPS_MAX);
			return 1;
		}
		roundtrips = (int)v;
	}
	if ((threads = bench_threads("floor", "FLOOR_THREADS")) < 0)
		return 1;
	if ((st = calloc((size_t)threads, sizeof(*st))) == NULL) {
		fprintf(stderr, "floor: out of memory\n");
		return 1;
	}
	for (i = 0; i < threads; i++) {
		st[i].pid = (long)getpid();
		st[i].thread = i;
		st[i].roundtrips = roundtrips;
		if (floor_connect_redis(&st[i], path) != 0)
			return 1;
	}
	if ((sock = bench_listen("floor", argc, argv)) < 0)
		return sock == -2 ? 2 : 1;
	return bench_serve("floor", sock, threads, floor_handle, st,
	    sizeof(*st));
}
