/*
 * redis_cluster.c - routing in a Redis Cluster, for the Redis client (the
 * slots and nodes themselves are cluster.c's).
 *
 * Cluster. A command goes to the node of its slot; MOVED updates the slot
 * and sends the command straight to the named node (the map is reloaded
 * in the background, asking that node first: a lagging node's map would
 * send it back to the old owner); ASK sends ASKING and the command in one
 * write. At most CLUSTER_REDIRECTS_MAX redirections per command.
 */
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "log.h"
#include "redis_int.h"

#define CLUSTER_REDIRECTS_MAX 5 /* MOVED and ASK followed per command */

/* In a cluster: the command did not run; it may a moment later. */
static int
reply_is_cluster_busy(const redisReply *r)
{
	return redis_reply_is(r, "TRYAGAIN") ||
	    redis_reply_is(r, "CLUSTERDOWN") || redis_reply_is(r, "LOADING");
}

/* Cluster: MOVED, ASK, TRYAGAIN... 1 when x goes on, 0 to end with it. */
int
redis_cluster_eval_error(struct cmd *x)
{
	struct redis_client *c = x->c;
	struct cluster *cl = c->cl;
	struct cluster_redirect rd;
	enum cluster_redirect_kind kind;
	char host[REDIS_HOST_MAX + 1];
	int idx;

	kind = cluster_redirect_parse(x->reply->str, x->reply->len, &rd);
	if (kind == CLUSTER_REDIRECT_MOVED || kind == CLUSTER_REDIRECT_ASK) {
		if (++x->redirects > CLUSTER_REDIRECTS_MAX)
			return 0;
		/* "" is the node that answered */
		(void)snprintf(host, sizeof(host), "%s",
		    rd.host[0] != '\0' ? rd.host : x->node->host);
		if ((idx = cluster_node_get(cl, host, rd.port)) < 0)
			return 0;
		if (kind == CLUSTER_REDIRECT_MOVED) {
			/*
			 * Trust the node named: the command goes there, and
			 * the map reload asks it first (another node may not
			 * know yet and would send it back).
			 */
			cluster_slot_set(cl, rd.slot, idx);
			cl->stale = 1;
			c->map_hint = idx;
			x->moved = idx;
		} else
			x->ask = idx;
		freeReplyObject(x->reply);
		x->reply = NULL;
		x->st = CMD_IDLE;
		redis_dispatch(x);
		return 1;
	}
	if (!reply_is_cluster_busy(x->reply))
		return 0;
	freeReplyObject(x->reply);
	x->reply = NULL;
	redis_cmd_pause(x, FAILOVER_PAUSE_MS);
	return 1;
}

void
redis_cluster_conn_drop(struct redis_node *n, void *arg)
{
	struct redis_client *c = arg;

	if (n == NULL)
		return;
	redis_node_fail(n, "cluster node given up");
	n->next_dead = c->dead;
	c->dead = n;
}

void
redis_cluster_conn_free(struct redis_node *n, void *arg)
{
	(void)arg;
	redis_node_close(n);
	free(n);
}

static struct redis_node *
cluster_conn(struct redis_client *c, int idx)
{
	struct cluster_node *nd = &c->cl->nodes[idx];

	if (nd->conn == NULL)
		nd->conn = redis_node_new(c, nd->host, nd->port, 0);
	return nd->conn;
}

/* The next node to ask for the map, or -1. */
static int
map_next(struct redis_client *c)
{
	struct cluster *cl = c->cl;
	const struct redis_addr *s;
	int pass, i, idx;

	if (c->map_hint >= 0 && c->map_hint < cl->nnodes &&
	    !c->map_tried[c->map_hint]) {
		idx = c->map_hint;
		c->map_hint = -1;
		return idx;
	}
	for (pass = 0; pass < 2; pass++)
		for (i = 0; i < cl->nnodes; i++) {
			struct redis_node *n = cl->nodes[i].conn;
			int ready = n != NULL && n->st == NODE_READY;

			if (!c->map_tried[i] && cl->nodes[i].in_map &&
			    (pass == 0) == ready)
				return i;
		}
	while (c->map_seed < c->t.nhosts) {
		s = &c->t.hosts[c->map_seed++];
		if ((idx = cluster_node_get(cl, s->host, s->port)) >= 0 &&
		    !c->map_tried[idx])
			return idx;
	}
	return -1;
}

static void
map_ask(struct redis_client *c)
{
	struct redis_node *n;
	struct cmd *x, *w;
	int idx;

	for (;;) {
		if ((idx = map_next(c)) < 0) {
			c->map_active = 0;
			while ((w = c->map_q.head) != NULL) {
				redis_cmdq_remove(w);
				(void)snprintf(w->errstr, sizeof(w->errstr),
				    "%s", c->map_err);
				w->ask = w->moved = -1;
				redis_cmd_pause(w, FAILOVER_PAUSE_MS);
			}
			return;
		}
		c->map_tried[idx] = 1;
		if ((n = cluster_conn(c, idx)) != NULL &&
		    (x = redis_cmd_new(c, CMD_SLOTS, c->timeout_ms)) != NULL)
			break;
		(void)snprintf(c->map_err, sizeof(c->map_err), "out of memory");
	}
	x->slots_idx = idx;
	redis_node_submit(n, x);
}

static void
map_refresh_start(struct redis_client *c)
{
	if (c->map_active)
		return;
	c->map_active = 1;
	memset(c->map_tried, 0, sizeof(c->map_tried));
	c->map_seed = 0;
	(void)snprintf(c->map_err, sizeof(c->map_err),
	    "no cluster node answered CLUSTER SLOTS");
	map_ask(c);
}

void
redis_cluster_map_answer(struct cmd *x)
{
	struct redis_client *c = x->c;
	struct cluster *cl = c->cl;
	char host[REDIS_HOST_MAX + 1], err[ERRSTR_MAX];
	struct cmd *w;

	if (c->closing || !c->map_active)
		return;
	if (x->reply == NULL || x->reply->type == REDIS_REPLY_ERROR) {
		(void)snprintf(c->map_err, sizeof(c->map_err), "%s",
		    x->reply != NULL ? x->reply->str : x->errstr);
		map_ask(c);
		return;
	}
	/* the load may reuse entries of the table: keep the address */
	(void)snprintf(host, sizeof(host), "%s", cl->nodes[x->slots_idx].host);
	if (cluster_map_load(cl, x->reply, host, err, sizeof(err)) != 0) {
		(void)snprintf(c->map_err, sizeof(c->map_err), "%s", err);
		map_ask(c);
		return;
	}
	log_debug(NULL, "cluster slot map loaded from %s", host);
	c->map_active = 0;
	while ((w = c->map_q.head) != NULL) {
		redis_cmdq_remove(w);
		redis_dispatch(w);
	}
}

void
redis_cluster_dispatch(struct cmd *x)
{
	struct redis_client *c = x->c;
	struct cluster *cl = c->cl;
	struct redis_node *n;
	int idx = -1;
	unsigned s;

	if (x->kind == CMD_SLOTS) {
		/* not routed: back to map_ask() */
		redis_cmd_end_soon(x, NULL);
		return;
	}
	if (x->kind == CMD_PING) {
		if (cl->stale) {
			redis_cmdq_push(&c->map_q, x);
			map_refresh_start(c);
			return;
		}
		for (s = 0; s < CLUSTER_SLOTS; s++)
			if (cluster_slot_node(cl, s) < 0) {
				(void)snprintf(x->errstr, sizeof(x->errstr),
				    "no cluster node serves slot %u", s);
				cl->stale = 1;
				redis_cmd_end_soon(x, NULL);
				return;
			}
		for (; x->ping_idx < cl->nnodes; x->ping_idx++)
			if (cl->nodes[x->ping_idx].in_map)
				break;
		if (x->ping_idx >= cl->nnodes) {
			/* every primary answered: the last PONG (never inside the call) */
			redis_cmd_end_soon(x, NULL);
			return;
		}
		if (x->reply != NULL) {
			freeReplyObject(x->reply);
			x->reply = NULL;
		}
		idx = x->ping_idx;
	} else if (x->ask >= 0)
		idx = x->ask;
	else if (x->moved >= 0) {
		idx = x->moved;
		x->moved = -1;
	} else {
		idx = cluster_slot_node(cl, x->slot);
		if (idx < 0) {
			(void)snprintf(x->errstr, sizeof(x->errstr),
			    "no cluster node serves slot %u", x->slot);
			redis_cmdq_push(&c->map_q, x);
			map_refresh_start(c);
			return;
		}
		if (cl->stale)
			map_refresh_start(c); /* for the next commands */
	}
	if ((n = cluster_conn(c, idx)) == NULL) {
		redis_cmd_end_soon(x, "out of memory");
		return;
	}
	redis_node_submit(n, x);
}
