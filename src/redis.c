/*
 * redis.c - one hiredis connection per worker (per cluster node in a
 * cluster). After any connection error a hiredis context is dead: it is
 * freed and the next call reconnects (with AUTH, SELECT and timeouts again:
 * redisReconnect would lose them).
 *
 * Whatever the mode, a command whose reply was lost is never sent again,
 * except once on a connection found closed on first use (the scripts are
 * safe to repeat for the same owner). Error replies that mean the command
 * did not run (READONLY, MASTERDOWN, LOADING behind sentinels; MOVED, ASK,
 * TRYAGAIN, CLUSTERDOWN in a cluster) send it again, within timeout_ms.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "clock.h"
#include "cluster.h"
#include "digest.h"
#include "log.h"
#include "redis.h"
#include "util.h"

#define EVAL_ARGS_MAX 24        /* EVALSHA sha 1 key + at most 20 arguments */
#define RESP_STACK_BUF 4096     /* bytes; claims and small records fit */
#define FAILOVER_PAUSE_MS 100   /* between attempts during a failover */
#define CLUSTER_REDIRECTS_MAX 5 /* MOVED and ASK followed per command */
#define PORT_MAX 65535

static const char resp_asking[] = "*1\r\n$6\r\nASKING\r\n";

static void
copy_err(char *dst, size_t dstlen, const char *src)
{
	(void)snprintf(dst, dstlen, "%s", src != NULL ? src : "unknown error");
}

int
redis_script_init(struct lua_script *s)
{
	return digest_sha1_hex(s->src, s->len, s->sha);
}

void
redis_conn_init(struct redis_conn *c, const struct redis_target *t,
    int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->target = *t;
	c->timeout_ms = timeout_ms;
	c->io_timeout_ms = timeout_ms;
}

static void
ctx_drop(redisContext **ctx)
{
	if (*ctx != NULL)
		redisFree(*ctx);
	*ctx = NULL;
}

void
redis_conn_close(struct redis_conn *c)
{
	if (c == NULL)
		return;
	ctx_drop(&c->ctx);
	cluster_free(c->cluster);
	c->cluster = NULL;
}

/* c->errstr = "what: <the context's error>"; then drops the context. */
static void
ctx_fail(struct redis_conn *c, redisContext **ctx, const char *what)
{
	(void)snprintf(c->errstr, sizeof(c->errstr), "%s: %s", what,
	    *ctx != NULL && (*ctx)->errstr[0] != '\0' ? (*ctx)->errstr
	                                              : "connection failed");
	ctx_drop(ctx);
}

/* c->errstr = "what: <error reply>". */
static void
reply_err(struct redis_conn *c, const char *what, const redisReply *r)
{
	(void)snprintf(c->errstr, sizeof(c->errstr), "%s: %.*s", what,
	    (int)r->len, r->str != NULL ? r->str : "");
}

/* Runs a command on a fresh connection; 0 when the reply is not an error. */
static int
conn_setup_command(struct redis_conn *c, redisContext **ctx, const char *what,
    int argc, const char **argv, redisReply **out)
{
	redisReply *r;

	r = redisCommandArgv(*ctx, argc, argv, NULL);
	if (r == NULL) {
		ctx_fail(c, ctx, what);
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		reply_err(c, what, r);
		freeReplyObject(r);
		ctx_drop(ctx);
		return -1;
	}
	if (out != NULL)
		*out = r;
	else
		freeReplyObject(r);
	return 0;
}

/*
 * Refuses a Redis that may evict records. A Redis that forbids CONFIG
 * (ACL, renamed command) cannot be checked: that is logged, not fatal.
 */
static int
conn_check_eviction(struct redis_conn *c, redisContext **ctx)
{
	const char *argv[] = { "CONFIG", "GET", "maxmemory-policy" };
	redisReply *r;

	r = redisCommandArgv(*ctx, 3, argv, NULL);
	if (r == NULL) {
		ctx_fail(c, ctx, "CONFIG GET");
		return -1;
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING) {
		c->evicting = strcmp(r->element[1]->str, "noeviction") != 0;
		if (c->evicting) {
			(void)snprintf(c->errstr, sizeof(c->errstr),
			    "Redis maxmemory-policy is %s; records could be "
			    "evicted: refusing (set noeviction)",
			    r->element[1]->str);
			log_error(NULL, "%s", c->errstr);
			freeReplyObject(r);
			ctx_drop(ctx);
			return -1;
		}
	} else {
		log_warn(NULL,
		    "cannot read Redis maxmemory-policy (%s); "
		    "make sure it is noeviction",
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	}
	freeReplyObject(r);
	return 0;
}

/* A node the sentinels named must say it is the primary (ROLE). */
static int
conn_check_primary(struct redis_conn *c, redisContext **ctx, const char *host,
    int port)
{
	const char *argv[] = { "ROLE" };
	redisReply *r = NULL;
	int ok;

	if (conn_setup_command(c, ctx, "ROLE", 1, argv, &r) != 0)
		return -1;
	ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, "master") == 0;
	if (!ok) {
		(void)snprintf(c->errstr, sizeof(c->errstr),
		    "%s:%d is not the "
		    "primary (ROLE %s)",
		    host, port,
		    r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
		            r->element[0]->type == REDIS_REPLY_STRING
		        ? r->element[0]->str
		        : "?");
		ctx_drop(ctx);
	}
	freeReplyObject(r);
	return ok ? 0 : -1;
}

static struct timeval
ms_tv(int ms)
{
	struct timeval tv;

	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	return tv;
}

/*
 * A connection to host:port, or to the unix socket path when host is NULL,
 * with the target's timeouts, keepalive (TCP), AUTH and SELECT; with
 * want_primary, ROLE must say master; then the eviction check. NULL with
 * c->errstr.
 */
static redisContext *
conn_open(struct redis_conn *c, const char *host, int port, const char *path,
    int want_primary)
{
	const struct redis_target *t = &c->target;
	redisContext *ctx;
	char db[16];

	c->evicting = 0;
	if (host == NULL)
		ctx = redisConnectUnixWithTimeout(path, ms_tv(c->timeout_ms));
	else
		ctx = redisConnectWithTimeout(host, port, ms_tv(c->timeout_ms));
	if (ctx == NULL) {
		copy_err(c->errstr, sizeof(c->errstr),
		    "connect: out of memory");
		return NULL;
	}
	if (ctx->err) {
		ctx_fail(c, &ctx, "connect");
		return NULL;
	}
	if (redisSetTimeout(ctx, ms_tv(c->io_timeout_ms)) != REDIS_OK) {
		ctx_fail(c, &ctx, "set timeout");
		return NULL;
	}
	/* keepalive on a unix socket fails and poisons the context */
	if (host != NULL && redisEnableKeepAlive(ctx) != REDIS_OK) {
		ctx_fail(c, &ctx, "keepalive");
		return NULL;
	}
	if (t->password[0] != '\0') {
		const char *a2[] = { "AUTH", t->password };
		const char *a3[] = { "AUTH", t->user, t->password };

		if (conn_setup_command(c, &ctx, "AUTH", t->user[0] ? 3 : 2,
		        t->user[0] ? a3 : a2, NULL) != 0)
			return NULL;
	}
	if (t->db != 0) {
		const char *sel[] = { "SELECT", db };

		(void)snprintf(db, sizeof(db), "%d", t->db);
		if (conn_setup_command(c, &ctx, "SELECT", 2, sel, NULL) != 0)
			return NULL;
	}
	if (want_primary && conn_check_primary(c, &ctx, host, port) != 0)
		return NULL;
	if (conn_check_eviction(c, &ctx) != 0)
		return NULL;
	return ctx;
}

/*
 * Asks the sentinels, in turn, for the primary's address; the one that
 * answers is asked first next time. 0, or -1 with errstr.
 */
static int
sentinel_ask(struct redis_conn *c, char *host, size_t hostlen, int *port)
{
	const struct redis_target *t = &c->target;
	const char *argv[] = { "SENTINEL", "get-master-addr-by-name",
		t->master_name };
	const struct redis_addr *s;
	unsigned long long v;
	redisContext *sc;
	redisReply *r;
	int i, k, ok, answered = 0;

	copy_err(c->errstr, sizeof(c->errstr), "no sentinel answered");
	for (i = 0; i < t->nhosts; i++) {
		k = (c->sentinel_next + i) % t->nhosts;
		s = &t->hosts[k];
		sc = redisConnectWithTimeout(s->host, s->port,
		    ms_tv(c->timeout_ms));
		if (sc == NULL)
			continue;
		r = NULL;
		if (!sc->err &&
		    redisSetTimeout(sc, ms_tv(c->timeout_ms)) == REDIS_OK)
			r = redisCommandArgv(sc, 3, argv, NULL);
		ok = r != NULL && r->type == REDIS_REPLY_ARRAY &&
		    r->elements == 2 &&
		    r->element[0]->type == REDIS_REPLY_STRING &&
		    r->element[1]->type == REDIS_REPLY_STRING &&
		    r->element[0]->len > 0 && r->element[0]->len < hostlen &&
		    util_decimal(r->element[1]->str, r->element[1]->len,
		        PORT_MAX, &v) == UTIL_DEC_OK &&
		    v > 0;
		if (ok) {
			memcpy(host, r->element[0]->str,
			    r->element[0]->len + 1);
			*port = (int)v;
			c->sentinel_next = k;
		} else if (r != NULL) {
			/* an answer says more than another one's silence */
			answered = 1;
			(void)snprintf(c->errstr, sizeof(c->errstr),
			    "sentinel "
			    "%s:%d: %s",
			    s->host, s->port,
			    r->type == REDIS_REPLY_NIL ? "unknown master name"
			        : r->type == REDIS_REPLY_ERROR
			        ? r->str
			        : "unexpected reply");
		} else if (!answered)
			(void)snprintf(c->errstr, sizeof(c->errstr),
			    "sentinel "
			    "%s:%d: %s",
			    s->host, s->port,
			    sc->errstr[0] != '\0' ? sc->errstr : "no answer");
		if (r != NULL)
			freeReplyObject(r);
		redisFree(sc);
		if (ok)
			return 0;
	}
	return -1;
}

/* c->ctx to the single Redis, or to the primary the sentinels name. */
static int
conn_connect(struct redis_conn *c)
{
	const struct redis_target *t = &c->target;
	char host[REDIS_HOST_MAX + 1];
	int port;

	if (t->mode != REDIS_MODE_SENTINEL) {
		c->ctx = t->is_unix ? conn_open(c, NULL, 0, t->path, 0)
		                    : conn_open(c, t->host, t->port, NULL, 0);
		return c->ctx != NULL ? 0 : -1;
	}
	if (sentinel_ask(c, host, sizeof(host), &port) != 0 ||
	    (c->ctx = conn_open(c, host, port, NULL, 1)) == NULL)
		return -1;
	if (port != c->primary_port || strcmp(host, c->primary) != 0) {
		log_info(NULL, "Redis primary of '%s' is %s:%d", t->master_name,
		    host, port);
		(void)snprintf(c->primary, sizeof(c->primary), "%s", host);
		c->primary_port = port;
	}
	return 0;
}

/* A dead connection found on first use: worth one reconnect. */
static int
reply_error_retryable(int err, int saved_errno)
{
	if (err == REDIS_ERR_EOF)
		return 1;
	return err == REDIS_ERR_IO &&
	    (saved_errno == EPIPE || saved_errno == ECONNRESET);
}

/* 1 when the error reply r starts with the word w. */
static int
reply_is(const redisReply *r, const char *w)
{
	size_t n = strlen(w);

	return r->type == REDIS_REPLY_ERROR && r->len >= n &&
	    strncmp(r->str, w, n) == 0 && (r->len == n || r->str[n] == ' ');
}

/* Behind sentinels: the command did not run; the primary may have moved. */
static int
reply_is_failover(const redisReply *r)
{
	return reply_is(r, "READONLY") || reply_is(r, "MASTERDOWN") ||
	    reply_is(r, "LOADING");
}

/* In a cluster: the command did not run; it may a moment later. */
static int
reply_is_cluster_busy(const redisReply *r)
{
	return reply_is(r, "TRYAGAIN") || reply_is(r, "CLUSTERDOWN") ||
	    reply_is(r, "LOADING");
}

/* Sleeps before another attempt if one still fits before deadline_us. */
static int
retry_pause(long long deadline_us)
{
	if (deadline_us - now_mono_us() <= 1000LL * FAILOVER_PAUSE_MS)
		return 0;
	sleep_ms(FAILOVER_PAUSE_MS);
	return 1;
}

/* Writes v in decimal at p; returns the number of digits. */
static size_t
put_uint(char *p, size_t v)
{
	char tmp[24];
	size_t n = 0, i;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	for (i = 0; i < n; i++)
		p[i] = tmp[n - 1 - i];
	return n;
}

/*
 * RESP framing of one command: "*<argc>\r\n" then "$<len>\r\n<bytes>\r\n"
 * per argument, into buf when it fits, else into a malloc'd buffer (*heap,
 * caller frees). Written here because hiredis 0.14 formats each argument
 * with sdscatfmt: that cost more instructions than the rest of a replay.
 */
static char *
resp_format(int argc, const char **argv, const size_t *argvlen, char *buf,
    size_t bufsize, char **heap, size_t *outlen)
{
	size_t need = 16, len, i;
	char *p, *out;

	*heap = NULL;
	for (i = 0; i < (size_t)argc; i++)
		need += 1 + 20 + 2 + argvlen[i] + 2;
	if (need <= bufsize)
		out = buf;
	else if ((out = *heap = malloc(need)) == NULL)
		return NULL;
	p = out;
	*p++ = '*';
	p += put_uint(p, (size_t)argc);
	*p++ = '\r';
	*p++ = '\n';
	for (i = 0; i < (size_t)argc; i++) {
		len = argvlen[i];
		*p++ = '$';
		p += put_uint(p, len);
		*p++ = '\r';
		*p++ = '\n';
		memcpy(p, argv[i], len);
		p += len;
		*p++ = '\r';
		*p++ = '\n';
	}
	*outlen = (size_t)(p - out);
	return out;
}

void
redis_conn_set_wait(struct redis_conn *c, int min_replicas,
    int replica_timeout_ms)
{
	char n[16], ms[16], *heap = NULL;
	const char *argv[] = { "WAIT", n, ms };
	size_t argvlen[3];

	c->min_replicas = 0;
	c->wait_len = 0;
	c->io_timeout_ms = c->timeout_ms;
	if (min_replicas <= 0 || replica_timeout_ms <= 0)
		return;
	argvlen[0] = 4;
	argvlen[1] = (size_t)snprintf(n, sizeof(n), "%d", min_replicas);
	argvlen[2] = (size_t)snprintf(ms, sizeof(ms), "%d", replica_timeout_ms);
	if (resp_format(3, argv, argvlen, c->wait_cmd, sizeof(c->wait_cmd),
	        &heap, &c->wait_len) == NULL ||
	    heap != NULL) {
		free(heap); /* cannot happen: two numbers fit */
		c->wait_len = 0;
		return;
	}
	c->min_replicas = min_replicas;
	/* WAIT answers after up to replica_timeout_ms: reads wait for it */
	c->io_timeout_ms = c->timeout_ms + replica_timeout_ms;
}

/* One command to send, with what the sending learnt. */
struct exec {
	const char *cmd; /* RESP-framed */
	size_t len;
	const char *what; /* its name, for errors */
	const char *key;  /* routes it in a cluster */
	size_t keylen;
	int wait;        /* followed by WAIT */
	long long acked; /* WAIT's answer; -1 when none */
};

/*
 * One round trip on ctx: [ASKING] command [WAIT], appended together, the
 * replies read in order. 0 with *reply; -1 when the command's reply was
 * lost; 1 when only WAIT's was (*reply set; drop the connection).
 */
static int
ctx_roundtrip(redisContext *ctx, int asking, const char *cmd, size_t len,
    const char *wait, size_t waitlen, redisReply **reply, long long *acked)
{
	void *r = NULL;

	*reply = NULL;
	*acked = -1;
	if ((asking &&
	        redisAppendFormattedCommand(ctx, resp_asking,
	            sizeof(resp_asking) - 1) != REDIS_OK) ||
	    redisAppendFormattedCommand(ctx, cmd, len) != REDIS_OK ||
	    (wait != NULL &&
	        redisAppendFormattedCommand(ctx, wait, waitlen) != REDIS_OK))
		return -1;
	if (asking) {
		/* +OK; an error shows in the command's own reply */
		if (redisGetReply(ctx, &r) != REDIS_OK)
			return -1;
		freeReplyObject(r);
	}
	if (redisGetReply(ctx, &r) != REDIS_OK)
		return -1;
	*reply = r;
	if (wait == NULL)
		return 0;
	if (redisGetReply(ctx, &r) != REDIS_OK)
		return 1;
	if (((redisReply *)r)->type == REDIS_REPLY_INTEGER)
		*acked = ((redisReply *)r)->integer;
	freeReplyObject(r);
	return 0;
}

/* The single Redis, or the primary behind the sentinels. */
static redisReply *
single_exec(struct redis_conn *c, struct exec *x)
{
	int sentinel = c->target.mode == REDIS_MODE_SENTINEL;
	int retried = 0, reused, err, saved, rc;
	long long deadline_us = 0;
	redisReply *r = NULL;

	if (sentinel)
		deadline_us = now_mono_us() + 1000LL * c->timeout_ms;
	for (;;) {
		reused = c->ctx != NULL;
		if (c->ctx == NULL && conn_connect(c) != 0) {
			if (sentinel && retry_pause(deadline_us))
				continue;
			return NULL;
		}
		rc = ctx_roundtrip(c->ctx, 0, x->cmd, x->len,
		    x->wait ? c->wait_cmd : NULL, c->wait_len, &r, &x->acked);
		if (rc == 1) {
			ctx_fail(c, &c->ctx, "WAIT");
			return r;
		}
		if (rc == 0) {
			if (!sentinel || !reply_is_failover(r))
				return r;
			/* nothing ran: ask the sentinels again */
			reply_err(c, x->what, r);
			log_info(NULL, "Redis %s:%d: %s", c->primary,
			    c->primary_port, c->errstr);
			ctx_drop(&c->ctx);
			if (!retry_pause(deadline_us))
				return r;
			freeReplyObject(r);
			r = NULL;
			continue;
		}
		c->outcome_unknown = 1;
		saved = errno;
		err = c->ctx->err;
		ctx_fail(c, &c->ctx, x->what);
		if (!reused || retried || !reply_error_retryable(err, saved))
			return NULL;
		retried = 1;
	}
}

static struct cluster *
cluster_get(struct redis_conn *c)
{
	if (c->cluster == NULL && (c->cluster = cluster_new()) == NULL)
		copy_err(c->errstr, sizeof(c->errstr), "out of memory");
	return c->cluster;
}

/* Connects node idx when it has no connection. 0 or -1 (errstr). */
static int
cluster_node_connect(struct redis_conn *c, struct cluster *cl, int idx)
{
	struct cluster_node *nd = &cl->nodes[idx];
	char e[sizeof(c->errstr)];

	if (nd->ctx != NULL)
		return 0;
	if ((nd->ctx = conn_open(c, nd->host, nd->port, NULL, 0)) != NULL)
		return 0;
	(void)snprintf(e, sizeof(e), "%s", c->errstr);
	(void)snprintf(c->errstr, sizeof(c->errstr), "%s:%d: %s", nd->host,
	    nd->port, e);
	return -1;
}

/* Loads CLUSTER SLOTS from node idx. 0 or -1 (errstr). */
static int
cluster_refresh_from(struct redis_conn *c, struct cluster *cl, int idx)
{
	const char *argv[] = { "CLUSTER", "SLOTS" };
	struct cluster_node *nd = &cl->nodes[idx];
	char host[REDIS_HOST_MAX + 1];
	redisReply *r;
	int rc;

	if (cluster_node_connect(c, cl, idx) != 0)
		return -1;
	if ((r = redisCommandArgv(nd->ctx, 2, argv, NULL)) == NULL) {
		ctx_fail(c, &nd->ctx, "CLUSTER SLOTS");
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		reply_err(c, "CLUSTER SLOTS", r);
		freeReplyObject(r);
		return -1;
	}
	/* the load may reuse entries of the table: keep the address */
	(void)snprintf(host, sizeof(host), "%s", nd->host);
	rc = cluster_map_load(cl, r, host, c->errstr, sizeof(c->errstr));
	freeReplyObject(r);
	if (rc == 0)
		log_debug(NULL, "cluster slot map loaded from %s", host);
	return rc;
}

/*
 * Asks for the slot map: the nodes of the current map first (connected
 * ones before the others), then the seed nodes of the URL. 0 or -1.
 */
static int
cluster_refresh(struct redis_conn *c, struct cluster *cl)
{
	unsigned char tried[CLUSTER_NODES_MAX];
	const struct redis_addr *s;
	int pass, i, idx;

	memset(tried, 0, sizeof(tried));
	for (pass = 0; pass < 2; pass++)
		for (i = 0; i < cl->nnodes; i++) {
			if (tried[i] || !cl->nodes[i].in_map ||
			    (pass == 0) != (cl->nodes[i].ctx != NULL))
				continue;
			tried[i] = 1;
			if (cluster_refresh_from(c, cl, i) == 0)
				return 0;
		}
	for (i = 0; i < c->target.nhosts; i++) {
		s = &c->target.hosts[i];
		if ((idx = cluster_node_get(cl, s->host, s->port)) < 0 ||
		    tried[idx])
			continue;
		tried[idx] = 1;
		if (cluster_refresh_from(c, cl, idx) == 0)
			return 0;
	}
	return -1;
}

/* The command to the node owning x->key, following redirections. */
static redisReply *
cluster_exec(struct redis_conn *c, struct exec *x)
{
	unsigned slot = cluster_keyslot(x->key, x->keylen);
	long long deadline_us = now_mono_us() + 1000LL * c->timeout_ms;
	char host[REDIS_HOST_MAX + 1];
	struct cluster_redirect rd;
	enum cluster_redirect_kind kind;
	struct cluster *cl;
	struct cluster_node *nd;
	int idx, ask = -1, asking, redirects = 0, retried = 0, reused, rc;
	int err, saved;
	redisReply *r = NULL;

	if ((cl = cluster_get(c)) == NULL)
		return NULL;
	for (;;) {
		asking = ask >= 0;
		idx = ask;
		if (!asking) {
			if (cl->stale || cluster_slot_node(cl, slot) < 0)
				(void)cluster_refresh(c, cl);
			if ((idx = cluster_slot_node(cl, slot)) < 0) {
				if (!cl->stale)
					(void)snprintf(c->errstr,
					    sizeof(c->errstr),
					    "no cluster "
					    "node serves slot %u",
					    slot);
				cl->stale = 1;
				if (retry_pause(deadline_us))
					continue;
				return NULL;
			}
		}
		ask = -1;
		nd = &cl->nodes[idx];
		reused = nd->ctx != NULL;
		if (cluster_node_connect(c, cl, idx) != 0) {
			cl->stale = 1;
			if (retry_pause(deadline_us))
				continue;
			return NULL;
		}
		rc = ctx_roundtrip(nd->ctx, asking, x->cmd, x->len,
		    x->wait ? c->wait_cmd : NULL, c->wait_len, &r, &x->acked);
		if (rc == 1) {
			ctx_fail(c, &nd->ctx, "WAIT");
			return r;
		}
		if (rc < 0) {
			c->outcome_unknown = 1;
			saved = errno;
			err = nd->ctx->err;
			ctx_fail(c, &nd->ctx, x->what);
			cl->stale = 1;
			if (!reused || retried ||
			    !reply_error_retryable(err, saved))
				return NULL;
			retried = 1;
			continue;
		}
		if (r->type != REDIS_REPLY_ERROR)
			return r;
		kind = cluster_redirect_parse(r->str, r->len, &rd);
		if (kind == CLUSTER_REDIRECT_MOVED ||
		    kind == CLUSTER_REDIRECT_ASK) {
			if (++redirects > CLUSTER_REDIRECTS_MAX)
				return r;
			/* "" is the node that answered */
			(void)snprintf(host, sizeof(host), "%s",
			    rd.host[0] != '\0' ? rd.host : nd->host);
			if ((idx = cluster_node_get(cl, host, rd.port)) < 0)
				return r;
			if (kind == CLUSTER_REDIRECT_MOVED) {
				cluster_slot_set(cl, rd.slot, idx);
				cl->stale = 1;
			} else
				ask = idx;
			freeReplyObject(r);
			r = NULL;
			continue;
		}
		if (!reply_is_cluster_busy(r) || !retry_pause(deadline_us))
			return r;
		freeReplyObject(r);
		r = NULL;
	}
}

/*
 * Sends argv (lengths argvlen, or strlen when NULL): to the node of key in
 * a cluster. The reply, or NULL with c->errstr; *acked is WAIT's answer.
 */
static redisReply *
conn_command(struct redis_conn *c, const char *key, size_t keylen, int argc,
    const char **argv, const size_t *argvlen, int wait, long long *acked)
{
	char buf[RESP_STACK_BUF], *heap = NULL, *cmd;
	size_t lens[EVAL_ARGS_MAX], len = 0;
	struct exec x;
	redisReply *r;
	int i;

	if (argvlen == NULL) {
		if (argc > EVAL_ARGS_MAX)
			return NULL;
		for (i = 0; i < argc; i++)
			lens[i] = strlen(argv[i]);
		argvlen = lens;
	}
	if ((cmd = resp_format(argc, argv, argvlen, buf, sizeof(buf), &heap,
	         &len)) == NULL) {
		copy_err(c->errstr, sizeof(c->errstr), "out of memory");
		return NULL;
	}
	x.cmd = cmd;
	x.len = len;
	x.what = argv[0];
	x.key = key;
	x.keylen = keylen;
	x.wait = wait && c->wait_len > 0;
	x.acked = -1;
	c->outcome_unknown = 0;
	if (c->target.mode == REDIS_MODE_CLUSTER)
		r = cluster_exec(c, &x);
	else
		r = single_exec(c, &x);
	*acked = x.acked;
	free(heap);
	return r;
}

static redisReply *
eval(struct redis_conn *c, struct lua_script *s, const char *key, size_t keylen,
    int argc, const char **argv, const size_t *argvlen, int wait,
    long long *acked)
{
	const char *av[EVAL_ARGS_MAX];
	size_t al[EVAL_ARGS_MAX];
	redisReply *r;
	int i, n = 4;

	*acked = -1;
	if (argc < 0 || argc + 4 > EVAL_ARGS_MAX) {
		copy_err(c->errstr, sizeof(c->errstr), "too many arguments");
		return NULL;
	}
	av[0] = "EVALSHA";
	al[0] = 7;
	av[1] = s->sha;
	al[1] = 40;
	av[2] = "1";
	al[2] = 1;
	av[3] = key;
	al[3] = keylen;
	for (i = 0; i < argc; i++, n++) {
		av[n] = argv[i];
		al[n] = argvlen[i];
	}
	r = conn_command(c, key, keylen, n, av, al, wait, acked);
	if (r != NULL && r->type == REDIS_REPLY_ERROR &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0) {
		/* script cache lost (restart, SCRIPT FLUSH): EVAL caches it again */
		freeReplyObject(r);
		log_info(NULL, "NOSCRIPT for %s: loading it again", s->name);
		av[0] = "EVAL";
		al[0] = 4;
		av[1] = s->src;
		al[1] = s->len;
		r = conn_command(c, key, keylen, n, av, al, wait, acked);
	}
	if (r != NULL && r->type == REDIS_REPLY_ERROR) {
		reply_err(c, s->name, r);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

redisReply *
redis_eval(struct redis_conn *c, struct lua_script *s, const char *key,
    size_t keylen, int argc, const char **argv, const size_t *argvlen)
{
	long long acked;

	return eval(c, s, key, keylen, argc, argv, argvlen, 0, &acked);
}

redisReply *
redis_eval_durable(struct redis_conn *c, struct lua_script *s, const char *key,
    size_t keylen, int argc, const char **argv, const size_t *argvlen,
    int *durable)
{
	long long acked;
	redisReply *r;

	r = eval(c, s, key, keylen, argc, argv, argvlen, 1, &acked);
	*durable = c->min_replicas == 0 || acked >= c->min_replicas;
	if (r != NULL && !*durable)
		(void)snprintf(c->errstr, sizeof(c->errstr),
		    "WAIT: %lld of %d "
		    "replica(s) acknowledged in time",
		    acked < 0 ? 0 : acked, c->min_replicas);
	return r;
}

/* PING on ctx; 0, or -1 with errstr "what: ...". */
static int
reply_is_pong(struct redis_conn *c, redisReply *r, const char *what)
{
	int ok =
	    r->type == REDIS_REPLY_STATUS && strcasecmp(r->str, "PONG") == 0;

	if (!ok)
		(void)snprintf(c->errstr, sizeof(c->errstr), "%s: %.*s", what,
		    (int)r->len, r->str != NULL ? r->str : "");
	freeReplyObject(r);
	return ok ? 0 : -1;
}

/*
 * Every primary of the map answers PING (connections opened here pass the
 * eviction check) and every slot is served.
 */
static int
cluster_ping(struct redis_conn *c)
{
	static const char ping[] = "*1\r\n$4\r\nPING\r\n";
	char what[REDIS_HOST_MAX + 16];
	struct cluster *cl;
	struct cluster_node *nd;
	redisReply *r;
	long long acked;
	unsigned s;
	int i, reused, rc;

	if ((cl = cluster_get(c)) == NULL)
		return -1;
	if (cl->stale && cluster_refresh(c, cl) != 0)
		return -1;
	for (s = 0; s < CLUSTER_SLOTS; s++)
		if (cluster_slot_node(cl, s) < 0) {
			(void)snprintf(c->errstr, sizeof(c->errstr),
			    "no cluster "
			    "node serves slot %u",
			    s);
			cl->stale = 1;
			return -1;
		}
	for (i = 0; i < cl->nnodes; i++) {
		nd = &cl->nodes[i];
		if (!nd->in_map)
			continue;
		(void)snprintf(what, sizeof(what), "%s:%d PING", nd->host,
		    nd->port);
		for (;;) {
			reused = nd->ctx != NULL;
			if (cluster_node_connect(c, cl, i) != 0) {
				cl->stale = 1;
				return -1;
			}
			rc = ctx_roundtrip(nd->ctx, 0, ping, sizeof(ping) - 1,
			    NULL, 0, &r, &acked);
			if (rc == 0)
				break;
			ctx_fail(c, &nd->ctx, what);
			cl->stale = 1;
			if (!reused)
				return -1;
		}
		if (reply_is_pong(c, r, what) != 0)
			return -1;
	}
	return 0;
}

int
redis_ping(struct redis_conn *c)
{
	const char *argv[] = { "PING" };
	long long acked;
	redisReply *r;

	if (c->target.mode == REDIS_MODE_CLUSTER)
		return cluster_ping(c);
	if ((r = conn_command(c, NULL, 0, 1, argv, NULL, 0, &acked)) == NULL)
		return -1;
	return reply_is_pong(c, r, "PING");
}
