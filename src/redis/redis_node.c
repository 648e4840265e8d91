/*
 * redis_node.c - the Redis client's connections. A struct redis_node is
 * one asynchronous hiredis connection to one address (the single Redis,
 * the primary behind the sentinels, a sentinel, a cluster node). A new
 * connection queues its set-up in one write (AUTH, SELECT, ROLE behind
 * sentinels, CONFIG GET maxmemory-policy) and becomes ready when every
 * set-up reply is in and good; commands wait in the node's queue until
 * then, so nothing runs on a Redis that may evict or on a replica. A
 * failed connection ends the commands sent on it (outcome unknown, or the
 * one re-send of redis_cmd.c) and sends the queued ones on their way.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <async.h>

#include "log.h"
#include "redis_int.h"

static void node_send(struct redis_node *n, struct cmd *x);

/* A connection is dropped: hiredis calls its pending callbacks (NULL). */
void
redis_ac_drop(struct redis_client *c, redisAsyncContext *ac, const char *why)
{
	const char *saved = c->drop_reason;

	c->drop_reason = why;
	redisAsyncFree(ac);
	c->drop_reason = saved;
}

void
redis_node_detach(struct redis_node *n)
{
	n->ac = NULL;
	n->st = NODE_IDLE;
	n->setup_left = 0;
	n->setup_failed = 0;
}

/* A NULL reply: hiredis is freeing ac; its node must not use it. */
void
redis_ac_lost(struct redis_client *c, redisAsyncContext *ac)
{
	struct redis_node *n = ac->data;

	if (n != NULL && n->ac == ac) {
		/* hiredis is freeing it after an error */
		redis_node_detach(n);
		if (n == c->main && c->t.mode == REDIS_MODE_SENTINEL)
			c->primary_ok = 0;
		if (c->t.mode == REDIS_MODE_CLUSTER && c->cl != NULL)
			c->cl->stale = 1;
	}
}

struct redis_node *
redis_node_new(struct redis_client *c, const char *host, int port, int is_unix)
{
	struct redis_node *n = calloc(1, sizeof(*n));

	if (n == NULL)
		return NULL;
	n->c = c;
	n->is_unix = is_unix;
	(void)snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	return n;
}

void
redis_node_set_addr(struct redis_node *n, const char *host, int port)
{
	(void)snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
}

/*
 * Stops sending on n's connection; the replies of commands already sent
 * still come (hiredis disconnects after the last one).
 */
void
redis_node_retire(struct redis_node *n)
{
	redisAsyncContext *ac = n->ac;

	if (ac == NULL)
		return;
	redis_node_detach(n);
	redisAsyncDisconnect(ac);
}

/*
 * The commands of n's queue were not sent: each goes on according to the
 * mode (single: ends with err; sentinel: asks again; cluster: retries).
 */
static void
node_requeue(struct redis_node *n, const char *err)
{
	struct redis_client *c = n->c;
	struct cmd *x;

	while ((x = n->wq.head) != NULL) {
		redis_cmdq_remove(x);
		if (err != NULL)
			(void)snprintf(x->errstr, sizeof(x->errstr), "%s", err);
		if (c->closing || n->evicting)
			redis_cmd_end_soon(x, NULL);
		else if (x->kind == CMD_SENTINEL || x->kind == CMD_SLOTS)
			redis_cmd_end_soon(x, NULL);
		else if (c->t.mode == REDIS_MODE_SENTINEL)
			/* during discovery the next sentinel is asked at once */
			redis_cmd_pause(x,
			    c->disc_verifying ? 0 : FAILOVER_PAUSE_MS);
		else if (c->t.mode == REDIS_MODE_CLUSTER) {
			x->ask = x->moved = -1;
			redis_cmd_pause(x, FAILOVER_PAUSE_MS);
		} else
			redis_cmd_end_soon(x, NULL);
	}
}

/*
 * n's connection failed (or is dropped on purpose): the commands sent on it
 * end with outcome_unknown, the queued ones go on (node_requeue).
 */
void
redis_node_fail(struct redis_node *n, const char *err)
{
	struct redis_client *c = n->c;
	redisAsyncContext *ac = n->ac;
	int was_verifying = c->disc_verifying && n == c->main;

	(void)snprintf(n->errstr, sizeof(n->errstr), "%s",
	    err != NULL ? err : "connection failed");
	redis_node_detach(n);
	if (ac != NULL)
		redis_ac_drop(c, ac, n->errstr);
	if (n == c->main && c->t.mode == REDIS_MODE_SENTINEL && !c->closing) {
		if (n->evicting) {
			/* not a stale answer: the commands fail */
			c->primary_ok = 0;
			c->disc_verifying = 0;
			c->disc_active = 0;
			was_verifying = 0;
		} else
			redis_sentinel_primary_failed(c, n->errstr);
	}
	if (c->t.mode == REDIS_MODE_CLUSTER && c->cl != NULL)
		c->cl->stale = 1;
	if (!was_verifying || c->closing)
		node_requeue(n, n->errstr);
}

static void
node_ready(struct redis_node *n)
{
	struct redis_client *c = n->c;
	struct cmd *x;

	n->st = NODE_READY;
	if (n == c->main && c->t.mode == REDIS_MODE_SENTINEL) {
		c->primary_ok = 1;
		if (c->disc_verifying) {
			c->disc_verifying = 0;
			c->disc_active = 0;
			c->sentinel_first = c->disc_k;
			c->primary_from = c->disc_k;
			c->suspect[0] = '\0';
			if (n->port != c->primary_port ||
			    strcmp(n->host, c->primary) != 0) {
				log_info(NULL, "Redis primary of '%s' is %s:%d",
				    c->t.master_name, n->host, n->port);
				(void)snprintf(c->primary, sizeof(c->primary),
				    "%s", n->host);
				c->primary_port = n->port;
			}
		}
	}
	while ((x = n->wq.head) != NULL) {
		redis_cmdq_remove(x);
		/* waited for this connection: it was opened for them */
		x->reused = 0;
		node_send(n, x);
		if (n->st != NODE_READY)
			break; /* a send failed and dropped it */
	}
}

static void
on_connect(const redisAsyncContext *ac, int status)
{
	struct redis_node *n = ac->data;
	char err[ERRSTR_MAX];

	if (n == NULL || n->ac != ac)
		return;
	if (status != REDIS_OK) {
		(void)snprintf(err, sizeof(err), "connect %s:%d: %s",
		    n->is_unix ? "unix" : n->host, n->port,
		    ac->errstr[0] != '\0' ? ac->errstr : "failed");
		/* hiredis frees the context after this callback */
		redis_node_detach(n);
		redis_node_fail(n, err);
		return;
	}
	if (n->setup_left == 0 && n->st == NODE_CONNECTING)
		node_ready(n);
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
	struct redis_node *n = ac->data;
	char err[ERRSTR_MAX];

	(void)status;
	if (n == NULL || n->ac != ac)
		return;
	(void)snprintf(err, sizeof(err), "%s:%d: %s",
	    n->is_unix ? "unix" : n->host, n->port,
	    ac->errstr[0] != '\0' ? ac->errstr : "connection closed");
	redis_node_detach(n);
	redis_node_fail(n, err);
}

/* One set-up reply: 0 when good, else n->errstr. */
static int
setup_check(struct redis_node *n, const redisReply *r, int step)
{
	const char *what = step == 0 ? "AUTH"
	    : step == 1              ? "SELECT"
	    : step == 2              ? "ROLE"
	                             : "CONFIG GET";

	if (r->type == REDIS_REPLY_ERROR && step != 3) {
		(void)snprintf(n->errstr, sizeof(n->errstr), "%s: %.*s", what,
		    (int)r->len, r->str != NULL ? r->str : "");
		return -1;
	}
	if (step == 2) {
		int ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
		    r->element[0]->type == REDIS_REPLY_STRING;

		if (ok && strcmp(r->element[0]->str, "master") == 0)
			return 0;
		(void)snprintf(n->errstr, sizeof(n->errstr),
		    "%s:%d is not the primary (ROLE %s)", n->host, n->port,
		    ok ? r->element[0]->str : "?");
		return -1;
	}
	if (step == 3) {
		/*
		 * A Redis that forbids CONFIG (ACL, renamed command) cannot be
		 * checked: that is logged, not fatal.
		 */
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		    r->element[1]->type == REDIS_REPLY_STRING) {
			if (strcmp(r->element[1]->str, "noeviction") == 0)
				return 0;
			n->evicting = 1;
			(void)snprintf(n->errstr, sizeof(n->errstr),
			    "Redis maxmemory-policy is %s; records could be "
			    "evicted: refusing (set noeviction)",
			    r->element[1]->str);
			log_error(NULL, "%s", n->errstr);
			return -1;
		}
		log_warn(NULL,
		    "cannot read Redis maxmemory-policy (%s); "
		    "make sure it is noeviction",
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	}
	return 0;
}

static void
on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis_node *n = ac->data;
	int step = (int)(intptr_t)privdata;

	if (n == NULL || n->ac != ac)
		return; /* an old connection going away */
	if (reply == NULL)
		return; /* on_connect / on_disconnect says why */
	n->setup_left--;
	if (!n->setup_failed && setup_check(n, reply, step) != 0)
		n->setup_failed = 1;
	if (n->setup_left > 0)
		return;
	if (n->setup_failed) {
		char err[ERRSTR_MAX];

		(void)snprintf(err, sizeof(err), "%s", n->errstr);
		redis_node_fail(n, err);
		return;
	}
	if (ac->c.flags & REDIS_CONNECTED)
		node_ready(n);
}

/* Opens n's connection and queues its set-up. 0, or -1 with n->errstr. */
int
redis_node_connect(struct redis_node *n)
{
	struct redis_client *c = n->c;
	const struct redis_target *t = &c->t;
	redisAsyncContext *ac;
	char db[16];
	int steps = 0;

	n->evicting = 0;
	n->setup_failed = 0;
	n->setup_left = 0;
	n->gen++;
	n->wg = NULL;
	ac = n->is_unix ? redisAsyncConnectUnix(n->host)
	                : redisAsyncConnect(n->host, n->port);
	if (ac == NULL) {
		(void)snprintf(n->errstr, sizeof(n->errstr),
		    "connect: out of memory");
		return -1;
	}
	if (ac->err) {
		(void)snprintf(n->errstr, sizeof(n->errstr),
		    "connect %s:%d: %s", n->is_unix ? "unix" : n->host, n->port,
		    ac->errstr);
		redisAsyncFree(ac);
		return -1;
	}
	if (redis_uv_attach(ac, c->loop) != REDIS_OK) {
		(void)snprintf(n->errstr, sizeof(n->errstr),
		    "connect: cannot watch the socket");
		redisAsyncFree(ac);
		return -1;
	}
	ac->data = n;
	n->ac = ac;
	n->st = NODE_CONNECTING;
	/* keepalive on a unix socket fails and poisons the context */
	if (!n->is_unix && redisEnableKeepAlive(&ac->c) != REDIS_OK) {
		(void)snprintf(n->errstr, sizeof(n->errstr), "keepalive: %s",
		    ac->c.errstr);
		goto fail;
	}
	if (!n->sentinel) {
		if (t->password[0] != '\0') {
			const char *a3[] = { "AUTH", t->user, t->password };
			const char *a2[] = { "AUTH", t->password };
			int user = t->user[0] != '\0';

			if (redisAsyncCommandArgv(ac, on_setup_reply,
			        (void *)(intptr_t)0, user ? 3 : 2,
			        user ? a3 : a2, NULL) != REDIS_OK)
				goto fail_oom;
			steps++;
		}
		if (t->db != 0) {
			const char *a[] = { "SELECT", db };

			(void)snprintf(db, sizeof(db), "%d", t->db);
			if (redisAsyncCommandArgv(ac, on_setup_reply,
			        (void *)(intptr_t)1, 2, a, NULL) != REDIS_OK)
				goto fail_oom;
			steps++;
		}
		if (n->want_primary) {
			const char *a[] = { "ROLE" };

			if (redisAsyncCommandArgv(ac, on_setup_reply,
			        (void *)(intptr_t)2, 1, a, NULL) != REDIS_OK)
				goto fail_oom;
			steps++;
		}
		{
			const char *a[] = { "CONFIG", "GET",
				"maxmemory-policy" };

			if (redisAsyncCommandArgv(ac, on_setup_reply,
			        (void *)(intptr_t)3, 3, a, NULL) != REDIS_OK)
				goto fail_oom;
			steps++;
		}
	}
	n->setup_left = steps;
	/* after the adapter: it starts watching for the connect */
	(void)redisAsyncSetConnectCallback(ac, on_connect);
	(void)redisAsyncSetDisconnectCallback(ac, on_disconnect);
	return 0;
fail_oom:
	(void)snprintf(n->errstr, sizeof(n->errstr), "connect: out of memory");
fail:
	redis_node_detach(n);
	redisAsyncFree(ac);
	return -1;
}

/* Hands x to hiredis on n's ready connection. */
static void
node_send(struct redis_node *n, struct cmd *x)
{
	struct redis_client *c = n->c;
	redisAsyncContext *ac = n->ac;
	const char *asking[] = { "ASKING" };
	int rc;

	x->node = n;
	x->ac = ac;
	x->pending = 0;
	x->lost = 0;
	x->peer_closed = 0;
	x->wait_sent = 0;
	x->acked = -1;
	if (x->ask >= 0 &&
	    redisAsyncCommandArgv(ac, NULL, NULL, 1, asking, NULL) != REDIS_OK)
		goto fail;
	x->ask = -1;
	switch (x->kind) {
	case CMD_EVAL:
		if (x->is_eval) {
			size_t len;
			char *f = redis_eval_frame(x, &len);

			if (f == NULL)
				goto fail;
			rc = redisAsyncFormattedCommand(ac, redis_cmd_on_reply,
			    x, f, len);
			free(f);
		} else
			rc = redisAsyncFormattedCommand(ac, redis_cmd_on_reply,
			    x, x->frame, x->framelen);
		break;
	case CMD_PING: {
		const char *a[] = { "PING" };

		rc = redisAsyncCommandArgv(ac, redis_cmd_on_reply, x, 1, a,
		    NULL);
		break;
	}
	case CMD_SENTINEL: {
		const char *a[] = { "SENTINEL", "get-master-addr-by-name",
			c->t.master_name };

		rc = redisAsyncCommandArgv(ac, redis_cmd_on_reply, x, 3, a,
		    NULL);
		break;
	}
	case CMD_SLOTS: {
		const char *a[] = { "CLUSTER", "SLOTS" };

		rc = redisAsyncCommandArgv(ac, redis_cmd_on_reply, x, 2, a,
		    NULL);
		break;
	}
	default: rc = REDIS_ERR;
	}
	if (rc != REDIS_OK)
		goto fail;
	x->st = CMD_SENT;
	x->pending = 1;
	if (x->wait && c->min_replicas > 0 && redis_cmd_wait_join(n, x) == 0) {
		x->wait_sent = 1;
		x->pending = 2;
	}
	return;
fail:
	/* nothing of x was queued (an ASKING alone is harmless) */
	redis_cmd_end_soon(x, "out of memory");
}

void
redis_node_submit(struct redis_node *n, struct cmd *x)
{
	x->node = n;
	if (n->st == NODE_READY && n->ac != NULL) {
		x->reused = 1;
		node_send(n, x);
		return;
	}
	x->reused = 0;
	redis_cmdq_push(&n->wq, x);
	if (n->st == NODE_IDLE && redis_node_connect(n) != 0) {
		char err[ERRSTR_MAX];

		(void)snprintf(err, sizeof(err), "%s", n->errstr);
		redis_node_fail(n, err);
	}
}

void
redis_node_close(struct redis_node *n)
{
	if (n == NULL)
		return;
	if (n->ac != NULL) {
		redisAsyncContext *ac = n->ac;

		redis_node_detach(n);
		redis_ac_drop(n->c, ac, "shutting down");
	}
	node_requeue(n, "shutting down");
}
