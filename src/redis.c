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
 * with outcome_unknown and is never sent again. A command still waiting
 * for a connection, a map or a primary was not sent and may go on another
 * connection.
 *
 * Timeouts. hiredis 0.14 has none: a command's timer fires at its
 * deadline; a command that was sent then drops its connection
 * (redisAsyncFree: hiredis calls every pending callback with a NULL
 * reply), a command waiting for a connection drops that connection (this
 * is the connect timeout).
 *
 * Sentinels. Discovery runs on the loop with asynchronous hiredis
 * contexts (not on the worker pool: a pool thread blocked in connect()
 * cannot be cancelled, and the pool is shared with file I/O). The
 * sentinels are asked in turn, starting with the one whose answer last
 * proved good; each gets an equal share of what is left of one deadline
 * (timeout_ms for the whole round), so N silent sentinels cost one
 * timeout, not N. An answer is tried at once (connect, ROLE master); when
 * it proves stale the next sentinel is asked in the same round, and the
 * stale one is not asked first again.
 *
 * WAIT. The commands sent with wait on one connection in one loop turn
 * share one WAIT, queued before the loop polls (uv_prepare), so it leaves
 * in the same write as they do in the common case.
 *
 * Errors that mean the script did not run behind sentinels (READONLY,
 * MASTERDOWN, LOADING, NOREPLICAS) resend after a pause; READONLY and the
 * like retire the connection (its other replies still come) and ask the
 * sentinels again; NOREPLICAS and a WAIT shortfall (with min_replicas)
 * ask them again while the primary keeps serving, passing over answers
 * that name it: under a split brain the majority's new primary takes over
 * as soon as a sentinel names it.
 *
 * Cluster. A command goes to the node of its slot; MOVED updates the slot
 * and sends the command straight to the named node (the map is reloaded
 * in the background, asking that node first: a lagging node's map would
 * send it back to the old owner); ASK sends ASKING and the command in one
 * write. At most CLUSTER_REDIRECTS_MAX redirections per command.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <async.h>
#include <uv.h>

#include "cluster.h"
#include "digest.h"
#include "log.h"
#include "redis.h"
#include "util.h"

#define EVAL_ARGS_MAX 24        /* EVALSHA sha 1 key + at most 20 arguments */
#define FAILOVER_PAUSE_MS 100   /* between attempts during a failover */
#define CLUSTER_REDIRECTS_MAX 5 /* MOVED and ASK followed per command */
#define PORT_MAX 65535
#define ERRSTR_MAX 128
#define NOSCRIPT_LOG_EVERY_MS 1000

/* --- queues -------------------------------------------------------------- */

struct cmd;

struct cmdq {
	struct cmd *head, *tail;
};

enum cmd_kind {
	CMD_EVAL,     /* the caller's script */
	CMD_PING,     /* the caller's PING */
	CMD_SENTINEL, /* SENTINEL get-master-addr-by-name, for discovery */
	CMD_SLOTS,    /* CLUSTER SLOTS, for the map */
};

enum cmd_state {
	CMD_IDLE,    /* being routed */
	CMD_QUEUED,  /* in a queue: a node's, or waiting for a primary/map */
	CMD_SENT,    /* handed to hiredis on a ready connection */
	CMD_PAUSED,  /* timer: dispatched again at wake-up */
	CMD_FAILING, /* timer: finished at wake-up (never inside a call) */
	CMD_DONE,
};

enum node_state { NODE_IDLE, NODE_CONNECTING, NODE_READY };

struct wait_group;

struct redis_node {
	struct redis_client *c;
	redisAsyncContext *ac; /* NULL when not connected */
	unsigned gen;          /* counts connections: a wait group's one */
	struct wait_group *wg; /* commands sent this turn, WAIT to follow */
	enum node_state st;
	int is_unix;
	char host[REDIS_HOST_MAX + 1];
	int port;
	int sentinel;     /* a sentinel: no set-up */
	int want_primary; /* ROLE must say master */
	int setup_left;   /* set-up replies still to come */
	int setup_failed; /* a set-up reply was bad: drop when all are in */
	int evicting;
	struct cmdq wq; /* commands waiting until ready */
	struct redis_node *next_dead;
	char errstr[ERRSTR_MAX];
};

struct cmd {
	struct redis_client *c;
	enum cmd_kind kind;
	enum cmd_state st;
	struct cmd *prev, *next; /* in q */
	struct cmdq *q;
	struct cmd *all_prev, *all_next; /* c->all */
	uv_timer_t timer;
	uint64_t deadline; /* uv_now() ms */
	struct redis_node *node;
	redisAsyncContext *ac; /* sent on */
	int pending;           /* hiredis callbacks to come for this attempt */
	int lost;              /* a callback came with a NULL reply */
	int timed_out;
	int wait;      /* followed by WAIT */
	int wait_sent; /* a WAIT covers this attempt (-1: its reply lost) */
	struct cmd *wg_next; /* in its wait group */
	long long acked;
	redisReply *reply; /* a copy, kept until the attempt is complete */
	int outcome_unknown;
	int durable;
	/* EVAL: the framed EVALSHA command; from rest on it is also EVAL's */
	struct lua_script *s;
	char *frame;
	size_t framelen, rest;
	int is_eval; /* NOSCRIPT came: now EVAL */
	unsigned slot;
	int redirects;
	int ask;   /* node index for ASKING, or -1 */
	int moved; /* node index to trust after MOVED, or -1 */
	int ping_idx;
	int sentinel_idx; /* CMD_SENTINEL: which sentinel */
	int slots_idx;    /* CMD_SLOTS: which node */
	redis_cb *cb;
	void *arg;
	char errstr[ERRSTR_MAX];
};

/*
 * The commands sent with wait on one connection in one loop turn: one
 * WAIT after the last covers them all (WAIT counts the replicas that
 * acknowledged every write of the connection so far). A WAIT per command
 * would serialize: Redis blocks the connection for each WAIT that falls
 * short, replica_timeout_ms each.
 */
struct wait_group {
	struct wait_group *next; /* c->wgs: not yet sent */
	struct redis_node *n;
	unsigned gen;
	struct cmd *members;
};

struct redis_client {
	uv_loop_t *loop;
	uv_prepare_t *prep; /* sends the turn's WAITs before the loop polls */
	struct wait_group *wgs;
	struct redis_target t;
	int timeout_ms;
	int min_replicas;
	int wait_timeout_ms; /* replica_timeout_ms when WAIT is sent */
	char wait_n[16], wait_ms[16];
	int closing;
	uint64_t noscript_log_at;
	const char *drop_reason; /* why a connection is being dropped */
	struct cmd *all;         /* every live command */
	struct redis_node *main; /* single Redis, or the primary */
	struct redis_node *dead; /* nodes given up, freed with the client */
	/* sentinel */
	struct redis_node *sentinels[REDIS_URL_HOSTS_MAX];
	int primary_ok; /* main is the primary the sentinels named */
	char primary[REDIS_HOST_MAX + 1];
	int primary_port;
	int primary_from; /* the sentinel that named it */
	int sentinel_first;
	int disc_active, disc_k, disc_asked, disc_verifying, disc_refresh;
	uint64_t disc_deadline;
	char suspect[REDIS_HOST_MAX + 1]; /* a primary to avoid this round */
	int suspect_port;
	int suspect_seen;
	uint64_t suspect_at; /* when the last refresh started */
	struct cmdq disc_q;
	char disc_err[ERRSTR_MAX];
	/* cluster */
	struct cluster *cl;
	int map_active, map_hint;
	unsigned char map_tried[CLUSTER_NODES_MAX];
	int map_seed; /* seeds asked so far */
	struct cmdq map_q;
	char map_err[ERRSTR_MAX];
};

static void
q_push(struct cmdq *q, struct cmd *x)
{
	x->prev = q->tail;
	x->next = NULL;
	if (q->tail != NULL)
		q->tail->next = x;
	else
		q->head = x;
	q->tail = x;
	x->q = q;
	x->st = CMD_QUEUED;
}

static void
q_remove(struct cmd *x)
{
	struct cmdq *q = x->q;

	if (q == NULL)
		return;
	if (x->prev != NULL)
		x->prev->next = x->next;
	else
		q->head = x->next;
	if (x->next != NULL)
		x->next->prev = x->prev;
	else
		q->tail = x->prev;
	x->prev = x->next = NULL;
	x->q = NULL;
	x->st = CMD_IDLE;
}

/* --- small helpers ------------------------------------------------------- */

int
redis_script_init(struct lua_script *s)
{
	return digest_sha1_hex(s->src, s->len, s->sha);
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
	    reply_is(r, "LOADING") || reply_is(r, "NOREPLICAS");
}

/* In a cluster: the command did not run; it may a moment later. */
static int
reply_is_cluster_busy(const redisReply *r)
{
	return reply_is(r, "TRYAGAIN") || reply_is(r, "CLUSTERDOWN") ||
	    reply_is(r, "LOADING");
}

/*
 * A deep copy that freeReplyObject() frees (hiredis 0.14 frees each reply
 * after its callback; a script's reply must outlive WAIT's). NULL on
 * ENOMEM.
 */
static redisReply *
reply_dup(const redisReply *r)
{
	redisReply *d = calloc(1, sizeof(*d));
	size_t i;

	if (d == NULL)
		return NULL;
	d->type = r->type;
	d->integer = r->integer;
	if (r->str != NULL) {
		if ((d->str = malloc(r->len + 1)) == NULL)
			goto fail;
		memcpy(d->str, r->str, r->len);
		d->str[r->len] = '\0';
		d->len = r->len;
	}
	if (r->element != NULL && r->elements > 0) {
		if ((d->element = calloc(r->elements, sizeof(*d->element))) ==
		    NULL)
			goto fail;
		d->elements = r->elements;
		for (i = 0; i < r->elements; i++)
			if ((d->element[i] = reply_dup(r->element[i])) == NULL)
				goto fail;
	}
	return d;
fail:
	freeReplyObject(d);
	return NULL;
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

/* --- the client's timer-driven life of a command --------------------------- */

static void dispatch(struct cmd *x);
static void finish(struct cmd *x);
static void node_submit(struct redis_node *n, struct cmd *x);
static void node_fail(struct redis_node *n, const char *err);
static void sentinel_answer(struct cmd *x);
static void map_answer(struct cmd *x);
static void disc_start(struct redis_client *c);
static void map_refresh_start(struct redis_client *c);

static void
on_cmd_closed(uv_handle_t *h)
{
	struct cmd *x = h->data;

	free(x->frame);
	free(x);
}

static void on_cmd_timer(uv_timer_t *t);

static void
cmd_timer_at(struct cmd *x, uint64_t when)
{
	uint64_t now = uv_now(x->c->loop);

	(void)uv_timer_start(&x->timer, on_cmd_timer,
	    when > now ? when - now : 0, 0);
}

/* Again through dispatch() after delay_ms, if the deadline allows. */
static void
cmd_pause(struct cmd *x, int delay_ms)
{
	uint64_t wake = uv_now(x->c->loop) + (uint64_t)delay_ms;

	q_remove(x);
	if (wake >= x->deadline) {
		/* no time for another attempt: end with the last error */
		x->st = CMD_FAILING;
		cmd_timer_at(x, 0);
		return;
	}
	x->st = CMD_PAUSED;
	cmd_timer_at(x, wake);
}

/* Ends on the next loop turn, with its reply or errstr (never inside a call). */
static void
cmd_end_soon(struct cmd *x, const char *err)
{
	q_remove(x);
	if (err != NULL)
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s", err);
	x->st = CMD_FAILING;
	cmd_timer_at(x, 0);
}

static const char *
cmd_what(const struct cmd *x)
{
	switch (x->kind) {
	case CMD_EVAL: return x->s->name;
	case CMD_PING: return "PING";
	case CMD_SENTINEL: return "SENTINEL";
	case CMD_SLOTS: return "CLUSTER SLOTS";
	}
	return "?";
}

/* A connection is dropped: hiredis calls its pending callbacks (NULL). */
static void
ac_drop(struct redis_client *c, redisAsyncContext *ac, const char *why)
{
	const char *saved = c->drop_reason;

	c->drop_reason = why;
	redisAsyncFree(ac);
	c->drop_reason = saved;
}

static void
node_detach(struct redis_node *n)
{
	n->ac = NULL;
	n->st = NODE_IDLE;
	n->setup_left = 0;
	n->setup_failed = 0;
}

static void ac_lost(struct redis_client *c, redisAsyncContext *ac);

static void
cmd_expire(struct cmd *x)
{
	struct redis_node *n = x->node;
	char err[ERRSTR_MAX];

	x->timed_out = 1;
	switch (x->st) {
	case CMD_SENT:
		/* the reply is lost: drop the connection; on_reply ends it */
		ac_lost(x->c, x->ac);
		ac_drop(x->c, x->ac, "connection dropped after a timeout");
		return;
	case CMD_QUEUED:
		if (n != NULL && x->q == &n->wq) {
			/* the connection did not get ready in time */
			q_remove(x);
			(void)snprintf(err, sizeof(err),
			    "connect %s:%d: timeout",
			    n->is_unix ? "unix" : n->host, n->port);
			if (x->errstr[0] == '\0')
				(void)snprintf(x->errstr, sizeof(x->errstr),
				    "%s", err);
			finish(x);
			node_fail(n, err);
			return;
		}
		q_remove(x);
		break;
	default: break;
	}
	finish(x);
}

static void
on_cmd_timer(uv_timer_t *t)
{
	struct cmd *x = t->data;

	if (x->st == CMD_FAILING) {
		finish(x);
		return;
	}
	if (x->st == CMD_PAUSED && uv_now(x->c->loop) < x->deadline) {
		x->st = CMD_IDLE;
		cmd_timer_at(x, x->deadline);
		dispatch(x);
		return;
	}
	cmd_expire(x);
}

/*
 * The end of a command: its callback once, then its memory (after the
 * timer's close).
 */
static void
finish(struct cmd *x)
{
	struct redis_client *c = x->c;
	struct redis_result res;
	char what[64];

	q_remove(x);
	x->st = CMD_DONE;
	(void)uv_timer_stop(&x->timer);
	if (x->all_prev != NULL)
		x->all_prev->all_next = x->all_next;
	else
		c->all = x->all_next;
	if (x->all_next != NULL)
		x->all_next->all_prev = x->all_prev;
	x->all_prev = x->all_next = NULL;

	if (x->reply == NULL && x->timed_out && !c->closing) {
		char last[ERRSTR_MAX];

		(void)snprintf(what, sizeof(what), "%s", cmd_what(x));
		(void)snprintf(last, sizeof(last), "%s", x->errstr);
		if (x->outcome_unknown || last[0] == '\0')
			(void)snprintf(x->errstr, sizeof(x->errstr),
			    "%s: timeout", what);
		else
			(void)snprintf(x->errstr, sizeof(x->errstr),
			    "%s: timeout (%s)", what, last);
	}
	if (x->reply == NULL && x->errstr[0] == '\0')
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s",
		    c->closing ? "shutting down" : "unknown error");
	memset(&res, 0, sizeof(res));
	res.reply = x->reply;
	res.outcome_unknown = x->reply == NULL && x->outcome_unknown;
	res.durable = x->reply != NULL && x->durable;
	memcpy(res.errstr, x->errstr, sizeof(res.errstr));
	switch (x->kind) {
	case CMD_EVAL:
	case CMD_PING: x->cb(&res, x->arg); break;
	case CMD_SENTINEL: sentinel_answer(x); break;
	case CMD_SLOTS: map_answer(x); break;
	}
	if (x->reply != NULL)
		freeReplyObject(x->reply);
	x->reply = NULL;
	uv_close((uv_handle_t *)&x->timer, on_cmd_closed);
}

static struct cmd *
cmd_new(struct redis_client *c, enum cmd_kind kind, int timeout_ms)
{
	struct cmd *x = calloc(1, sizeof(*x));

	if (x == NULL)
		return NULL;
	if (uv_timer_init(c->loop, &x->timer) != 0) {
		free(x);
		return NULL;
	}
	x->timer.data = x;
	x->c = c;
	x->kind = kind;
	x->ask = x->moved = -1;
	x->durable = 1;
	x->acked = -1;
	x->deadline = uv_now(c->loop) + (uint64_t)timeout_ms;
	x->all_next = c->all;
	if (c->all != NULL)
		c->all->all_prev = x;
	c->all = x;
	cmd_timer_at(x, x->deadline);
	return x;
}

/* --- the libuv adapter --------------------------------------------------------- */

/*
 * hiredis 0.14's adapters/libuv.h, with two fixes: its poll callback
 * ignores an error status (libuv reports POLLERR, e.g. a refused connect,
 * as UV_EBADF and stops the poll), so a refused connection would hang
 * until the command's timeout; and it leaks its struct when uv_poll_init
 * fails. Here an error status lets hiredis look at the socket (the
 * connect check or a read), which reports the real error.
 */
struct uv_events {
	redisAsyncContext *ac;
	uv_poll_t handle;
	int events;
};

static void
uv_events_poll(uv_poll_t *h, int status, int events)
{
	struct uv_events *p = h->data;

	if (p->ac == NULL)
		return;
	if (status != 0) {
		if (!(p->ac->c.flags & REDIS_CONNECTED))
			redisAsyncHandleWrite(p->ac); /* the connect's error */
		else
			redisAsyncHandleRead(p->ac); /* EOF or the error */
		return;
	}
	if (events & UV_READABLE)
		redisAsyncHandleRead(p->ac);
	if (p->ac != NULL && (events & UV_WRITABLE))
		redisAsyncHandleWrite(p->ac);
}

static void
uv_events_set(struct uv_events *p, int events)
{
	p->events = events;
	if (events != 0)
		(void)uv_poll_start(&p->handle, events, uv_events_poll);
	else
		(void)uv_poll_stop(&p->handle);
}

static void
uv_events_add_read(void *d)
{
	struct uv_events *p = d;

	uv_events_set(p, p->events | UV_READABLE);
}

static void
uv_events_del_read(void *d)
{
	struct uv_events *p = d;

	uv_events_set(p, p->events & ~UV_READABLE);
}

static void
uv_events_add_write(void *d)
{
	struct uv_events *p = d;

	uv_events_set(p, p->events | UV_WRITABLE);
}

static void
uv_events_del_write(void *d)
{
	struct uv_events *p = d;

	uv_events_set(p, p->events & ~UV_WRITABLE);
}

static void
uv_events_closed(uv_handle_t *h)
{
	free(h->data);
}

static void
uv_events_cleanup(void *d)
{
	struct uv_events *p = d;

	p->ac = NULL; /* the context is going away */
	uv_close((uv_handle_t *)&p->handle, uv_events_closed);
}

static int
uv_events_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
	struct uv_events *p;

	if (ac->ev.data != NULL || (p = calloc(1, sizeof(*p))) == NULL)
		return REDIS_ERR;
	if (uv_poll_init(loop, &p->handle, ac->c.fd) != 0) {
		free(p);
		return REDIS_ERR;
	}
	p->handle.data = p;
	p->ac = ac;
	ac->ev.addRead = uv_events_add_read;
	ac->ev.delRead = uv_events_del_read;
	ac->ev.addWrite = uv_events_add_write;
	ac->ev.delWrite = uv_events_del_write;
	ac->ev.cleanup = uv_events_cleanup;
	ac->ev.data = p;
	return REDIS_OK;
}

/* --- connections ----------------------------------------------------------- */

static struct redis_node *
node_new(struct redis_client *c, const char *host, int port, int is_unix)
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

static void
node_set_addr(struct redis_node *n, const char *host, int port)
{
	(void)snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
}

/*
 * Stops sending on n's connection; the replies of commands already sent
 * still come (hiredis disconnects after the last one).
 */
static void
node_retire(struct redis_node *n)
{
	redisAsyncContext *ac = n->ac;

	if (ac == NULL)
		return;
	node_detach(n);
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
		q_remove(x);
		if (err != NULL)
			(void)snprintf(x->errstr, sizeof(x->errstr), "%s", err);
		if (c->closing || n->evicting)
			cmd_end_soon(x, NULL);
		else if (x->kind == CMD_SENTINEL || x->kind == CMD_SLOTS)
			cmd_end_soon(x, NULL);
		else if (c->t.mode == REDIS_MODE_SENTINEL)
			/* during discovery the next sentinel is asked at once */
			cmd_pause(x, c->disc_verifying ? 0 : FAILOVER_PAUSE_MS);
		else if (c->t.mode == REDIS_MODE_CLUSTER) {
			x->ask = x->moved = -1;
			cmd_pause(x, FAILOVER_PAUSE_MS);
		} else
			cmd_end_soon(x, NULL);
	}
}

static void primary_failed(struct redis_client *c, const char *err);

/*
 * n's connection failed (or is dropped on purpose): the commands sent on it
 * end with outcome_unknown, the queued ones go on (node_requeue).
 */
static void
node_fail(struct redis_node *n, const char *err)
{
	struct redis_client *c = n->c;
	redisAsyncContext *ac = n->ac;
	int was_verifying = c->disc_verifying && n == c->main;

	(void)snprintf(n->errstr, sizeof(n->errstr), "%s",
	    err != NULL ? err : "connection failed");
	node_detach(n);
	if (ac != NULL)
		ac_drop(c, ac, n->errstr);
	if (n == c->main && c->t.mode == REDIS_MODE_SENTINEL && !c->closing) {
		if (n->evicting) {
			/* not a stale answer: the commands fail */
			c->primary_ok = 0;
			c->disc_verifying = 0;
			c->disc_active = 0;
			was_verifying = 0;
		} else
			primary_failed(c, n->errstr);
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
		q_remove(x);
		node_submit(n, x);
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
		node_detach(n);
		node_fail(n, err);
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
	node_detach(n);
	node_fail(n, err);
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
		node_fail(n, err);
		return;
	}
	if (ac->c.flags & REDIS_CONNECTED)
		node_ready(n);
}

/* Opens n's connection and queues its set-up. 0, or -1 with n->errstr. */
static int
node_connect(struct redis_node *n)
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
	if (uv_events_attach(ac, c->loop) != REDIS_OK) {
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
	node_detach(n);
	redisAsyncFree(ac);
	return -1;
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);
static void on_wait_reply(redisAsyncContext *ac, void *reply, void *privdata);
static void attempt_done(struct cmd *x);

/* WAIT's answer (r), or its loss (NULL), to every member. Frees wg. */
static void
wait_resolve(struct wait_group *wg, const redisReply *r)
{
	struct cmd *x, *next;

	for (x = wg->members; x != NULL; x = next) {
		next = x->wg_next;
		x->wg_next = NULL;
		x->pending--;
		if (r == NULL)
			x->wait_sent = -1;
		else if (r->type == REDIS_REPLY_INTEGER)
			x->acked = r->integer;
		if (x->pending == 0)
			attempt_done(x);
	}
	free(wg);
}

/* Before the loop polls: one WAIT after each connection's group. */
static void
on_prepare(uv_prepare_t *h)
{
	struct redis_client *c = h->data;
	struct wait_group *wg, *next;
	const char *wait[] = { "WAIT", c->wait_n, c->wait_ms };

	wg = c->wgs;
	c->wgs = NULL;
	(void)uv_prepare_stop(h);
	for (; wg != NULL; wg = next) {
		struct redis_node *n = wg->n;

		next = wg->next;
		if (n->wg == wg)
			n->wg = NULL;
		/* the connection of the group, still there and sending */
		if (n->gen == wg->gen && n->ac != NULL &&
		    redisAsyncCommandArgv(n->ac, on_wait_reply, wg, 3, wait,
		        NULL) == REDIS_OK)
			continue;
		wait_resolve(wg, NULL);
	}
}

/* x (just sent on n) joins n's group of this turn. 0, or -1 on ENOMEM. */
static int
wait_join(struct redis_node *n, struct cmd *x)
{
	struct redis_client *c = n->c;
	struct wait_group *wg = n->wg;

	if (wg == NULL) {
		if ((wg = calloc(1, sizeof(*wg))) == NULL)
			return -1;
		wg->n = n;
		wg->gen = n->gen;
		wg->next = c->wgs;
		c->wgs = wg;
		n->wg = wg;
		(void)uv_prepare_start(c->prep, on_prepare);
	}
	x->wg_next = wg->members;
	wg->members = x;
	return 0;
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
	x->wait_sent = 0;
	x->acked = -1;
	if (x->ask >= 0 &&
	    redisAsyncCommandArgv(ac, NULL, NULL, 1, asking, NULL) != REDIS_OK)
		goto fail;
	x->ask = -1;
	switch (x->kind) {
	case CMD_EVAL:
		if (x->is_eval) {
			/* "*N" "$4 EVAL" "$len src" then the EVALSHA's rest */
			size_t argc = 0, len;
			const char *p = x->frame + 1;
			char *f, *q;

			while (*p != '\r')
				argc = argc * 10 + (size_t)(*p++ - '0');
			len =
			    32 + 10 + 32 + x->s->len + (x->framelen - x->rest);
			if ((f = malloc(len)) == NULL)
				goto fail;
			q = f;
			*q++ = '*';
			q += put_uint(q, argc);
			*q++ = '\r';
			*q++ = '\n';
			q = put_bulk(q, "EVAL", 4);
			q = put_bulk(q, x->s->src, x->s->len);
			memcpy(q, x->frame + x->rest, x->framelen - x->rest);
			q += x->framelen - x->rest;
			rc = redisAsyncFormattedCommand(ac, on_reply, x, f,
			    (size_t)(q - f));
			free(f);
		} else
			rc = redisAsyncFormattedCommand(ac, on_reply, x,
			    x->frame, x->framelen);
		break;
	case CMD_PING: {
		const char *a[] = { "PING" };

		rc = redisAsyncCommandArgv(ac, on_reply, x, 1, a, NULL);
		break;
	}
	case CMD_SENTINEL: {
		const char *a[] = { "SENTINEL", "get-master-addr-by-name",
			c->t.master_name };

		rc = redisAsyncCommandArgv(ac, on_reply, x, 3, a, NULL);
		break;
	}
	case CMD_SLOTS: {
		const char *a[] = { "CLUSTER", "SLOTS" };

		rc = redisAsyncCommandArgv(ac, on_reply, x, 2, a, NULL);
		break;
	}
	default: rc = REDIS_ERR;
	}
	if (rc != REDIS_OK)
		goto fail;
	x->st = CMD_SENT;
	x->pending = 1;
	if (x->wait && c->min_replicas > 0 && wait_join(n, x) == 0) {
		x->wait_sent = 1;
		x->pending = 2;
	}
	return;
fail:
	/* nothing of x was queued (an ASKING alone is harmless) */
	cmd_end_soon(x, "out of memory");
}

static void
node_submit(struct redis_node *n, struct cmd *x)
{
	x->node = n;
	if (n->st == NODE_READY && n->ac != NULL) {
		node_send(n, x);
		return;
	}
	q_push(&n->wq, x);
	if (n->st == NODE_IDLE && node_connect(n) != 0) {
		char err[ERRSTR_MAX];

		(void)snprintf(err, sizeof(err), "%s", n->errstr);
		node_fail(n, err);
	}
}

/* --- replies --------------------------------------------------------------- */

/* A NULL reply: hiredis is freeing ac; its node must not use it. */
static void
ac_lost(struct redis_client *c, redisAsyncContext *ac)
{
	struct redis_node *n = ac->data;

	if (n != NULL && n->ac == ac) {
		/* hiredis is freeing it after an error */
		node_detach(n);
		if (n == c->main && c->t.mode == REDIS_MODE_SENTINEL)
			c->primary_ok = 0;
		if (c->t.mode == REDIS_MODE_CLUSTER && c->cl != NULL)
			c->cl->stale = 1;
	}
}

static void
reply_lost(struct cmd *x, redisAsyncContext *ac)
{
	struct redis_client *c = x->c;

	ac_lost(c, ac);
	if (!x->lost)
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s: %s",
		    cmd_what(x),
		    c->closing                   ? "shutting down"
		        : ac->errstr[0] != '\0'  ? ac->errstr
		        : c->drop_reason != NULL ? c->drop_reason
		                                 : "connection lost");
	x->lost = 1;
}

static void
on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct cmd *x = privdata;

	x->pending--;
	if (reply == NULL)
		reply_lost(x, ac);
	else if ((x->reply = reply_dup(reply)) == NULL) {
		(void)snprintf(x->errstr, sizeof(x->errstr),
		    "%s: out of memory", cmd_what(x));
		x->lost = 1;
	}
	if (x->pending == 0)
		attempt_done(x);
}

static void
on_wait_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct wait_group *wg = privdata;

	if (reply == NULL)
		ac_lost(wg->n->c, ac); /* the members' own replies said why */
	wait_resolve(wg, reply);
}

static void primary_suspect(struct redis_client *c);

/* Sentinel mode, an error that means nothing ran: ask again, resend. */
static void
eval_failover(struct cmd *x)
{
	struct redis_client *c = x->c;
	struct redis_node *n = x->node;

	log_info(NULL, "Redis %s:%d: %s", n->host, n->port, x->errstr);
	if (n == c->main && c->primary_ok && x->ac == n->ac) {
		if (reply_is(x->reply, "NOREPLICAS"))
			primary_suspect(c);
		else {
			c->primary_ok = 0;
			node_retire(n);
			/* its answer proved stale: not asked first again */
			if (c->sentinel_first == c->primary_from &&
			    c->t.nhosts > 0)
				c->sentinel_first =
				    (c->primary_from + 1) % c->t.nhosts;
		}
	}
	freeReplyObject(x->reply);
	x->reply = NULL;
	cmd_pause(x, FAILOVER_PAUSE_MS);
}

/* Cluster: MOVED, ASK, TRYAGAIN... 1 when x goes on, 0 to end with it. */
static int
eval_cluster_error(struct cmd *x)
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
		dispatch(x);
		return 1;
	}
	if (!reply_is_cluster_busy(x->reply))
		return 0;
	freeReplyObject(x->reply);
	x->reply = NULL;
	cmd_pause(x, FAILOVER_PAUSE_MS);
	return 1;
}

/* Every reply of one attempt is in (or lost): what next. */
static void
attempt_done(struct cmd *x)
{
	struct redis_client *c = x->c;
	redisReply *r = x->reply;

	x->st = CMD_IDLE;
	if (r == NULL || (x->lost && x->wait_sent != -1)) {
		/* the command's own reply is lost: never sent again */
		if (r != NULL) {
			freeReplyObject(r);
			x->reply = NULL;
		}
		x->outcome_unknown = 1;
		finish(x);
		return;
	}
	if (x->wait_sent == -1) {
		/* WAIT's reply lost: the script's reply, not durable */
		x->durable = 0;
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s",
		    x->timed_out ? "WAIT: timeout" : "WAIT: reply lost");
		finish(x);
		return;
	}
	if (x->kind == CMD_SENTINEL || x->kind == CMD_SLOTS) {
		finish(x);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s: %.*s",
		    cmd_what(x), (int)r->len, r->str != NULL ? r->str : "");
		if (x->kind == CMD_EVAL && !x->is_eval &&
		    reply_is(r, "NOSCRIPT")) {
			/* script cache lost (restart, SCRIPT FLUSH): EVAL */
			if (uv_now(c->loop) >= c->noscript_log_at) {
				/* once a second: a whole turn's commands see it */
				log_info(NULL,
				    "NOSCRIPT for %s: loading it again",
				    x->s->name);
				c->noscript_log_at =
				    uv_now(c->loop) + NOSCRIPT_LOG_EVERY_MS;
			}
			x->is_eval = 1;
			freeReplyObject(r);
			x->reply = NULL;
			dispatch(x);
			return;
		}
		if (c->t.mode == REDIS_MODE_SENTINEL && reply_is_failover(r)) {
			eval_failover(x);
			return;
		}
		if (c->t.mode == REDIS_MODE_CLUSTER && eval_cluster_error(x))
			return;
		freeReplyObject(r);
		x->reply = NULL;
		finish(x);
		return;
	}
	x->errstr[0] = '\0';
	if (x->kind == CMD_PING && c->t.mode == REDIS_MODE_CLUSTER) {
		/* the next primary */
		x->ping_idx++;
		dispatch(x);
		return;
	}
	if (x->wait_sent) {
		x->durable = x->acked >= c->min_replicas;
		if (!x->durable) {
			(void)snprintf(x->errstr, sizeof(x->errstr),
			    "WAIT: %lld of %d replica(s) acknowledged in time",
			    x->acked < 0 ? 0 : x->acked, c->min_replicas);
			if (c->t.mode == REDIS_MODE_SENTINEL &&
			    x->node == c->main && x->ac == c->main->ac)
				primary_suspect(c);
		}
	} else if (x->wait && c->min_replicas > 0) {
		x->durable = 0;
		(void)snprintf(x->errstr, sizeof(x->errstr),
		    "WAIT: could not be sent");
	}
	finish(x);
}

/* --- sentinels --------------------------------------------------------------- */

static void disc_ask(struct redis_client *c);

/* Discovery ended without a primary: the waiting commands pause. */
static void
disc_fail(struct redis_client *c)
{
	struct cmd *x;

	c->disc_active = 0;
	c->disc_verifying = 0;
	c->suspect[0] = '\0';
	while ((x = c->disc_q.head) != NULL) {
		q_remove(x);
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s", c->disc_err);
		cmd_pause(x, FAILOVER_PAUSE_MS);
	}
}

/* Connects main to host:port and moves the waiting commands there. */
static void
disc_try(struct redis_client *c, const char *host, int port)
{
	struct redis_node *n = c->main;
	struct cmd *x;

	if (c->primary_ok && n->st == NODE_READY && n->port == port &&
	    strcmp(n->host, host) == 0) {
		/* a refresh that names the same primary: keep it */
		c->sentinel_first = c->disc_k;
		c->primary_from = c->disc_k;
		disc_fail(c); /* nothing waits (primary_ok): ends the round */
		return;
	}
	c->primary_ok = 0;
	node_retire(n);
	node_set_addr(n, host, port);
	c->disc_verifying = 1;
	while ((x = c->disc_q.head) != NULL) {
		q_remove(x);
		node_submit(n, x);
		if (!c->disc_verifying)
			break; /* failed at once: handled already */
	}
	if (c->disc_verifying && n->st == NODE_IDLE && node_connect(n) != 0) {
		char err[ERRSTR_MAX];

		(void)snprintf(err, sizeof(err), "%s", n->errstr);
		node_fail(n, err);
	}
}

/* SENTINEL get-master-addr-by-name came back (or not). */
static void
sentinel_answer(struct cmd *x)
{
	struct redis_client *c = x->c;
	const struct redis_addr *s = &c->t.hosts[x->sentinel_idx];
	const redisReply *r = x->reply;
	unsigned long long v;
	char host[REDIS_HOST_MAX + 1];
	int ok;

	if (c->closing || !c->disc_active)
		return;
	ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[1]->type == REDIS_REPLY_STRING &&
	    r->element[0]->len > 0 && r->element[0]->len <= REDIS_HOST_MAX &&
	    util_decimal(r->element[1]->str, r->element[1]->len, PORT_MAX,
	        &v) == UTIL_DEC_OK &&
	    v > 0;
	if (!ok) {
		(void)snprintf(c->disc_err, sizeof(c->disc_err),
		    "sentinel %s:%d: %s", s->host, s->port,
		    r == NULL                          ? x->errstr
		        : r->type == REDIS_REPLY_NIL   ? "unknown master name"
		        : r->type == REDIS_REPLY_ERROR ? r->str
		                                       : "unexpected reply");
		c->disc_k = (c->disc_k + 1) % c->t.nhosts;
		disc_ask(c);
		return;
	}
	memcpy(host, r->element[0]->str, r->element[0]->len + 1);
	if (c->suspect[0] != '\0' && (int)v == c->suspect_port &&
	    strcmp(host, c->suspect) == 0 && c->disc_asked < c->t.nhosts) {
		/* names the primary in doubt: another sentinel may know better */
		c->suspect_seen = 1;
		c->disc_k = (c->disc_k + 1) % c->t.nhosts;
		disc_ask(c);
		return;
	}
	disc_try(c, host, (int)v);
}

/* Asks the next sentinel, with its share of the time left. */
static void
disc_ask(struct redis_client *c)
{
	uint64_t now = uv_now(c->loop);
	struct redis_node *n;
	struct cmd *x;
	uint64_t slice;
	int k = c->disc_k;

	if (c->disc_asked >= c->t.nhosts || now >= c->disc_deadline) {
		if (c->suspect_seen && c->primary_ok) {
			/* nobody names another: keep the primary in doubt */
			disc_try(c, c->suspect, c->suspect_port);
			return;
		}
		disc_fail(c);
		return;
	}
	slice =
	    (c->disc_deadline - now) / (uint64_t)(c->t.nhosts - c->disc_asked);
	if (slice == 0)
		slice = 1;
	c->disc_asked++;
	n = c->sentinels[k];
	if (n == NULL) {
		n = c->sentinels[k] =
		    node_new(c, c->t.hosts[k].host, c->t.hosts[k].port, 0);
		if (n != NULL)
			n->sentinel = 1;
	}
	if (n == NULL || (x = cmd_new(c, CMD_SENTINEL, (int)slice)) == NULL) {
		(void)snprintf(c->disc_err, sizeof(c->disc_err),
		    "out of memory");
		disc_fail(c);
		return;
	}
	x->sentinel_idx = k;
	node_submit(n, x);
}

static void
disc_start(struct redis_client *c)
{
	if (c->disc_active || c->t.nhosts == 0)
		return;
	c->disc_active = 1;
	c->disc_verifying = 0;
	c->disc_asked = 0;
	c->suspect_seen = 0;
	c->disc_k = c->sentinel_first % c->t.nhosts;
	c->disc_deadline = uv_now(c->loop) + (uint64_t)c->timeout_ms;
	(void)snprintf(c->disc_err, sizeof(c->disc_err),
	    "no sentinel answered");
	disc_ask(c);
}

/*
 * The primary did not ROLE master, refused, or its connection died: the
 * sentinels are asked again (for the next commands).
 */
static void
primary_failed(struct redis_client *c, const char *err)
{
	c->primary_ok = 0;
	if (!c->disc_verifying)
		return;
	/* the answer just tried proved stale (debug: a failover repeats it) */
	log_debug(NULL, "Redis primary of '%s' named by sentinel %s:%d: %s",
	    c->t.master_name, c->t.hosts[c->disc_k].host,
	    c->t.hosts[c->disc_k].port, err);
	c->disc_verifying = 0;
	if (c->sentinel_first == c->disc_k)
		c->sentinel_first = (c->disc_k + 1) % c->t.nhosts;
	/* the commands queued on main go back to wait for a primary */
	{
		struct cmd *x;

		while ((x = c->main->wq.head) != NULL) {
			q_remove(x);
			q_push(&c->disc_q, x);
		}
	}
	(void)snprintf(c->disc_err, sizeof(c->disc_err), "%s", err);
	c->disc_k = (c->disc_k + 1) % c->t.nhosts;
	disc_ask(c);
}

/*
 * A WAIT shortfall or NOREPLICAS on the primary: under a split brain the
 * majority may have a new one. Ask the sentinels again, starting after the
 * one that named this primary and passing over answers that name it;
 * commands keep going to it meanwhile.
 */
static void
primary_suspect(struct redis_client *c)
{
	uint64_t now = uv_now(c->loop);

	/* at most one refresh per pause, however many replies fall short */
	if (c->disc_active || c->t.nhosts == 0 ||
	    (c->suspect_at != 0 && now - c->suspect_at < FAILOVER_PAUSE_MS))
		return;
	c->suspect_at = now;
	(void)snprintf(c->suspect, sizeof(c->suspect), "%s", c->main->host);
	c->suspect_port = c->main->port;
	c->sentinel_first = (c->primary_from + 1) % c->t.nhosts;
	disc_start(c);
}

/* --- cluster ----------------------------------------------------------------- */

static void
cluster_conn_drop(struct redis_node *n, void *arg)
{
	struct redis_client *c = arg;

	if (n == NULL)
		return;
	node_fail(n, "cluster node given up");
	n->next_dead = c->dead;
	c->dead = n;
}

static struct redis_node *
cluster_conn(struct redis_client *c, int idx)
{
	struct cluster_node *nd = &c->cl->nodes[idx];

	if (nd->conn == NULL)
		nd->conn = node_new(c, nd->host, nd->port, 0);
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
				q_remove(w);
				(void)snprintf(w->errstr, sizeof(w->errstr),
				    "%s", c->map_err);
				w->ask = w->moved = -1;
				cmd_pause(w, FAILOVER_PAUSE_MS);
			}
			return;
		}
		c->map_tried[idx] = 1;
		if ((n = cluster_conn(c, idx)) != NULL &&
		    (x = cmd_new(c, CMD_SLOTS, c->timeout_ms)) != NULL)
			break;
		(void)snprintf(c->map_err, sizeof(c->map_err), "out of memory");
	}
	x->slots_idx = idx;
	node_submit(n, x);
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

static void
map_answer(struct cmd *x)
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
		q_remove(w);
		dispatch(w);
	}
}

static void
dispatch_cluster(struct cmd *x)
{
	struct redis_client *c = x->c;
	struct cluster *cl = c->cl;
	struct redis_node *n;
	int idx = -1;
	unsigned s;

	if (x->kind == CMD_SLOTS) {
		/* not routed: back to map_ask() */
		cmd_end_soon(x, NULL);
		return;
	}
	if (x->kind == CMD_PING) {
		if (cl->stale) {
			q_push(&c->map_q, x);
			map_refresh_start(c);
			return;
		}
		for (s = 0; s < CLUSTER_SLOTS; s++)
			if (cluster_slot_node(cl, s) < 0) {
				(void)snprintf(x->errstr, sizeof(x->errstr),
				    "no cluster node serves slot %u", s);
				cl->stale = 1;
				cmd_end_soon(x, NULL);
				return;
			}
		for (; x->ping_idx < cl->nnodes; x->ping_idx++)
			if (cl->nodes[x->ping_idx].in_map)
				break;
		if (x->ping_idx >= cl->nnodes) {
			/* every primary answered: the last PONG (never inside the call) */
			cmd_end_soon(x, NULL);
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
			q_push(&c->map_q, x);
			map_refresh_start(c);
			return;
		}
		if (cl->stale)
			map_refresh_start(c); /* for the next commands */
	}
	if ((n = cluster_conn(c, idx)) == NULL) {
		cmd_end_soon(x, "out of memory");
		return;
	}
	node_submit(n, x);
}

/* Routes x: to its node, or to wait for a primary or a map. */
static void
dispatch(struct cmd *x)
{
	struct redis_client *c = x->c;

	x->st = CMD_IDLE;
	if (c->closing) {
		cmd_end_soon(x, "shutting down");
		return;
	}
	if (uv_now(c->loop) >= x->deadline) {
		x->timed_out = 1;
		if (x->reply != NULL) {
			freeReplyObject(x->reply);
			x->reply = NULL;
		}
		cmd_end_soon(x, NULL);
		return;
	}
	switch (c->t.mode) {
	case REDIS_MODE_SINGLE: node_submit(c->main, x); return;
	case REDIS_MODE_SENTINEL:
		if (c->primary_ok && c->main->ac != NULL) {
			node_submit(c->main, x);
			return;
		}
		if (c->disc_verifying) {
			node_submit(c->main, x);
			return;
		}
		q_push(&c->disc_q, x);
		disc_start(c);
		return;
	case REDIS_MODE_CLUSTER: dispatch_cluster(x); return;
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
		c->cl->node_drop = cluster_conn_drop;
		c->cl->node_drop_arg = c;
	} else {
		c->main = t->mode == REDIS_MODE_SINGLE && t->is_unix
		    ? node_new(c, t->path, 0, 1)
		    : node_new(c, t->host, t->port, 0);
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

static void
node_close(struct redis_node *n)
{
	if (n == NULL)
		return;
	if (n->ac != NULL) {
		redisAsyncContext *ac = n->ac;

		node_detach(n);
		ac_drop(n->c, ac, "shutting down");
	}
	node_requeue(n, "shutting down");
}

static void
cluster_node_free(struct redis_node *n, void *arg)
{
	(void)arg;
	node_close(n);
	free(n);
}

void
redis_client_free(struct redis_client *c)
{
	struct wait_group *wg;
	struct redis_node *n;
	struct cmd *x;
	int i;

	if (c == NULL)
		return;
	c->closing = 1;
	/* groups whose WAIT is not sent yet: lost */
	while ((wg = c->wgs) != NULL) {
		c->wgs = wg->next;
		if (wg->n->wg == wg)
			wg->n->wg = NULL;
		wait_resolve(wg, NULL);
	}
	/* commands sent: drop their connections (retired ones too) */
	for (;;) {
		for (x = c->all; x != NULL && x->st != CMD_SENT;
		     x = x->all_next)
			;
		if (x == NULL)
			break;
		if (x->node != NULL && x->node->ac == x->ac)
			node_detach(x->node);
		ac_drop(c, x->ac, "shutting down");
	}
	while ((x = c->all) != NULL) {
		q_remove(x);
		if (x->errstr[0] == '\0' || x->st != CMD_FAILING)
			(void)snprintf(x->errstr, sizeof(x->errstr),
			    "shutting down");
		finish(x);
	}
	node_close(c->main);
	free(c->main);
	for (i = 0; i < REDIS_URL_HOSTS_MAX; i++) {
		node_close(c->sentinels[i]);
		free(c->sentinels[i]);
	}
	if (c->cl != NULL) {
		c->cl->node_drop = cluster_node_free;
		cluster_free(c->cl);
	}
	while ((n = c->dead) != NULL) {
		c->dead = n->next_dead;
		node_close(n);
		free(n);
	}
	uv_close((uv_handle_t *)c->prep, on_handle_free);
	free(c);
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
	if ((x = cmd_new(c, CMD_EVAL, timeout)) == NULL) {
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
	x->slot = cluster_keyslot(key, keylen);
	x->cb = cb;
	x->arg = arg;
	dispatch(x);
	return 0;
}

int
redis_ping(struct redis_client *c, redis_cb *cb, void *arg)
{
	struct cmd *x;

	if (c == NULL || c->closing ||
	    (x = cmd_new(c, CMD_PING, c->timeout_ms)) == NULL)
		return -1;
	x->cb = cb;
	x->arg = arg;
	dispatch(x);
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
