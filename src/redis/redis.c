/*
 * redis.c - Redis for one libuv loop, on hiredis's asynchronous API.
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
 * Files. redis_int.h holds the state and lists the files: this one (the
 * API, framing, routing), redis_cmd.c (a command's life and replies),
 * redis_node.c (connections), redis_uv.c (the libuv adapter),
 * redis_sentinel.c (discovery), redis_cluster.c (routing by slot).
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
#include "util.h"

#define EVAL_ARGS_MAX 24 /* EVALSHA sha 1 key + at most 20 arguments */

/* --- framing --------------------------------------------------------------- */

int
redis_script_init(struct lua_script *s)
{
	return digest_sha1_hex(s->src, s->len, s->sha);
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

/* Appends one RESP bulk string at p. */
static char *
put_bulk(char *p, const char *s, size_t len)
{
	*p++ = '$';
	p += put_uint(p, len);
	*p++ = '\r';
	*p++ = '\n';
	memcpy(p, s, len);
	p += len;
	*p++ = '\r';
	*p++ = '\n';
	return p;
}

/*
 * x's EVALSHA framed as EVAL: "*N" "$4 EVAL" "$len src" then the EVALSHA's
 * rest. NULL on ENOMEM.
 */
char *
redis_eval_frame(const struct cmd *x, size_t *len)
{
	size_t argc = 0, cap;
	const char *p = x->frame + 1;
	char *f, *q;

	while (*p != '\r')
		argc = argc * 10 + (size_t)(*p++ - '0');
	cap = 32 + 10 + 32 + x->s->len + (x->framelen - x->rest);
	if ((f = malloc(cap)) == NULL)
		return NULL;
	q = f;
	*q++ = '*';
	q += put_uint(q, argc);
	*q++ = '\r';
	*q++ = '\n';
	q = put_bulk(q, "EVAL", 4);
	q = put_bulk(q, x->s->src, x->s->len);
	memcpy(q, x->frame + x->rest, x->framelen - x->rest);
	q += x->framelen - x->rest;
	*len = (size_t)(q - f);
	return f;
}

/* --- routing --------------------------------------------------------------- */

/* Routes x: to its node, or to wait for a primary or a map. */
void
redis_dispatch(struct cmd *x)
{
	struct redis_client *c = x->c;

	x->st = CMD_IDLE;
	if (c->closing) {
		redis_cmd_end_soon(x, "shutting down");
		return;
	}
	if (uv_now(c->loop) >= x->deadline) {
		x->timed_out = 1;
		if (x->reply != NULL) {
			freeReplyObject(x->reply);
			x->reply = NULL;
		}
		redis_cmd_end_soon(x, NULL);
		return;
	}
	switch (c->t.mode) {
	case REDIS_MODE_SINGLE: redis_node_submit(c->main, x); return;
	case REDIS_MODE_SENTINEL:
		if (c->primary_ok && c->main->ac != NULL) {
			redis_node_submit(c->main, x);
			return;
		}
		if (c->disc_verifying) {
			redis_node_submit(c->main, x);
			return;
		}
		redis_cmdq_push(&c->disc_q, x);
		redis_sentinel_start(c);
		return;
	case REDIS_MODE_CLUSTER: redis_cluster_dispatch(x); return;
	}
}

/* --- the API ----------------------------------------------------------------- */

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
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : DEF_REDIS_TIMEOUT_MS;
	if (min_replicas > 0 && replica_timeout_ms > 0) {
		c->min_replicas = min_replicas;
		c->wait_timeout_ms = replica_timeout_ms;
		(void)snprintf(c->wait_n, sizeof(c->wait_n), "%d",
		    min_replicas);
		(void)snprintf(c->wait_ms, sizeof(c->wait_ms), "%d",
		    replica_timeout_ms);
	}
	c->map_hint = -1;
	if ((c->prep = malloc(sizeof(*c->prep))) == NULL)
		goto fail;
	if (uv_prepare_init(loop, c->prep) != 0) {
		free(c->prep);
		c->prep = NULL;
		goto fail;
	}
	c->prep->data = c;
	if (t->mode == REDIS_MODE_CLUSTER) {
		if ((c->cl = cluster_new()) == NULL)
			goto fail;
		c->cl->node_drop = redis_cluster_conn_drop;
		c->cl->node_drop_arg = c;
	} else {
		c->main = t->mode == REDIS_MODE_SINGLE && t->is_unix
		    ? redis_node_new(c, t->path, 0, 1)
		    : redis_node_new(c, t->host, t->port, 0);
		if (c->main == NULL)
			goto fail;
		c->main->want_primary = t->mode == REDIS_MODE_SENTINEL;
	}
	return c;
fail:
	cluster_free(c->cl);
	free(c->main);
	if (c->prep != NULL)
		uv_close((uv_handle_t *)c->prep, on_handle_free);
	free(c);
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
	struct redis_node *n;
	struct cmd *x;
	int i;

	assert(c->in_cb == 0);
	c->closing = 1;
	/* groups whose WAIT is not sent yet: lost */
	while ((wg = c->wgs) != NULL) {
		c->wgs = wg->next;
		if (wg->n->wg == wg)
			wg->n->wg = NULL;
		redis_cmd_wait_resolve(wg, NULL);
	}
	/* commands sent: drop their connections (retired ones too) */
	for (;;) {
		for (x = c->all; x != NULL && x->st != CMD_SENT;
		     x = x->all_next)
			;
		if (x == NULL)
			break;
		if (x->node != NULL && x->node->ac == x->ac)
			redis_node_detach(x->node);
		redis_ac_drop(c, x->ac, "shutting down");
		/* hiredis called back every command sent on it */
		assert(x->st != CMD_SENT);
	}
	while ((x = c->all) != NULL) {
		redis_cmdq_remove(x);
		if (x->errstr[0] == '\0' || x->st != CMD_FAILING)
			(void)snprintf(x->errstr, sizeof(x->errstr),
			    "shutting down");
		redis_cmd_finish(x);
	}
	redis_node_close(c->main);
	free(c->main);
	for (i = 0; i < REDIS_URL_HOSTS_MAX; i++) {
		redis_node_close(c->sentinels[i]);
		free(c->sentinels[i]);
	}
	if (c->cl != NULL) {
		c->cl->node_drop = redis_cluster_conn_free;
		cluster_free(c->cl);
	}
	while ((n = c->dead) != NULL) {
		c->dead = n->next_dead;
		redis_node_close(n);
		free(n);
	}
	uv_close((uv_handle_t *)c->prep, on_handle_free);
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
	if (c == NULL || c->free_soon != NULL)
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
	size_t need, i;
	struct cmd *x;
	char *p, *frame;
	int timeout;

	if (c == NULL || c->closing || argc < 0 || argc + 4 > EVAL_ARGS_MAX)
		return -1;
	need = 16 + (1 + 20 + 2 + 7 + 2) + (1 + 20 + 2 + 40 + 2) +
	    (1 + 20 + 2 + 1 + 2) + (1 + 20 + 2 + keylen + 2);
	for (i = 0; i < (size_t)argc; i++)
		need += 1 + 20 + 2 + argvlen[i] + 2;
	timeout = c->timeout_ms + (wait ? c->wait_timeout_ms : 0);
	if ((frame = malloc(need)) == NULL)
		return -1;
	if ((x = redis_cmd_new(c, CMD_EVAL, timeout)) == NULL) {
		free(frame);
		return -1;
	}
	x->frame = p = frame;
	*p++ = '*';
	p += put_uint(p, (size_t)argc + 4);
	*p++ = '\r';
	*p++ = '\n';
	p = put_bulk(p, "EVALSHA", 7);
	p = put_bulk(p, s->sha, 40);
	x->rest = (size_t)(p - x->frame);
	p = put_bulk(p, "1", 1);
	p = put_bulk(p, key, keylen);
	for (i = 0; i < (size_t)argc; i++)
		p = put_bulk(p, argv[i], argvlen[i]);
	x->framelen = (size_t)(p - x->frame);
	x->s = s;
	x->wait = wait && c->min_replicas > 0;
	/* the key's hash slot routes it in a cluster only */
	if (c->t.mode == REDIS_MODE_CLUSTER)
		x->slot = cluster_keyslot(key, keylen);
	x->cb = cb;
	x->arg = arg;
	redis_dispatch(x);
	return 0;
}

int
redis_ping(struct redis_client *c, redis_cb *cb, void *arg)
{
	struct cmd *x;

	if (c == NULL || c->closing ||
	    (x = redis_cmd_new(c, CMD_PING, c->timeout_ms)) == NULL)
		return -1;
	x->cb = cb;
	x->arg = arg;
	redis_dispatch(x);
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
