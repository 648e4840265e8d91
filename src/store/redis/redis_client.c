/*
 * redis_client.c - the Redis client of redis.h: Redis for one libuv loop,
 * on hiredis's asynchronous API.
 *
 * Shape. A struct redis_node is one asynchronous connection to one address
 * (the single Redis, the primary behind the sentinels, a sentinel, a
 * cluster node). A new connection queues its set-up in one write (AUTH,
 * SELECT, ROLE behind sentinels, CONFIG GET maxmemory-policy) and becomes
 * ready when every set-up reply is in and good; commands wait in the
 * node's queue until then, so nothing runs on a Redis that may evict or on
 * a replica. A struct cmd is one command from the call to its callback; it
 * owns one uv timer for its deadline and its pauses.
 *
 * Sent or not. A command handed to hiredis on a ready connection counts as
 * sent: if its reply is lost (connection error, timeout, shutdown) it ends
 * with outcome_unknown and is never sent again, except once: when the peer
 * closed or reset the connection (EOF, ECONNRESET, EPIPE; not a timeout we
 * enforced, not a drop of ours), the connection had been ready before the
 * command came (it was not opened for it: an idle connection the server or
 * a middlebox closed is found so on first use) and the command was not
 * re-sent yet, it goes again on a new connection, on the next loop turn,
 * within its deadline (claim, record and release are idempotent for their
 * owner). A command still waiting for a connection, a map or a primary was
 * not sent and may go on another connection.
 *
 * Timeouts. hiredis 0.14 has none: a command's timer fires at its
 * deadline; a command that was sent then drops its connection
 * (redisAsyncFree: hiredis calls every pending callback with a NULL
 * reply), a command waiting for a connection drops that connection (this
 * is the connect timeout).
 *
 * Files. redis_int.h holds the state and lists the files, bottom up:
 * redis_uv.c (the libuv adapter), redis_cmd.c and redis_node.c (a
 * command's life and replies; connections), redis_sentinel.c and
 * redis_cluster.c (topologies: struct redis_topology), this one (the API,
 * the single Redis's topology).
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "cluster.h"
#include "digest.h"
#include "log.h"
#include "redis.h"
#include "redis_int.h"
#include "tls.h"
#include "util.h"

int
redis_script_init(struct lua_script *s)
{
	return digest_sha1_hex(s->src, s->len, s->sha);
}

/* --- replies, as redis.h shows them -------------------------------------------- */

/* struct redis_reply is never defined: a pointer to one is hiredis's reply. */
static const redisReply *
hiredis_reply(const struct redis_reply *r)
{
	return (const redisReply *)(const void *)r;
}

enum redis_reply_type
redis_reply_type(const struct redis_reply *r)
{
	if (r == NULL)
		return REDIS_R_OTHER;
	switch (hiredis_reply(r)->type) {
	case REDIS_REPLY_STRING: return REDIS_R_STRING;
	case REDIS_REPLY_STATUS: return REDIS_R_STATUS;
	case REDIS_REPLY_INTEGER: return REDIS_R_INTEGER;
	case REDIS_REPLY_ARRAY: return REDIS_R_ARRAY;
	case REDIS_REPLY_NIL: return REDIS_R_NIL;
	}
	return REDIS_R_OTHER;
}

const char *
redis_reply_str(const struct redis_reply *r, size_t *len)
{
	const redisReply *h = hiredis_reply(r);

	if (h == NULL ||
	    (h->type != REDIS_REPLY_STRING && h->type != REDIS_REPLY_STATUS))
		return NULL;
	*len = h->len;
	return h->str;
}

long long
redis_reply_int(const struct redis_reply *r)
{
	const redisReply *h = hiredis_reply(r);

	return h != NULL && h->type == REDIS_REPLY_INTEGER ? h->integer : 0;
}

size_t
redis_reply_len(const struct redis_reply *r)
{
	const redisReply *h = hiredis_reply(r);

	return h != NULL && h->type == REDIS_REPLY_ARRAY ? h->elements : 0;
}

const struct redis_reply *
redis_reply_at(const struct redis_reply *r, size_t i)
{
	const redisReply *h = hiredis_reply(r);

	if (h == NULL || h->type != REDIS_REPLY_ARRAY || i >= h->elements)
		return NULL;
	return (const struct redis_reply *)(const void *)h->element[i];
}

/* --- the single Redis ---------------------------------------------------------- */

static int
single_init(struct redis_client *c)
{
	const struct redis_target *t = &c->t;

	c->main = t->is_unix ? redis_node_new(c, t->path, 0, 1)
	                     : redis_node_new(c, t->host, t->port, 0);
	return c->main != NULL ? 0 : -1;
}

static void
single_dispatch(struct cmd *cmd)
{
	redis_node_submit(cmd->c->main, cmd);
}

/* Every other hook: nothing to do (a failed node's commands end). */
static const struct redis_topology redis_topology_single = {
	.init = single_init,
	.dispatch = single_dispatch,
};

static const struct redis_topology *
topology_of(enum redis_mode mode)
{
	switch (mode) {
	case REDIS_MODE_SENTINEL: return &redis_topology_sentinel;
	case REDIS_MODE_CLUSTER: return &redis_topology_cluster;
	case REDIS_MODE_SINGLE: break;
	}
	return &redis_topology_single;
}

/* --- the API ----------------------------------------------------------------- */

/* The TLS context of every connection of a rediss target, or NULL (logged). */
static SSL_CTX *
redis_tls_ctx(const struct redis_tls *o)
{
	char err[256];
	SSL_CTX *ctx;

	ctx = tls_ctx_new(&(struct tls_opts){ .verify = o->verify,
	                      .ca_file = o->ca_file,
	                      .cert_file = o->cert_file,
	                      .key_file = o->key_file },
	    NULL, err, sizeof(err));
	if (ctx == NULL)
		log_error(NULL, "Redis: %s", err);
	return ctx;
}

static void
on_handle_free(uv_handle_t *h)
{
	free(h);
}

struct redis_client *
redis_client_new(uv_loop_t *loop, const struct redis_target *t, int timeout_ms,
    int min_replicas, int replica_timeout_ms)
{
	struct redis_client *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->loop = loop;
	c->t = *t;
	c->topo = topology_of(t->mode);
	STAILQ_INIT(&c->wgs);
	LIST_INIT(&c->all);
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : DEF_REDIS_TIMEOUT_MS;
	if (min_replicas > 0 && replica_timeout_ms > 0) {
		c->min_replicas = min_replicas;
		c->wait_timeout_ms = replica_timeout_ms;
		(void)snprintf(c->wait_n, sizeof(c->wait_n), "%d",
		    min_replicas);
		(void)snprintf(c->wait_ms, sizeof(c->wait_ms), "%d",
		    replica_timeout_ms);
	}
	if (t->tls.on && (c->tls = redis_tls_ctx(&t->tls)) == NULL)
		goto fail;
	if ((c->prep = malloc(sizeof(*c->prep))) == NULL)
		goto fail;
	if (uv_prepare_init(loop, c->prep) != 0) {
		free(c->prep);
		c->prep = NULL;
		goto fail;
	}
	c->prep->data = c;
	if (c->topo->init(c) != 0)
		goto fail;
	return c;
fail:
	if (c->topo->free != NULL)
		c->topo->free(c);
	free(c->main);
	if (c->prep != NULL)
		uv_close((uv_handle_t *)c->prep, on_handle_free);
	SSL_CTX_free(c->tls);
	free(c);
	return NULL;
}

/* The first command handed to hiredis, or NULL. */
static struct cmd *
client_first_sent(struct redis_client *c)
{
	struct cmd *cmd;

	LIST_FOREACH(cmd, &c->all, all_link)
	if (cmd->st == CMD_SENT)
		return cmd;
	return NULL;
}

/*
 * The client's end, never inside one of hiredis's callbacks: hiredis
 * would put off freeing the connection it is calling back and then call
 * its disconnect callback on a node freed here, and a command still in
 * flight on it would never get its callback (the loop below would spin).
 */
static void
client_free_now(struct redis_client *c)
{
	struct wait_group *wg;
	struct cmd *cmd;

	assert(c->in_cb == 0);
	c->closing = 1;
	c->freeing = 1;
	/* groups whose WAIT is not sent yet: lost */
	while ((wg = STAILQ_FIRST(&c->wgs)) != NULL) {
		STAILQ_REMOVE_HEAD(&c->wgs, link);
		if (wg->n->wg == wg)
			wg->n->wg = NULL;
		redis_cmd_wait_resolve(wg, NULL);
	}
	/* commands sent: drop their connections (retired ones too) */
	while ((cmd = client_first_sent(c)) != NULL) {
		struct redis_node *n = cmd->attempt.node;

		if (n != NULL && n->ac == cmd->attempt.ac)
			redis_node_detach(n);
		redis_ac_drop(c, cmd->attempt.ac, "shutting down");
		/* hiredis called back every command sent on it */
		assert(cmd->st != CMD_SENT);
	}
	while ((cmd = LIST_FIRST(&c->all)) != NULL) {
		redis_cmdq_remove(cmd);
		if (cmd->out.errstr[0] == '\0' || cmd->st != CMD_FAILING)
			(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
			    "shutting down");
		redis_cmd_finish(cmd);
	}
	redis_node_close(c->main);
	free(c->main);
	if (c->topo->free != NULL)
		c->topo->free(c);
	uv_close((uv_handle_t *)c->prep, on_handle_free);
	SSL_CTX_free(c->tls);
	if (c->free_soon != NULL)
		uv_close((uv_handle_t *)c->free_soon, on_handle_free);
	free(c);
}

static void
on_free_soon(uv_timer_t *t)
{
	client_free_now(t->data);
}

void
redis_client_free(struct redis_client *c)
{
	/* again, from a callback this free calls: already under way */
	if (c == NULL || c->free_soon != NULL || c->freeing)
		return;
	if (c->in_cb == 0) {
		client_free_now(c);
		return;
	}
	/*
	 * Inside one of its callbacks, so inside hiredis's: closed now (no
	 * new command), freed on the loop's next turn.
	 */
	c->closing = 1;
	if ((c->free_soon = malloc(sizeof(*c->free_soon))) == NULL ||
	    uv_timer_init(c->loop, c->free_soon) != 0) {
		/* nothing to defer with: leaked rather than freed in use */
		free(c->free_soon);
		c->free_soon = NULL;
		log_error(NULL, "Redis client: cannot defer its free");
		return;
	}
	c->free_soon->data = c;
	(void)uv_timer_start(c->free_soon, on_free_soon, 0, 0);
}

int
redis_eval(struct redis_client *c, struct lua_script *s, const char *key,
    size_t keylen, int argc, const char **argv, const size_t *argvlen, int wait,
    redis_cb *cb, void *arg)
{
	struct cmd *cmd;
	int timeout;

	if (c == NULL || c->closing)
		return -1;
	timeout = c->timeout_ms + (wait ? c->wait_timeout_ms : 0);
	if ((cmd = redis_cmd_new(c, CMD_EVAL, timeout)) == NULL)
		return -1;
	if (redis_cmd_frame(cmd, s, key, keylen, argc, argv, argvlen) != 0) {
		redis_cmd_discard(cmd);
		return -1;
	}
	cmd->flags.wait = wait && c->min_replicas > 0;
	/* the key's hash slot routes it in a cluster only */
	if (c->t.mode == REDIS_MODE_CLUSTER)
		cmd->route.slot = cluster_keyslot(key, keylen);
	cmd->cb = cb;
	cmd->arg = arg;
	redis_cmd_dispatch(cmd);
	return 0;
}

int
redis_ping(struct redis_client *c, redis_cb *cb, void *arg)
{
	struct cmd *cmd;

	if (c == NULL || c->closing ||
	    (cmd = redis_cmd_new(c, CMD_PING, c->timeout_ms)) == NULL)
		return -1;
	cmd->cb = cb;
	cmd->arg = arg;
	redis_cmd_dispatch(cmd);
	return 0;
}

/* --- start-up check (blocking, before any loop) ---------------------------- */

struct check_arg {
	int done;
	int evicting;
	char errstr[ERRSTR_MAX];
};

static void
on_check_ping(const struct redis_result *res, void *arg)
{
	struct check_arg *a = arg;

	a->done = 1;
	if (res->reply == NULL)
		(void)snprintf(a->errstr, sizeof(a->errstr), "%s", res->errstr);
	a->evicting = res->reply == NULL &&
	    strstr(res->errstr, "records could be evicted") != NULL;
}

int
redis_startup_check(const struct redis_target *t, int timeout_ms, char *errstr,
    size_t errlen)
{
	struct check_arg a;
	struct redis_client *c;
	uv_loop_t loop;
	int rc;

	/*
	 * The asynchronous client on a private loop, run to the end: the
	 * same connect, set-up and eviction check as serving uses.
	 */
	memset(&a, 0, sizeof(a));
	if (uv_loop_init(&loop) != 0) {
		util_err(errstr, errlen, "cannot create an event loop");
		return 1;
	}
	c = redis_client_new(&loop, t, timeout_ms, 0, 0);
	if (c == NULL || redis_ping(c, on_check_ping, &a) != 0) {
		util_err(errstr, errlen, "out of memory");
		rc = 1;
	} else {
		while (!a.done && uv_run(&loop, UV_RUN_ONCE) != 0)
			;
		rc = !a.done              ? 1
		    : a.errstr[0] == '\0' ? 0
		    : a.evicting          ? -1
		                          : 1;
		if (rc != 0)
			util_err(errstr, errlen, "%s",
			    a.done ? a.errstr : "no answer");
	}
	redis_client_free(c);
	(void)uv_run(&loop, UV_RUN_DEFAULT);
	(void)uv_loop_close(&loop);
	return rc;
}
