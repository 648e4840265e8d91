/*
 * redis_cmd.c - a command of the Redis client from the call to its
 * callback: its queue, its timer (the deadline, pauses, the end on the
 * next turn), the WAIT it shares, its replies and what comes next (the
 * one re-send after a peer closed a used connection, NOSCRIPT, failover
 * and cluster errors, the callback).
 *
 * WAIT. The commands sent with wait on one connection in one loop turn
 * share one WAIT, queued before the loop polls (uv_prepare), so it leaves
 * in the same write as they do in the common case.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <async.h>
#include <uv.h>

#include "log.h"
#include "redis.h"
#include "redis_int.h"

#define NOSCRIPT_LOG_EVERY_MS 1000

static void attempt_done(struct cmd *x);
static void on_cmd_timer(uv_timer_t *t);

/* --- queues ------------------------------------------------------------------ */

void
redis_cmdq_push(struct cmdq *q, struct cmd *x)
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

void
redis_cmdq_remove(struct cmd *x)
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

/* --- replies, as hiredis gives them ------------------------------------------- */

/* 1 when the error reply r starts with the word w. */
int
redis_reply_is(const redisReply *r, const char *w)
{
	size_t n = strlen(w);

	return r->type == REDIS_REPLY_ERROR && r->len >= n &&
	    strncmp(r->str, w, n) == 0 && (r->len == n || r->str[n] == ' ');
}

/* Behind sentinels: the command did not run; the primary may have moved. */
static int
reply_is_failover(const redisReply *r)
{
	return redis_reply_is(r, "READONLY") ||
	    redis_reply_is(r, "MASTERDOWN") || redis_reply_is(r, "LOADING") ||
	    redis_reply_is(r, "NOREPLICAS");
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

/* --- the timer-driven life of a command ---------------------------------------- */

static void
on_cmd_closed(uv_handle_t *h)
{
	struct cmd *x = h->data;

	free(x->frame);
	free(x);
}

static void
cmd_timer_at(struct cmd *x, uint64_t when)
{
	uint64_t now = uv_now(x->c->loop);

	(void)uv_timer_start(&x->timer, on_cmd_timer,
	    when > now ? when - now : 0, 0);
}

/* Again through redis_dispatch() after delay_ms, if the deadline allows. */
void
redis_cmd_pause(struct cmd *x, int delay_ms)
{
	uint64_t wake = uv_now(x->c->loop) + (uint64_t)delay_ms;

	redis_cmdq_remove(x);
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
void
redis_cmd_end_soon(struct cmd *x, const char *err)
{
	redis_cmdq_remove(x);
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

static void
cmd_expire(struct cmd *x)
{
	struct redis_node *n = x->node;
	char err[ERRSTR_MAX];

	x->timed_out = 1;
	switch (x->st) {
	case CMD_SENT:
		/* the reply is lost: drop the connection; redis_cmd_on_reply ends it */
		redis_ac_lost(x->c, x->ac);
		redis_ac_drop(x->c, x->ac,
		    "connection dropped after a timeout");
		return;
	case CMD_QUEUED:
		if (n != NULL && x->q == &n->wq) {
			/* the connection did not get ready in time */
			redis_cmdq_remove(x);
			(void)snprintf(err, sizeof(err),
			    "connect %s:%d: timeout",
			    n->is_unix ? "unix" : n->host, n->port);
			if (x->errstr[0] == '\0')
				(void)snprintf(x->errstr, sizeof(x->errstr),
				    "%s", err);
			redis_cmd_finish(x);
			redis_node_fail(n, err);
			return;
		}
		redis_cmdq_remove(x);
		break;
	default: break;
	}
	redis_cmd_finish(x);
}

static void
on_cmd_timer(uv_timer_t *t)
{
	struct cmd *x = t->data;

	if (x->st == CMD_FAILING) {
		redis_cmd_finish(x);
		return;
	}
	if (x->st == CMD_PAUSED && uv_now(x->c->loop) < x->deadline) {
		x->st = CMD_IDLE;
		cmd_timer_at(x, x->deadline);
		redis_dispatch(x);
		return;
	}
	cmd_expire(x);
}

/*
 * The end of a command: its callback once, then its memory (after the
 * timer's close).
 */
void
redis_cmd_finish(struct cmd *x)
{
	struct redis_client *c = x->c;
	struct redis_result res;
	char what[64];

	redis_cmdq_remove(x);
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
	case CMD_PING:
		/* redis_client_free() from in here is put off (redis.c) */
		c->in_cb++;
		x->cb(&res, x->arg);
		c->in_cb--;
		break;
	case CMD_SENTINEL: redis_sentinel_answer(x); break;
	case CMD_SLOTS: redis_cluster_map_answer(x); break;
	}
	if (x->reply != NULL)
		freeReplyObject(x->reply);
	x->reply = NULL;
	uv_close((uv_handle_t *)&x->timer, on_cmd_closed);
}

struct cmd *
redis_cmd_new(struct redis_client *c, enum cmd_kind kind, int timeout_ms)
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

/* --- WAIT groups ------------------------------------------------------------- */

/* WAIT's answer (r), or its loss (NULL), to every member. Frees wg. */
void
redis_cmd_wait_resolve(struct wait_group *wg, const redisReply *r)
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

static void
on_wait_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct wait_group *wg = privdata;

	if (reply == NULL)
		redis_ac_lost(wg->n->c,
		    ac); /* the members' own replies said why */
	redis_cmd_wait_resolve(wg, reply);
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
		redis_cmd_wait_resolve(wg, NULL);
	}
}

/* x (just sent on n) joins n's group of this turn. 0, or -1 on ENOMEM. */
int
redis_cmd_wait_join(struct redis_node *n, struct cmd *x)
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

/* --- replies ------------------------------------------------------------------- */

/*
 * 1 when hiredis gave up ac because the peer closed or reset it (EOF,
 * ECONNRESET, EPIPE): not a drop of ours (timeout, shutdown, a failed
 * set-up), which leaves ac->err 0 and sets drop_reason.
 */
static int
ac_peer_closed(const struct redis_client *c, const redisAsyncContext *ac)
{
	if (c->closing || c->drop_reason != NULL)
		return 0;
	/* hiredis 0.14 keeps only strerror(errno) of an I/O error */
	return ac->err == REDIS_ERR_EOF ||
	    (ac->err == REDIS_ERR_IO &&
	        (strcmp(ac->errstr, strerror(ECONNRESET)) == 0 ||
	            strcmp(ac->errstr, strerror(EPIPE)) == 0));
}

static void
reply_lost(struct cmd *x, redisAsyncContext *ac)
{
	struct redis_client *c = x->c;

	if (!x->lost)
		x->peer_closed = ac_peer_closed(c, ac);
	redis_ac_lost(c, ac);
	if (!x->lost)
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s: %s",
		    cmd_what(x),
		    c->closing                   ? "shutting down"
		        : ac->errstr[0] != '\0'  ? ac->errstr
		        : c->drop_reason != NULL ? c->drop_reason
		                                 : "connection lost");
	x->lost = 1;
}

void
redis_cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
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

/*
 * The caller's command whose reply was lost goes once more: the peer
 * closed a connection that was not opened for it, before the deadline.
 */
static int
cmd_may_resend(const struct cmd *x)
{
	return (x->kind == CMD_EVAL || x->kind == CMD_PING) && x->peer_closed &&
	    x->reused && !x->resent && !x->timed_out && !x->c->closing &&
	    uv_now(x->c->loop) < x->deadline;
}

/* Every reply of one attempt is in (or lost): what next. */
static void
attempt_done(struct cmd *x)
{
	struct redis_client *c = x->c;
	redisReply *r = x->reply;

	x->st = CMD_IDLE;
	if (r == NULL || (x->lost && x->wait_sent != -1)) {
		/* the command's own reply is lost: it may have run */
		if (r != NULL) {
			freeReplyObject(r);
			x->reply = NULL;
		}
		x->outcome_unknown = 1;
		if (r == NULL && cmd_may_resend(x)) {
			/* once, on a new connection (see the top comment) */
			x->resent = 1;
			log_debug(NULL, "Redis %s:%d: %s; sending it again",
			    x->node->is_unix ? "unix" : x->node->host,
			    x->node->port, x->errstr);
			redis_cmd_pause(x, 0);
			return;
		}
		redis_cmd_finish(x);
		return;
	}
	if (x->wait_sent == -1) {
		/* WAIT's reply lost: the script's reply, not durable */
		x->durable = 0;
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s",
		    x->timed_out ? "WAIT: timeout" : "WAIT: reply lost");
		redis_cmd_finish(x);
		return;
	}
	if (x->kind == CMD_SENTINEL || x->kind == CMD_SLOTS) {
		redis_cmd_finish(x);
		return;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s: %.*s",
		    cmd_what(x), (int)r->len, r->str != NULL ? r->str : "");
		if (x->kind == CMD_EVAL && !x->is_eval &&
		    redis_reply_is(r, "NOSCRIPT")) {
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
			redis_dispatch(x);
			return;
		}
		if (c->t.mode == REDIS_MODE_SENTINEL && reply_is_failover(r)) {
			redis_sentinel_eval_failover(x);
			return;
		}
		if (c->t.mode == REDIS_MODE_CLUSTER &&
		    redis_cluster_eval_error(x))
			return;
		freeReplyObject(r);
		x->reply = NULL;
		redis_cmd_finish(x);
		return;
	}
	x->errstr[0] = '\0';
	if (x->kind == CMD_PING && c->t.mode == REDIS_MODE_CLUSTER) {
		/* the next primary */
		x->ping_idx++;
		redis_dispatch(x);
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
				redis_sentinel_suspect(c);
		}
	} else if (x->wait && c->min_replicas > 0) {
		x->durable = 0;
		(void)snprintf(x->errstr, sizeof(x->errstr),
		    "WAIT: could not be sent");
	}
	redis_cmd_finish(x);
}
