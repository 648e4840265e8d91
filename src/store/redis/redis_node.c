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
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <async.h>

#include "log.h"
#include "redis.h"
#include "redis_int.h"

/* A new connection's set-up, in the order it is sent. */
enum setup_step { SETUP_AUTH, SETUP_SELECT, SETUP_ROLE, SETUP_POLICY };

static void node_send(struct redis_node *n, struct cmd *cmd);
static void on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* node_set_state's map: node_allowed[from] has bit `to` (redis_int.h). */
#define B(s) (1u << (s))
static const unsigned node_allowed[NODE_NSTATES] = {
	[NODE_IDLE] = B(NODE_IDLE) | B(NODE_CONNECTING), /* detached again */
	[NODE_CONNECTING] = B(NODE_IDLE) | B(NODE_READY),
	[NODE_READY] = B(NODE_IDLE),
};
#undef B

/* The one place a node's state changes: only along node_allowed. */
static void
node_set_state(struct redis_node *n, enum node_state to)
{
	(void)node_allowed; /* read by the asserts only (none with NDEBUG) */
	assert(n->st < NODE_NSTATES && to < NODE_NSTATES);
	assert((node_allowed[n->st] & (1u << to)) != 0);
	n->st = to;
}

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
	/* hiredis's callbacks still to come for it find no node */
	if (n->ac != NULL)
		n->ac->data = NULL;
	n->ac = NULL;
	node_set_state(n, NODE_IDLE);
	n->setup.left = 0;
	n->setup.failed = 0;
}

/* A NULL reply: hiredis is freeing ac; its node must not use it. */
void
redis_ac_lost(struct redis_client *c, redisAsyncContext *ac)
{
	struct redis_node *n = ac->data;

	if (n != NULL && n->ac == ac) {
		/* hiredis is freeing it after an error */
		redis_node_detach(n);
		if (c->topo->node_lost != NULL)
			c->topo->node_lost(n);
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
	TAILQ_INIT(&n->wq);
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
 * The commands of n's queue were not sent: each goes on as the topology
 * says (single: ends with err; sentinel: asks again; cluster: retries).
 */
static void
node_requeue(struct redis_node *n, const char *err)
{
	struct redis_client *c = n->c;
	struct cmd *cmd;

	while ((cmd = TAILQ_FIRST(&n->wq)) != NULL) {
		redis_cmdq_remove(cmd);
		if (err != NULL)
			(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
			    "%s", err);
		if (c->closing || n->evicting || cmd->kind == CMD_SENTINEL ||
		    cmd->kind == CMD_SLOTS || c->topo->requeue == NULL)
			redis_cmd_end_soon(cmd, NULL);
		else
			c->topo->requeue(cmd);
	}
}

/*
 * n's connection failed (or is dropped on purpose): the commands sent on it
 * end with outcome_unknown, the queued ones go on (node_requeue) unless
 * the topology took them over.
 */
void
redis_node_fail(struct redis_node *n, const char *err)
{
	struct redis_client *c = n->c;
	redisAsyncContext *ac = n->ac;
	int taken = 0;

	(void)snprintf(n->errstr, sizeof(n->errstr), "%s",
	    err != NULL ? err : "connection failed");
	redis_node_detach(n);
	if (ac != NULL)
		redis_ac_drop(c, ac, n->errstr);
	if (!c->closing && c->topo->node_failed != NULL)
		taken = c->topo->node_failed(n, n->errstr);
	if (!taken)
		node_requeue(n, n->errstr);
}

static void
node_ready(struct redis_node *n)
{
	struct redis_client *c = n->c;
	struct cmd *cmd;

	node_set_state(n, NODE_READY);
	if (c->topo->node_ready != NULL)
		c->topo->node_ready(n);
	while ((cmd = TAILQ_FIRST(&n->wq)) != NULL) {
		redis_cmdq_remove(cmd);
		/* waited for this connection: it was opened for them */
		cmd->attempt.reused = 0;
		node_send(n, cmd);
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
	if (n->setup.left == 0 && n->st == NODE_CONNECTING)
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
setup_check(struct redis_node *n, const redisReply *r, enum setup_step step)
{
	const char *what = step == SETUP_AUTH ? "AUTH"
	    : step == SETUP_SELECT            ? "SELECT"
	    : step == SETUP_ROLE              ? "ROLE"
	                                      : "CONFIG GET";

	if (r->type == REDIS_REPLY_ERROR && step != SETUP_POLICY) {
		(void)snprintf(n->errstr, sizeof(n->errstr), "%s: %.*s", what,
		    (int)r->len, r->str != NULL ? r->str : "");
		return -1;
	}
	if (step == SETUP_ROLE) {
		int ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
		    r->element[0]->type == REDIS_REPLY_STRING;

		if (ok && strcmp(r->element[0]->str, "master") == 0)
			return 0;
		(void)snprintf(n->errstr, sizeof(n->errstr),
		    "%s:%d is not the primary (ROLE %s)", n->host, n->port,
		    ok ? r->element[0]->str : "?");
		return -1;
	}
	if (step == SETUP_POLICY) {
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
			    "Redis maxmemory-policy is %s; records could be evicted: refusing (set noeviction)",
			    r->element[1]->str);
			log_error(NULL, "%s", n->errstr);
			return -1;
		}
		log_warn(NULL,
		    "cannot read Redis maxmemory-policy (%s); make sure it is noeviction",
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	}
	return 0;
}

static void
on_setup_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct redis_node *n = ac->data;
	enum setup_step step = (enum setup_step)(intptr_t)privdata;

	if (n == NULL || n->ac != ac)
		return; /* an old connection going away */
	if (reply == NULL)
		return; /* on_connect / on_disconnect says why */
	n->setup.left--;
	if (!n->setup.failed && setup_check(n, reply, step) != 0)
		n->setup.failed = 1;
	if (n->setup.left > 0)
		return;
	if (n->setup.failed) {
		char err[ERRSTR_MAX];

		(void)snprintf(err, sizeof(err), "%s", n->errstr);
		redis_node_fail(n, err);
		return;
	}
	if (ac->c.flags & REDIS_CONNECTED)
		node_ready(n);
}

/*
 * Queues n's set-up on ac, in one write with the commands that follow:
 * AUTH, SELECT, ROLE (behind sentinels), CONFIG GET maxmemory-policy.
 * The number of replies to come, or -1 on ENOMEM.
 */
static int
node_setup_queue(struct redis_node *n, redisAsyncContext *ac)
{
	const struct redis_target *t = &n->c->t;
	const char *auth3[] = { "AUTH", t->user, t->password };
	const char *auth2[] = { "AUTH", t->password };
	const char *role[] = { "ROLE" };
	const char *policy[] = { "CONFIG", "GET", "maxmemory-policy" };
	char db[16];
	const char *sel[] = { "SELECT", db };
	int user = t->user[0] != '\0', steps = 0;

	if (t->password[0] != '\0') {
		if (redisAsyncCommandArgv(ac, on_setup_reply,
		        (void *)(intptr_t)SETUP_AUTH, user ? 3 : 2,
		        user ? auth3 : auth2, NULL) != REDIS_OK)
			return -1;
		steps++;
	}
	if (t->db != 0) {
		(void)snprintf(db, sizeof(db), "%d", t->db);
		if (redisAsyncCommandArgv(ac, on_setup_reply,
		        (void *)(intptr_t)SETUP_SELECT, 2, sel,
		        NULL) != REDIS_OK)
			return -1;
		steps++;
	}
	if (n->want_primary) {
		if (redisAsyncCommandArgv(ac, on_setup_reply,
		        (void *)(intptr_t)SETUP_ROLE, 1, role,
		        NULL) != REDIS_OK)
			return -1;
		steps++;
	}
	if (redisAsyncCommandArgv(ac, on_setup_reply,
	        (void *)(intptr_t)SETUP_POLICY, 3, policy, NULL) != REDIS_OK)
		return -1;
	return steps + 1;
}

/* Opens n's connection and queues its set-up. 0, or -1 with n->errstr. */
int
redis_node_connect(struct redis_node *n)
{
	struct redis_client *c = n->c;
	redisAsyncContext *ac;
	int steps = 0;

	n->evicting = 0;
	n->setup.failed = 0;
	n->setup.left = 0;
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
	if (redis_uv_attach(ac, c->loop, n->is_unix ? NULL : c->tls,
	        c->t.tls.server_name[0] != '\0' ? c->t.tls.server_name
	                                        : n->host,
	        c->t.tls.verify, &c->tls_log_at) != REDIS_OK) {
		(void)snprintf(n->errstr, sizeof(n->errstr),
		    "connect: cannot watch the socket");
		redisAsyncFree(ac);
		return -1;
	}
	ac->data = n;
	n->ac = ac;
	node_set_state(n, NODE_CONNECTING);
	/* keepalive on a unix socket fails and poisons the context */
	if (!n->is_unix && redisEnableKeepAlive(&ac->c) != REDIS_OK) {
		(void)snprintf(n->errstr, sizeof(n->errstr), "keepalive: %s",
		    ac->c.errstr);
		goto fail;
	}
	if (!n->sentinel && (steps = node_setup_queue(n, ac)) < 0)
		goto fail_oom;
	n->setup.left = steps;
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

/* Hands cmd's command to hiredis on ac. REDIS_OK or REDIS_ERR. */
static int
node_write(struct redis_node *n, redisAsyncContext *ac, struct cmd *cmd)
{
	const char *ping[] = { "PING" };
	const char *sentinel[] = { "SENTINEL", "get-master-addr-by-name",
		n->c->t.master_name };
	const char *slots[] = { "CLUSTER", "SLOTS" };
	size_t len;
	char *f;
	int rc;

	switch (cmd->kind) {
	case CMD_EVAL:
		if (!cmd->eval.full)
			return redisAsyncFormattedCommand(ac,
			    redis_cmd_on_reply, cmd, cmd->eval.frame,
			    cmd->eval.framelen);
		if ((f = redis_cmd_eval_frame(cmd, &len)) == NULL)
			return REDIS_ERR;
		rc = redisAsyncFormattedCommand(ac, redis_cmd_on_reply, cmd, f,
		    len);
		free(f);
		return rc;
	case CMD_PING:
		return redisAsyncCommandArgv(ac, redis_cmd_on_reply, cmd, 1,
		    ping, NULL);
	case CMD_SENTINEL:
		return redisAsyncCommandArgv(ac, redis_cmd_on_reply, cmd, 3,
		    sentinel, NULL);
	case CMD_SLOTS:
		return redisAsyncCommandArgv(ac, redis_cmd_on_reply, cmd, 2,
		    slots, NULL);
	}
	return REDIS_ERR;
}

/* Hands cmd to hiredis on n's ready connection. */
static void
node_send(struct redis_node *n, struct cmd *cmd)
{
	struct redis_client *c = n->c;
	redisAsyncContext *ac = n->ac;
	const char *asking[] = { "ASKING" };

	cmd->attempt.node = n;
	cmd->attempt.ac = ac;
	cmd->attempt.pending = 0;
	cmd->attempt.lost = 0;
	cmd->attempt.peer_closed = 0;
	cmd->attempt.wait_sent = 0;
	cmd->attempt.acked = -1;
	if (cmd->route.ask >= 0 &&
	    redisAsyncCommandArgv(ac, NULL, NULL, 1, asking, NULL) != REDIS_OK)
		goto fail;
	cmd->route.ask = -1;
	if (node_write(n, ac, cmd) != REDIS_OK)
		goto fail;
	redis_cmd_sent(cmd);
	cmd->attempt.pending = 1;
	if (cmd->flags.wait && c->min_replicas > 0 &&
	    redis_cmd_wait_join(n, cmd) == 0) {
		cmd->attempt.wait_sent = 1;
		cmd->attempt.pending = 2;
	}
	return;
fail:
	/* nothing of cmd was queued (an ASKING alone is harmless) */
	redis_cmd_end_soon(cmd, "out of memory");
}

void
redis_node_submit(struct redis_node *n, struct cmd *cmd)
{
	cmd->attempt.node = n;
	if (n->st == NODE_READY && n->ac != NULL) {
		cmd->attempt.reused = 1;
		node_send(n, cmd);
		return;
	}
	cmd->attempt.reused = 0;
	redis_cmdq_push(&n->wq, cmd);
	if (n->st == NODE_IDLE && redis_node_connect(n) != 0) {
		char err[ERRSTR_MAX];

		(void)snprintf(err, sizeof(err), "%s", n->errstr);
		redis_node_fail(n, err);
	}
}

int
redis_node_in_use(const struct redis_node *n)
{
	const struct cmd *cmd;

	LIST_FOREACH(cmd, &n->c->all, all_link)
	if (cmd->attempt.node == n)
		return 1;
	return 0;
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
