/*
 * redis_cluster.c - the topology of a Redis Cluster, for the Redis client
 * (redis_topology_cluster); its state is struct slots (the slots and nodes
 * themselves are cluster.c's).
 *
 * Cluster. A command goes to the node of its slot; MOVED updates the slot
 * and sends the command straight to the named node (the map is reloaded
 * in the background, asking that node first: a lagging node's map would
 * send it back to the old owner); ASK sends ASKING and the command in one
 * write. At most CLUSTER_REDIRECTS_MAX redirections per command.
 *
 * Nodes given up. A node the map drops (a full table) may still be named
 * by a command whose attempt it was; it waits in the dead list until no
 * live command names it, and is freed before the loop next polls. The
 * list is bounded by the commands in flight, not by the process's life.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"
#include "redis_int.h"

#define CLUSTER_REDIRECTS_MAX 5 /* MOVED and ASK followed per command */

struct slots {
	struct cluster *cl;
	/* a map refresh (CLUSTER SLOTS) */
	struct {
		int active;
		int hint; /* the node to ask first (MOVED named it), or -1 */
		unsigned char tried[CLUSTER_NODES_MAX];
		int seed;      /* seeds asked so far */
		struct cmdq q; /* commands waiting for a map */
		char err[ERRSTR_MAX];
	} map;
	SLIST_HEAD(, redis_node) dead; /* given up, maybe still named */
	int ndead;
	uv_prepare_t *reap; /* frees the dead nodes out of callbacks */
};

static struct slots *
slots_of(const struct redis_client *c)
{
	return c->topo_state;
}

/* --- nodes given up -------------------------------------------------------------- */

/* Before the loop polls: the dead nodes no live command names are freed. */
static void
on_reap(uv_prepare_t *h)
{
	struct redis_client *c = h->data;
	struct slots *sl = slots_of(c);
	struct redis_node *n, *next;

	for (n = SLIST_FIRST(&sl->dead); n != NULL; n = next) {
		next = SLIST_NEXT(n, dead_link);
		if (n->ac != NULL || redis_node_in_use(n))
			continue;
		SLIST_REMOVE(&sl->dead, n, redis_node, dead_link);
		sl->ndead--;
		log_debug(NULL,
		    "cluster node %s:%d released (%d given up still named)",
		    n->host, n->port, sl->ndead);
		free(n);
	}
	/* one still named by a command in flight: again next turn */
	if (SLIST_EMPTY(&sl->dead))
		(void)uv_prepare_stop(h);
}

/* struct cluster's node_drop while serving: n given up. */
static void
conn_drop(struct redis_node *n, void *arg)
{
	struct redis_client *c = arg;
	struct slots *sl = slots_of(c);

	if (n == NULL)
		return;
	redis_node_fail(n, "cluster node given up");
	log_debug(NULL, "cluster node %s:%d given up", n->host, n->port);
	SLIST_INSERT_HEAD(&sl->dead, n, dead_link);
	sl->ndead++;
	(void)uv_prepare_start(sl->reap, on_reap);
}

/* struct cluster's node_drop at redis_client_free(): n closed and freed. */
static void
conn_free(struct redis_node *n, void *arg)
{
	(void)arg;
	redis_node_close(n);
	free(n);
}

static void
on_reap_closed(uv_handle_t *h)
{
	free(h);
}

/* --- routing --------------------------------------------------------------------- */

/* In a cluster: the command did not run; it may a moment later. */
static int
reply_is_cluster_busy(const redisReply *r)
{
	return redis_reply_is(r, "TRYAGAIN") ||
	    redis_reply_is(r, "CLUSTERDOWN") || redis_reply_is(r, "LOADING");
}

/* MOVED or ASK: 1 when cmd goes to the node named, 0 to end with it. */
static int
cmd_redirect(struct cmd *cmd, enum cluster_redirect_kind kind,
    const struct cluster_redirect *rd)
{
	struct slots *sl = slots_of(cmd->c);
	char host[REDIS_HOST_MAX + 1];
	int idx;

	if (++cmd->route.redirects > CLUSTER_REDIRECTS_MAX)
		return 0;
	/* "" is the node that answered */
	(void)snprintf(host, sizeof(host), "%s",
	    rd->host[0] != '\0' ? rd->host : cmd->attempt.node->host);
	if ((idx = cluster_node_get(sl->cl, host, rd->port)) < 0)
		return 0;
	if (kind == CLUSTER_REDIRECT_MOVED) {
		/*
		 * Trust the node named: the command goes there, and the map
		 * reload asks it first (another node may not know yet and
		 * would send it back).
		 */
		cluster_slot_set(sl->cl, rd->slot, idx);
		sl->cl->stale = 1;
		sl->map.hint = idx;
		cmd->route.moved = idx;
	} else
		cmd->route.ask = idx;
	freeReplyObject(cmd->out.reply);
	cmd->out.reply = NULL;
	redis_cmd_dispatch(cmd);
	return 1;
}

/* MOVED, ASK, TRYAGAIN... 1 when cmd goes on, 0 to end with its error. */
static int
slots_error(struct cmd *cmd)
{
	struct cluster_redirect rd;
	enum cluster_redirect_kind kind;

	kind = cluster_redirect_parse(cmd->out.reply->str, cmd->out.reply->len,
	    &rd);
	if (kind == CLUSTER_REDIRECT_MOVED || kind == CLUSTER_REDIRECT_ASK)
		return cmd_redirect(cmd, kind, &rd);
	if (!reply_is_cluster_busy(cmd->out.reply))
		return 0;
	freeReplyObject(cmd->out.reply);
	cmd->out.reply = NULL;
	redis_cmd_pause(cmd, FAILOVER_PAUSE_MS);
	return 1;
}

static struct redis_node *
slots_conn(struct redis_client *c, int idx)
{
	struct cluster_node *nd = &slots_of(c)->cl->nodes[idx];

	if (nd->conn == NULL)
		nd->conn = redis_node_new(c, nd->host, nd->port, 0);
	return nd->conn;
}

/* The next node to ask for the map, or -1. */
static int
map_next(struct redis_client *c)
{
	struct slots *sl = slots_of(c);
	struct cluster *cl = sl->cl;
	const struct redis_addr *s;
	int pass, i, idx;

	if (sl->map.hint >= 0 && sl->map.hint < cl->nnodes &&
	    !sl->map.tried[sl->map.hint]) {
		idx = sl->map.hint;
		sl->map.hint = -1;
		return idx;
	}
	for (pass = 0; pass < 2; pass++)
		for (i = 0; i < cl->nnodes; i++) {
			struct redis_node *n = cl->nodes[i].conn;
			int ready = n != NULL && n->st == NODE_READY;

			if (!sl->map.tried[i] && cl->nodes[i].in_map &&
			    (pass == 0) == ready)
				return i;
		}
	while (sl->map.seed < c->t.nhosts) {
		s = &c->t.hosts[sl->map.seed++];
		if ((idx = cluster_node_get(cl, s->host, s->port)) >= 0 &&
		    !sl->map.tried[idx])
			return idx;
	}
	return -1;
}

/* No node gave a map: the waiting commands pause with the last error. */
static void
map_fail(struct redis_client *c)
{
	struct slots *sl = slots_of(c);
	struct cmd *cmd;

	sl->map.active = 0;
	while ((cmd = TAILQ_FIRST(&sl->map.q)) != NULL) {
		redis_cmdq_remove(cmd);
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr), "%s",
		    sl->map.err);
		cmd->route.ask = cmd->route.moved = -1;
		redis_cmd_pause(cmd, FAILOVER_PAUSE_MS);
	}
}

static void
map_ask(struct redis_client *c)
{
	struct slots *sl = slots_of(c);
	struct redis_node *n;
	struct cmd *cmd;
	int idx;

	for (;;) {
		if ((idx = map_next(c)) < 0) {
			map_fail(c);
			return;
		}
		sl->map.tried[idx] = 1;
		if ((n = slots_conn(c, idx)) != NULL &&
		    (cmd = redis_cmd_new(c, CMD_SLOTS, c->timeout_ms)) != NULL)
			break;
		(void)snprintf(sl->map.err, sizeof(sl->map.err),
		    "out of memory");
	}
	cmd->route.idx = idx;
	redis_node_submit(n, cmd);
}

static void
map_refresh_start(struct redis_client *c)
{
	struct slots *sl = slots_of(c);

	if (sl->map.active)
		return;
	sl->map.active = 1;
	memset(sl->map.tried, 0, sizeof(sl->map.tried));
	sl->map.seed = 0;
	(void)snprintf(sl->map.err, sizeof(sl->map.err),
	    "no cluster node answered CLUSTER SLOTS");
	map_ask(c);
}

/* CLUSTER SLOTS came back (or not). */
static void
slots_answer(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;
	struct slots *sl = slots_of(c);
	const redisReply *r = cmd->out.reply;
	char host[REDIS_HOST_MAX + 1], err[ERRSTR_MAX];
	struct cmd *w;

	if (c->closing || !sl->map.active)
		return;
	if (r == NULL || r->type == REDIS_REPLY_ERROR) {
		(void)snprintf(sl->map.err, sizeof(sl->map.err), "%s",
		    r != NULL ? r->str : cmd->out.errstr);
		map_ask(c);
		return;
	}
	/* the load may reuse entries of the table: keep the address */
	(void)snprintf(host, sizeof(host), "%s",
	    sl->cl->nodes[cmd->route.idx].host);
	if (cluster_map_load(sl->cl, r, host, err, sizeof(err)) != 0) {
		(void)snprintf(sl->map.err, sizeof(sl->map.err), "%s", err);
		map_ask(c);
		return;
	}
	log_debug(NULL, "cluster slot map loaded from %s", host);
	sl->map.active = 0;
	while ((w = TAILQ_FIRST(&sl->map.q)) != NULL) {
		redis_cmdq_remove(w);
		redis_cmd_dispatch(w);
	}
}

/* cmd waits for a map, which is asked for. */
static void
slots_wait_map(struct cmd *cmd)
{
	redis_cmdq_push(&slots_of(cmd->c)->map.q, cmd);
	map_refresh_start(cmd->c);
}

/* A PING goes to each primary in turn: the index of the next, or -1. */
static int
ping_route(struct cmd *cmd)
{
	struct cluster *cl = slots_of(cmd->c)->cl;
	unsigned s;

	if (cl->stale) {
		slots_wait_map(cmd);
		return -1;
	}
	for (s = 0; s < CLUSTER_SLOTS; s++)
		if (cluster_slot_node(cl, s) < 0) {
			(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
			    "no cluster node serves slot %u", s);
			cl->stale = 1;
			redis_cmd_end_soon(cmd, NULL);
			return -1;
		}
	for (; cmd->route.idx < cl->nnodes; cmd->route.idx++)
		if (cl->nodes[cmd->route.idx].in_map)
			break;
	if (cmd->route.idx >= cl->nnodes) {
		/* every primary answered: the last PONG (never inside the call) */
		redis_cmd_end_soon(cmd, NULL);
		return -1;
	}
	if (cmd->out.reply != NULL) {
		freeReplyObject(cmd->out.reply);
		cmd->out.reply = NULL;
	}
	return cmd->route.idx;
}

/* Routes cmd to the node of its slot (or each primary, for PING). */
static void
slots_dispatch(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;
	struct cluster *cl = slots_of(c)->cl;
	struct redis_node *n;
	int idx;

	if (cmd->kind == CMD_SLOTS) {
		/* not routed: back to map_ask() */
		redis_cmd_end_soon(cmd, NULL);
		return;
	}
	if (cmd->kind == CMD_PING) {
		if ((idx = ping_route(cmd)) < 0)
			return;
	} else if (cmd->route.ask >= 0)
		idx = cmd->route.ask;
	else if (cmd->route.moved >= 0) {
		idx = cmd->route.moved;
		cmd->route.moved = -1;
	} else {
		idx = cluster_slot_node(cl, cmd->route.slot);
		if (idx < 0) {
			(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
			    "no cluster node serves slot %u", cmd->route.slot);
			slots_wait_map(cmd);
			return;
		}
		if (cl->stale)
			map_refresh_start(c); /* for the next commands */
	}
	if ((n = slots_conn(c, idx)) == NULL) {
		redis_cmd_end_soon(cmd, "out of memory");
		return;
	}
	redis_node_submit(n, cmd);
}

/* A PING's PONG: on to the next primary. */
static int
slots_more(struct cmd *cmd)
{
	if (cmd->kind != CMD_PING)
		return 0;
	cmd->route.idx++;
	redis_cmd_dispatch(cmd);
	return 1;
}

static void
slots_requeue(struct cmd *cmd)
{
	cmd->route.ask = cmd->route.moved = -1;
	redis_cmd_pause(cmd, FAILOVER_PAUSE_MS);
}

static void
slots_node_lost(struct redis_node *n)
{
	slots_of(n->c)->cl->stale = 1;
}

static int
slots_node_failed(struct redis_node *n, const char *err)
{
	(void)err;
	slots_of(n->c)->cl->stale = 1;
	return 0;
}

static int
slots_init(struct redis_client *c)
{
	struct slots *sl = calloc(1, sizeof(*sl));

	if (sl == NULL)
		return -1;
	c->topo_state = sl;
	sl->map.hint = -1;
	TAILQ_INIT(&sl->map.q);
	SLIST_INIT(&sl->dead);
	if ((sl->cl = cluster_new()) == NULL)
		return -1;
	sl->cl->node_drop = conn_drop;
	sl->cl->node_drop_arg = c;
	if ((sl->reap = malloc(sizeof(*sl->reap))) == NULL)
		return -1;
	if (uv_prepare_init(c->loop, sl->reap) != 0) {
		free(sl->reap);
		sl->reap = NULL;
		return -1;
	}
	sl->reap->data = c;
	return 0;
}

static void
slots_free(struct redis_client *c)
{
	struct slots *sl = slots_of(c);
	struct redis_node *n;

	if (sl == NULL)
		return;
	if (sl->cl != NULL) {
		sl->cl->node_drop = conn_free;
		cluster_free(sl->cl);
	}
	while ((n = SLIST_FIRST(&sl->dead)) != NULL) {
		SLIST_REMOVE_HEAD(&sl->dead, dead_link);
		redis_node_close(n);
		free(n);
	}
	if (sl->reap != NULL)
		uv_close((uv_handle_t *)sl->reap, on_reap_closed);
	free(sl);
	c->topo_state = NULL;
}

const struct redis_topology redis_topology_cluster = {
	.init = slots_init,
	.free = slots_free,
	.dispatch = slots_dispatch,
	.error = slots_error,
	.more = slots_more,
	.answer = slots_answer,
	.requeue = slots_requeue,
	.node_lost = slots_node_lost,
	.node_failed = slots_node_failed,
};
