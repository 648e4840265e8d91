/*
 * redis_sync.c - Redis read synchronously (charge-reconcile's reads), on
 * hiredis's blocking API: a single Redis (TCP or unix socket), the primary behind
 * the sentinels, or every primary of a cluster (its slot map loaded with
 * cluster.c). Each connection is set up with AUTH and SELECT before its
 * first command; every command is bounded by the timeout (SO_RCVTIMEO);
 * a connection that failed is dropped and opened again on the next use.
 * Over TLS (rediss schemes) hiredis frames the commands and reads the
 * replies, and the bytes between them and the socket go through tls.h: a
 * blocking SSL on the socket, its reads and writes bounded by the same
 * SO_RCVTIMEO and SO_SNDTIMEO.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis.h>

#include "cluster.h"
#include "redis_sync.h"
#include "tls.h"
#include "util.h"

#define TLS_READ_BYTES 16384 /* plain text read at once */

/* A connection: hiredis's context, and its TLS when the target has it. */
struct link {
	redisContext *ctx;
	SSL *ssl; /* NULL: plain text, hiredis's own reads and writes */
};

#define REDIS_SYNC_ATTEMPTS 3 /* a batch is asked again after MOVED/ASK */

struct sync_conn {
	struct link *ctx;
	char host[REDIS_HOST_MAX + 1];
	int port;
};

struct redis_sync {
	struct redis_target t;
	int timeout_ms;
	SSL_CTX *tls;          /* rediss schemes, else NULL */
	struct sync_conn main; /* single, sentinel */
	struct cluster *cl;    /* cluster: the map */
	struct sync_conn nodes[CLUSTER_NODES_MAX]; /* by cl->nodes[] index */
};

static struct timeval
tv_of(int ms)
{
	struct timeval tv;

	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	return tv;
}

/* NULL-safe. */
static void
link_free(struct link *l)
{
	if (l == NULL)
		return;
	SSL_free(l->ssl);
	redisFree(l->ctx);
	free(l);
}

static void
conn_drop(struct sync_conn *c)
{
	link_free(c->ctx);
	c->ctx = NULL;
}

/* l failed with why: its context says so, and is done (hiredis's rule). */
static int
link_fail(struct link *l, const char *why)
{
	l->ctx->err = REDIS_ERR_IO;
	(void)snprintf(l->ctx->errstr, sizeof(l->ctx->errstr), "%s", why);
	return REDIS_ERR;
}

/* hiredis's output buffer through l's TLS. REDIS_OK or REDIS_ERR. */
static int
link_tls_flush(struct link *l)
{
	redisContext *c = l->ctx;
	char why[TLS_WHY_MAX];
	size_t put;
	enum tls_step st;

	while (sdslen(c->obuf) > 0) {
		st = tls_write(l->ssl, c->obuf, sdslen(c->obuf), &put, why,
		    sizeof(why));
		if (st != TLS_OK)
			return link_fail(l,
			    st == TLS_FAIL || st == TLS_CLOSED
			        ? why
			        : "TLS: timeout writing");
		sdsrange(c->obuf, (int)put, -1);
	}
	return REDIS_OK;
}

/*
 * The next reply on l: hiredis's redisGetReply, or over TLS its reader fed
 * from SSL_read. REDIS_OK (*reply set) or REDIS_ERR with l->ctx->errstr.
 */
static int
link_get_reply(struct link *l, void **reply)
{
	char buf[TLS_READ_BYTES], why[TLS_WHY_MAX];
	enum tls_step st;
	size_t got;

	*reply = NULL;
	if (l->ssl == NULL)
		return redisGetReply(l->ctx, reply);
	if (l->ctx->err != 0 || link_tls_flush(l) != REDIS_OK)
		return REDIS_ERR;
	for (;;) {
		if (redisGetReplyFromReader(l->ctx, reply) != REDIS_OK)
			return REDIS_ERR;
		if (*reply != NULL)
			return REDIS_OK;
		st = tls_read(l->ssl, buf, sizeof(buf), &got, why, sizeof(why));
		if (st == TLS_CLOSED)
			return link_fail(l, "Server closed the connection");
		if (st != TLS_OK)
			return link_fail(l,
			    st == TLS_FAIL ? why : "TLS: timeout reading");
		if (redisReaderFeed(l->ctx->reader, buf, got) != REDIS_OK)
			return link_fail(l, "out of memory");
	}
}

/* One command on l, its reply (NULL: l->ctx->errstr). */
static redisReply *
link_command(struct link *l, int argc, const char **argv, const size_t *lens)
{
	void *rep = NULL;

	if (l->ssl == NULL)
		return redisCommandArgv(l->ctx, argc, argv, lens);
	if (redisAppendCommandArgv(l->ctx, argc, argv, lens) != REDIS_OK ||
	    link_get_reply(l, &rep) != REDIS_OK)
		return NULL;
	return rep;
}

/* A reply to one command on l, or NULL with errstr (an error reply too). */
static redisReply *
command(struct link *l, int argc, const char **argv, const size_t *lens,
    const char *what, char *errstr, size_t errlen)
{
	redisReply *rep = link_command(l, argc, argv, lens);

	if (rep == NULL) {
		util_err(errstr, errlen, "%s: %s", what,
		    l->ctx->errstr[0] != '\0' ? l->ctx->errstr : "no reply");
		return NULL;
	}
	if (rep->type == REDIS_REPLY_ERROR) {
		util_err(errstr, errlen, "%s: %s", what, rep->str);
		freeReplyObject(rep);
		return NULL;
	}
	return rep;
}

/*
 * Connects to host:port (or the unix socket path when is_unix), bounded by
 * the timeout, and over TLS shakes hands (the certificate and the name
 * verified). NULL with errstr.
 */
static struct link *
link_open(const struct redis_sync *r, const char *host, int port, int is_unix,
    char *errstr, size_t errlen)
{
	struct timeval tv = tv_of(r->timeout_ms);
	const struct redis_tls *o = &r->t.tls;
	char why[TLS_WHY_MAX];
	struct link *l;
	enum tls_step st;

	if ((l = calloc(1, sizeof(*l))) == NULL) {
		util_err(errstr, errlen, "out of memory");
		return NULL;
	}
	l->ctx = is_unix ? redisConnectUnixWithTimeout(host, tv)
	                 : redisConnectWithTimeout(host, port, tv);
	if (l->ctx == NULL || l->ctx->err != 0) {
		util_err(errstr, errlen, "Redis at %s:%d: %s", host,
		    is_unix ? 0 : port,
		    l->ctx != NULL ? l->ctx->errstr : "out of memory");
		goto fail;
	}
	if (redisSetTimeout(l->ctx, tv) != REDIS_OK) {
		util_err(errstr, errlen, "Redis: cannot set the timeout");
		goto fail;
	}
	if (r->tls == NULL || is_unix)
		return l;
	l->ssl = tls_new_fd(r->tls,
	    o->server_name[0] != '\0' ? o->server_name : host, o->verify,
	    l->ctx->fd);
	if (l->ssl == NULL) {
		util_err(errstr, errlen, "Redis at %s:%d: TLS: out of memory",
		    host, port);
		goto fail;
	}
	if ((st = tls_handshake(l->ssl, why, sizeof(why))) != TLS_OK) {
		util_err(errstr, errlen, "Redis at %s:%d: %s", host, port,
		    st == TLS_FAIL || st == TLS_CLOSED
		        ? why
		        : "TLS: no handshake in time (does the server speak TLS on this port?)");
		goto fail;
	}
	return l;
fail:
	link_free(l);
	return NULL;
}

/*
 * Connects to host:port (or the unix socket path when is_unix) and sets it
 * up: AUTH, SELECT db (db < 0: none). NULL with errstr.
 */
static struct link *
connect_node(const struct redis_sync *r, const char *host, int port,
    int is_unix, int db, char *errstr, size_t errlen)
{
	const char *auth[3] = { "AUTH", r->t.user, r->t.password };
	const char *sel[2] = { "SELECT", NULL };
	char dbs[16];
	struct link *l;
	redisReply *rep;

	if ((l = link_open(r, host, port, is_unix, errstr, errlen)) == NULL)
		return NULL;
	if (r->t.password[0] != '\0') {
		if (r->t.user[0] != '\0')
			rep = command(l, 3, auth, NULL, "AUTH", errstr, errlen);
		else {
			auth[1] = r->t.password;
			rep = command(l, 2, auth, NULL, "AUTH", errstr, errlen);
		}
		if (rep == NULL)
			goto fail;
		freeReplyObject(rep);
	}
	if (db > 0) {
		(void)snprintf(dbs, sizeof(dbs), "%d", db);
		sel[1] = dbs;
		if ((rep = command(l, 2, sel, NULL, "SELECT", errstr,
		         errlen)) == NULL)
			goto fail;
		freeReplyObject(rep);
	}
	return l;
fail:
	link_free(l);
	return NULL;
}

/* --- Sentinel ---------------------------------------------------------- */

/*
 * Asks the sentinels in turn for the primary of master_name and connects
 * to the first it names that says ROLE master. 0 or -1 with errstr.
 */
static int
sentinel_connect(struct redis_sync *r, char *errstr, size_t errlen)
{
	const char *ask[3] = { "SENTINEL", "get-master-addr-by-name",
		r->t.master_name };
	const char *role[1] = { "ROLE" };
	char host[REDIS_HOST_MAX + 1];
	struct link *s, *p;
	redisReply *rep;
	long port;
	int i;

	util_err(errstr, errlen, "no sentinel answered");
	for (i = 0; i < r->t.nhosts; i++) {
		s = link_open(r, r->t.hosts[i].host, r->t.hosts[i].port, 0,
		    errstr, errlen);
		if (s == NULL)
			continue;
		rep = command(s, 3, ask, NULL, "SENTINEL", errstr, errlen);
		link_free(s);
		if (rep == NULL)
			continue;
		if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
		    rep->element[0]->type != REDIS_REPLY_STRING ||
		    rep->element[1]->type != REDIS_REPLY_STRING ||
		    rep->element[0]->len > REDIS_HOST_MAX ||
		    (port = strtol(rep->element[1]->str, NULL, 10)) <= 0 ||
		    port > 65535) {
			util_err(errstr, errlen,
			    "sentinel %s:%d does not know the primary %s",
			    r->t.hosts[i].host, r->t.hosts[i].port,
			    r->t.master_name);
			freeReplyObject(rep);
			continue;
		}
		(void)snprintf(host, sizeof(host), "%s", rep->element[0]->str);
		freeReplyObject(rep);
		if ((p = connect_node(r, host, (int)port, 0, r->t.db, errstr,
		         errlen)) == NULL)
			continue;
		rep = command(p, 1, role, NULL, "ROLE", errstr, errlen);
		if (rep != NULL && rep->type == REDIS_REPLY_ARRAY &&
		    rep->elements > 0 &&
		    rep->element[0]->type == REDIS_REPLY_STRING &&
		    strcmp(rep->element[0]->str, "master") == 0) {
			freeReplyObject(rep);
			r->main.ctx = p;
			(void)snprintf(r->main.host, sizeof(r->main.host), "%s",
			    host);
			r->main.port = (int)port;
			return 0;
		}
		util_err(errstr, errlen, "%s:%ld is not the primary", host,
		    port);
		if (rep != NULL)
			freeReplyObject(rep);
		link_free(p);
	}
	return -1;
}

/* --- Cluster ----------------------------------------------------------- */

/* Loads the slot map from the seeds, then from the known nodes. 0 or -1. */
static int
cluster_load(struct redis_sync *r, char *errstr, size_t errlen)
{
	const char *slots[2] = { "CLUSTER", "SLOTS" };
	struct link *ctx;
	redisReply *rep;
	int i, n = r->t.nhosts;

	util_err(errstr, errlen, "no cluster node answered");
	for (i = 0; i < n + r->cl->nnodes; i++) {
		const char *host =
		    i < n ? r->t.hosts[i].host : r->cl->nodes[i - n].host;
		int port =
		    i < n ? r->t.hosts[i].port : r->cl->nodes[i - n].port;

		if ((ctx = connect_node(r, host, port, 0, -1, errstr,
		         errlen)) == NULL)
			continue;
		rep = command(ctx, 2, slots, NULL, "CLUSTER SLOTS", errstr,
		    errlen);
		link_free(ctx);
		if (rep == NULL)
			continue;
		if (cluster_map_load(r->cl, rep, host, errstr, errlen) == 0) {
			freeReplyObject(rep);
			return 0;
		}
		freeReplyObject(rep);
	}
	return -1;
}

/* The connection to node idx of the map, opened when needed; NULL: errstr. */
static struct link *
node_ctx(struct redis_sync *r, int idx, char *errstr, size_t errlen)
{
	struct sync_conn *c = &r->nodes[idx];
	const struct cluster_node *nd = &r->cl->nodes[idx];

	if (c->ctx != NULL &&
	    (c->port != nd->port || strcmp(c->host, nd->host) != 0))
		conn_drop(c); /* the entry now names another node */
	if (c->ctx == NULL) {
		c->ctx =
		    connect_node(r, nd->host, nd->port, 0, -1, errstr, errlen);
		if (c->ctx == NULL)
			return NULL;
		(void)snprintf(c->host, sizeof(c->host), "%s", nd->host);
		c->port = nd->port;
	}
	return c->ctx;
}

/* --- the API ----------------------------------------------------------- */

struct redis_sync *
redis_sync_open(const struct redis_target *t, int timeout_ms, char *errstr,
    size_t errlen)
{
	struct redis_sync *r = calloc(1, sizeof(*r));

	if (r == NULL) {
		util_err(errstr, errlen, "out of memory");
		return NULL;
	}
	r->t = *t;
	r->timeout_ms = timeout_ms;
	if (t->tls.on &&
	    (r->tls = tls_ctx_new(&(struct tls_opts){ .verify = t->tls.verify,
	                              .ca_file = t->tls.ca_file,
	                              .cert_file = t->tls.cert_file,
	                              .key_file = t->tls.key_file },
	         NULL, errstr, errlen)) == NULL)
		goto fail;
	switch (t->mode) {
	case REDIS_MODE_SINGLE:
		r->main.ctx = connect_node(r, t->is_unix ? t->path : t->host,
		    t->port, t->is_unix, t->db, errstr, errlen);
		if (r->main.ctx == NULL)
			goto fail;
		break;
	case REDIS_MODE_SENTINEL:
		if (sentinel_connect(r, errstr, errlen) != 0)
			goto fail;
		break;
	case REDIS_MODE_CLUSTER:
		if ((r->cl = cluster_new()) == NULL) {
			util_err(errstr, errlen, "out of memory");
			goto fail;
		}
		if (cluster_load(r, errstr, errlen) != 0)
			goto fail;
		break;
	}
	return r;
fail:
	redis_sync_close(r);
	return NULL;
}

void
redis_sync_close(struct redis_sync *r)
{
	int i;

	if (r == NULL)
		return;
	conn_drop(&r->main);
	for (i = 0; i < CLUSTER_NODES_MAX; i++)
		conn_drop(&r->nodes[i]);
	cluster_free(r->cl);
	SSL_CTX_free(r->tls);
	free(r);
}

/* The connection that serves key (cluster: by its slot). NULL: errstr. */
static struct link *
ctx_for_key(struct redis_sync *r, const char *key, size_t keylen, char *errstr,
    size_t errlen)
{
	int idx;

	if (r->cl == NULL) {
		if (r->main.ctx == NULL)
			util_err(errstr, errlen,
			    "Redis: the connection failed");
		return r->main.ctx;
	}
	if ((idx = cluster_slot_node(r->cl, cluster_keyslot(key, keylen))) <
	    0) {
		util_err(errstr, errlen, "Redis Cluster: slot %u is not served",
		    cluster_keyslot(key, keylen));
		return NULL;
	}
	return node_ctx(r, idx, errstr, errlen);
}

/*
 * Drops every connection: after a failure some may still owe replies to
 * commands of the batch, which would answer the next one. The run ends on
 * any failure anyway (a reconciliation that could not read is no result).
 */
static void
drop_all(struct redis_sync *r)
{
	int i;

	conn_drop(&r->main);
	for (i = 0; i < CLUSTER_NODES_MAX; i++)
		conn_drop(&r->nodes[i]);
}

#define REDIS_SYNC_HMGET_ARGS 16 /* HMGET key and at most 14 fields */

/*
 * One pass of redis_sync_hmget over the keys whose out[i] is still NULL.
 * 1 when some got a redirection (ask again after reloading the map), 0
 * when every key has its reply, -1 with errstr.
 */
static int
hmget_pass(struct redis_sync *r, const char *const *keys, const size_t *keylens,
    size_t n, const char *const *fields, int nfields, redisReply **out,
    struct link **via, char *errstr, size_t errlen)
{
	const char *argv[REDIS_SYNC_HMGET_ARGS];
	size_t lens[REDIS_SYNC_HMGET_ARGS];
	struct cluster_redirect redirect;
	int redirected = 0, j;
	redisReply *rep;
	void *p;
	size_t i;

	argv[0] = "HMGET";
	lens[0] = 5;
	for (j = 0; j < nfields; j++) {
		argv[2 + j] = fields[j];
		lens[2 + j] = strlen(fields[j]);
	}
	/* every command out first (one pipeline per node), then the replies */
	for (i = 0; i < n; i++) {
		via[i] = NULL;
		if (out[i] != NULL)
			continue;
		if ((via[i] = ctx_for_key(r, keys[i], keylens[i], errstr,
		         errlen)) == NULL)
			return -1;
		argv[1] = keys[i];
		lens[1] = keylens[i];
		if (redisAppendCommandArgv(via[i]->ctx, 2 + nfields, argv,
		        lens) != REDIS_OK) {
			util_err(errstr, errlen, "Redis: %s",
			    via[i]->ctx->errstr);
			return -1;
		}
	}
	for (i = 0; i < n; i++) {
		if (via[i] == NULL)
			continue;
		if (link_get_reply(via[i], &p) != REDIS_OK || p == NULL) {
			util_err(errstr, errlen, "Redis HMGET: %s",
			    via[i]->ctx->errstr[0] != '\0' ? via[i]->ctx->errstr
			                                   : "no reply");
			return -1;
		}
		rep = p;
		if (rep->type == REDIS_REPLY_ERROR && r->cl != NULL &&
		    cluster_redirect_parse(rep->str, rep->len, &redirect) !=
		        CLUSTER_REDIRECT_NONE) {
			freeReplyObject(rep);
			redirected = 1;
			continue;
		}
		if (rep->type != REDIS_REPLY_ERROR &&
		    (rep->type != REDIS_REPLY_ARRAY ||
		        rep->elements != (size_t)nfields)) {
			util_err(errstr, errlen,
			    "Redis HMGET: unexpected reply");
			freeReplyObject(rep);
			return -1;
		}
		out[i] = rep; /* an error reply (WRONGTYPE) is the key's */
	}
	return redirected;
}

int
redis_sync_hmget(struct redis_sync *r, const char *const *keys,
    const size_t *keylens, size_t n, const char *const *fields, int nfields,
    struct redis_reply **outr, char *errstr, size_t errlen)
{
	/* a struct redis_reply is a redisReply (as redis_client.c reads it) */
	redisReply **out = (redisReply **)(void *)outr;
	struct link **via = NULL;
	int attempt, rc = -1;
	size_t i;

	for (i = 0; i < n; i++)
		out[i] = NULL;
	if (nfields < 1 || nfields > REDIS_SYNC_HMGET_ARGS - 2) {
		util_err(errstr, errlen, "HMGET: too many fields");
		return -1;
	}
	if (n == 0)
		return 0;
	if ((via = calloc(n, sizeof(*via))) == NULL) {
		util_err(errstr, errlen, "out of memory");
		return -1;
	}
	for (attempt = 0; attempt < REDIS_SYNC_ATTEMPTS; attempt++) {
		rc = hmget_pass(r, keys, keylens, n, fields, nfields, out, via,
		    errstr, errlen);
		if (rc <= 0)
			break;
		/* MOVED or ASK: the map changed under us; read it again */
		if (cluster_load(r, errstr, errlen) != 0) {
			rc = -1;
			break;
		}
		rc = -1;
		util_err(errstr, errlen,
		    "Redis Cluster: still redirected after %d slot maps",
		    REDIS_SYNC_ATTEMPTS);
	}
	free(via);
	if (rc != 0) {
		drop_all(r);
		for (i = 0; i < n; i++) {
			if (out[i] != NULL)
				freeReplyObject(out[i]);
			out[i] = NULL;
		}
		return -1;
	}
	return 0;
}

void
redis_sync_scan_init(struct redis_sync_scan *it)
{
	memset(it, 0, sizeof(*it));
	it->node = -1;
	(void)snprintf(it->cursor, sizeof(it->cursor), "0");
}

/* The next primary after it->node (cluster: a node serving slots), or -1. */
static int
next_primary(const struct redis_sync *r, int node)
{
	int i;

	if (r->cl == NULL)
		return node < 0 ? 0 : -1;
	for (i = node + 1; i < r->cl->nnodes; i++)
		if (r->cl->nodes[i].in_map)
			return i;
	return -1;
}

int
redis_sync_scan(struct redis_sync *r, struct redis_sync_scan *it,
    const char *pattern, int count, struct redis_reply **keysr, char *errstr,
    size_t errlen)
{
	redisReply **keys = (redisReply **)(void *)keysr;
	const char *argv[6] = { "SCAN", it->cursor, "MATCH", pattern, "COUNT",
		NULL };
	struct link *ctx;
	redisReply *rep;
	char cnt[16];

	*keys = NULL;
	if (it->done)
		return 0;
	if (it->node < 0 && (it->node = next_primary(r, -1)) < 0) {
		util_err(errstr, errlen, "Redis Cluster: no primary");
		return -1;
	}
	ctx =
	    r->cl == NULL ? r->main.ctx : node_ctx(r, it->node, errstr, errlen);
	if (ctx == NULL) {
		if (r->cl == NULL)
			util_err(errstr, errlen,
			    "Redis: the connection failed");
		return -1;
	}
	(void)snprintf(cnt, sizeof(cnt), "%d", count);
	argv[5] = cnt;
	if ((rep = command(ctx, 6, argv, NULL, "SCAN", errstr, errlen)) ==
	    NULL) {
		drop_all(r);
		return -1;
	}
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[0]->type != REDIS_REPLY_STRING ||
	    rep->element[0]->len >= sizeof(it->cursor) ||
	    rep->element[1]->type != REDIS_REPLY_ARRAY) {
		util_err(errstr, errlen, "SCAN: unexpected reply");
		freeReplyObject(rep);
		return -1;
	}
	(void)snprintf(it->cursor, sizeof(it->cursor), "%s",
	    rep->element[0]->str);
	/* hand out the names; the cursor's string stays with rep */
	*keys = rep->element[1];
	rep->element[1] = NULL;
	rep->elements = 1;
	freeReplyObject(rep);
	if (strcmp(it->cursor, "0") == 0) {
		it->node = next_primary(r, it->node);
		if (it->node < 0) {
			it->done = 1;
			return 0;
		}
	}
	return 1;
}

int
redis_sync_match(const char *prefix, char *out, size_t outlen)
{
	struct util_buf b;
	size_t i;

	util_buf_init(&b, out, outlen);
	for (i = 0; prefix[i] != '\0'; i++) {
		if (strchr("*?[]\\", prefix[i]) != NULL)
			util_buf_put(&b, "\\", 1);
		util_buf_put(&b, &prefix[i], 1);
	}
	util_buf_str(&b, "idem:*");
	return (int)util_buf_len(&b);
}

const char *
redis_sync_error(const struct redis_reply *r)
{
	const redisReply *h = (const redisReply *)(const void *)r;

	return h != NULL && h->type == REDIS_REPLY_ERROR ? h->str : NULL;
}

void
redis_sync_free(struct redis_reply *r)
{
	if (r != NULL)
		freeReplyObject(r);
}
