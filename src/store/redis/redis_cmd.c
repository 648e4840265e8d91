/*
 * redis_cmd.c - a command of the Redis client from the call to its
 * callback: its framing, its queue, its timer (the deadline, pauses, the
 * end on the next turn), the WAIT it shares, its replies and what comes
 * next (the one re-send after a peer closed a used connection, NOSCRIPT,
 * the topology's errors, the callback). Calls up only through c->topo.
 *
 * WAIT. The commands sent with wait on one connection in one loop turn
 * share one WAIT, queued before the loop polls (uv_prepare), so it leaves
 * in the same write as they do in the common case.
 */
#include <assert.h>
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
#define TLS_LOG_EVERY_MS 1000 /* a loop's TLS failures: one log line at most */
#define EVAL_ARGS_MAX 24      /* EVALSHA sha 1 key + at most 20 arguments */
#define RESP_NUM_MAX 20       /* digits of a length */

static void attempt_done(struct cmd *cmd);
static void on_cmd_timer(uv_timer_t *t);

/* --- states ----------------------------------------------------------------- */

/* cmd_set_state's map: cmd_allowed[from] has bit `to` (redis_int.h). */
#define B(s) (1u << (s))
static const unsigned cmd_allowed[CMD_NSTATES] = {
	[CMD_IDLE] = B(CMD_QUEUED) | B(CMD_SENT) | B(CMD_PAUSED) |
	    B(CMD_FAILING) | B(CMD_DONE),
	[CMD_QUEUED] = B(CMD_IDLE),
	[CMD_SENT] = B(CMD_IDLE),
	[CMD_PAUSED] = B(CMD_IDLE) | B(CMD_DONE),
	[CMD_FAILING] = B(CMD_DONE),
	[CMD_DONE] = 0,
};
#undef B

/* The one place a command's state changes: only along cmd_allowed. */
static void
cmd_set_state(struct cmd *cmd, enum cmd_state to)
{
	(void)cmd_allowed; /* read by the asserts only (none with NDEBUG) */
	assert(cmd->st < CMD_NSTATES && to < CMD_NSTATES);
	assert((cmd_allowed[cmd->st] & (1u << to)) != 0);
	cmd->st = to;
}

void
redis_cmd_sent(struct cmd *cmd)
{
	cmd_set_state(cmd, CMD_SENT);
}

/* --- queues ------------------------------------------------------------------ */

void
redis_cmdq_push(struct cmdq *q, struct cmd *cmd)
{
	assert(cmd->q == NULL);
	TAILQ_INSERT_TAIL(q, cmd, q_link);
	cmd->q = q;
	cmd_set_state(cmd, CMD_QUEUED);
}

void
redis_cmdq_remove(struct cmd *cmd)
{
	if (cmd->q == NULL)
		return;
	TAILQ_REMOVE(cmd->q, cmd, q_link);
	cmd->q = NULL;
	cmd_set_state(cmd, CMD_IDLE);
}

/* --- framing ------------------------------------------------------------------ */

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

/* The bytes of one bulk string of len bytes, at most. */
static size_t
bulk_size(size_t len)
{
	return 1 + RESP_NUM_MAX + 2 + len + 2;
}

int
redis_cmd_frame(struct cmd *cmd, struct lua_script *s, const char *key,
    size_t keylen, int argc, const char **argv, const size_t *argvlen)
{
	size_t need, i;
	char *p;

	if (argc < 0 || argc + 4 > EVAL_ARGS_MAX)
		return -1;
	need = 1 + RESP_NUM_MAX + 2 + bulk_size(7) + bulk_size(40) +
	    bulk_size(1) + bulk_size(keylen);
	for (i = 0; i < (size_t)argc; i++)
		need += bulk_size(argvlen[i]);
	if ((cmd->eval.frame = p = malloc(need)) == NULL)
		return -1;
	*p++ = '*';
	p += put_uint(p, (size_t)argc + 4);
	*p++ = '\r';
	*p++ = '\n';
	p = put_bulk(p, "EVALSHA", 7);
	p = put_bulk(p, s->sha, 40);
	cmd->eval.rest = (size_t)(p - cmd->eval.frame);
	p = put_bulk(p, "1", 1);
	p = put_bulk(p, key, keylen);
	for (i = 0; i < (size_t)argc; i++)
		p = put_bulk(p, argv[i], argvlen[i]);
	cmd->eval.framelen = (size_t)(p - cmd->eval.frame);
	cmd->eval.s = s;
	return 0;
}

/*
 * cmd's EVALSHA framed as EVAL: "*N" "$4 EVAL" "$len src" then the
 * EVALSHA's rest. NULL on ENOMEM.
 */
char *
redis_cmd_eval_frame(const struct cmd *cmd, size_t *len)
{
	size_t argc = 0, cap, rest = cmd->eval.framelen - cmd->eval.rest;
	const char *p = cmd->eval.frame + 1;
	char *f, *q;

	while (*p != '\r')
		argc = argc * 10 + (size_t)(*p++ - '0');
	cap = 1 + RESP_NUM_MAX + 2 + bulk_size(4) +
	    bulk_size(cmd->eval.s->len) + rest;
	if ((f = malloc(cap)) == NULL)
		return NULL;
	q = f;
	*q++ = '*';
	q += put_uint(q, argc);
	*q++ = '\r';
	*q++ = '\n';
	q = put_bulk(q, "EVAL", 4);
	q = put_bulk(q, cmd->eval.s->src, cmd->eval.s->len);
	memcpy(q, cmd->eval.frame + cmd->eval.rest, rest);
	q += rest;
	*len = (size_t)(q - f);
	return f;
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

static void
cmd_reply_drop(struct cmd *cmd)
{
	if (cmd->out.reply != NULL)
		freeReplyObject(cmd->out.reply);
	cmd->out.reply = NULL;
}

/* --- the timer-driven life of a command ---------------------------------------- */

static void
on_cmd_closed(uv_handle_t *h)
{
	struct cmd *cmd = h->data;

	free(cmd->eval.frame);
	free(cmd);
}

static void
cmd_timer_at(struct cmd *cmd, uint64_t when)
{
	uint64_t now = uv_now(cmd->c->loop);

	(void)uv_timer_start(&cmd->timer, on_cmd_timer,
	    when > now ? when - now : 0, 0);
}

void
redis_cmd_dispatch(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;

	assert(cmd->st == CMD_IDLE);
	if (c->closing) {
		redis_cmd_end_soon(cmd, "shutting down");
		return;
	}
	if (uv_now(c->loop) >= cmd->deadline) {
		cmd->flags.timed_out = 1;
		cmd_reply_drop(cmd);
		redis_cmd_end_soon(cmd, NULL);
		return;
	}
	c->topo->dispatch(cmd);
}

/* Again through redis_cmd_dispatch() after delay_ms, if the deadline allows. */
void
redis_cmd_pause(struct cmd *cmd, int delay_ms)
{
	uint64_t wake = uv_now(cmd->c->loop) + (uint64_t)delay_ms;

	redis_cmdq_remove(cmd);
	if (wake >= cmd->deadline) {
		/* no time for another attempt: end with the last error */
		cmd_set_state(cmd, CMD_FAILING);
		cmd_timer_at(cmd, 0);
		return;
	}
	cmd_set_state(cmd, CMD_PAUSED);
	cmd_timer_at(cmd, wake);
}

/* Ends on the next loop turn, with its reply or errstr (never inside a call). */
void
redis_cmd_end_soon(struct cmd *cmd, const char *err)
{
	redis_cmdq_remove(cmd);
	if (err != NULL)
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr), "%s",
		    err);
	cmd_set_state(cmd, CMD_FAILING);
	cmd_timer_at(cmd, 0);
}

static const char *
cmd_what(const struct cmd *cmd)
{
	switch (cmd->kind) {
	case CMD_EVAL: return cmd->eval.s->name;
	case CMD_PING: return "PING";
	case CMD_SENTINEL: return "SENTINEL";
	case CMD_SLOTS: return "CLUSTER SLOTS";
	}
	return "?";
}

/* A command queued on a node whose connection did not get ready in time. */
static void
cmd_expire_connect(struct cmd *cmd, struct redis_node *n)
{
	char err[ERRSTR_MAX];

	redis_cmdq_remove(cmd);
	if (n->ac != NULL && redis_uv_in_handshake(n->ac)) {
		(void)snprintf(err, sizeof(err),
		    "connect %s:%d: TLS: no handshake in time (does the server speak TLS on this port?)",
		    n->host, n->port);
		if (uv_now(n->c->loop) >= n->c->tls_log_at) {
			log_error(NULL, "Redis %s", err);
			n->c->tls_log_at =
			    uv_now(n->c->loop) + TLS_LOG_EVERY_MS;
		}
	} else
		(void)snprintf(err, sizeof(err), "connect %s:%d: timeout",
		    n->is_unix ? "unix" : n->host, n->port);
	if (cmd->out.errstr[0] == '\0')
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr), "%s",
		    err);
	redis_cmd_finish(cmd);
	redis_node_fail(n, err);
}

static void
cmd_expire(struct cmd *cmd)
{
	struct redis_node *n = cmd->attempt.node;

	cmd->flags.timed_out = 1;
	switch (cmd->st) {
	case CMD_SENT:
		/* the reply is lost: drop the connection; redis_cmd_on_reply ends it */
		redis_ac_lost(cmd->c, cmd->attempt.ac);
		redis_ac_drop(cmd->c, cmd->attempt.ac,
		    "connection dropped after a timeout");
		return;
	case CMD_QUEUED:
		if (n != NULL && cmd->q == &n->wq) {
			cmd_expire_connect(cmd, n);
			return;
		}
		redis_cmdq_remove(cmd);
		break;
	default: break;
	}
	redis_cmd_finish(cmd);
}

static void
on_cmd_timer(uv_timer_t *t)
{
	struct cmd *cmd = t->data;

	if (cmd->st == CMD_FAILING) {
		redis_cmd_finish(cmd);
		return;
	}
	if (cmd->st == CMD_PAUSED && uv_now(cmd->c->loop) < cmd->deadline) {
		cmd_set_state(cmd, CMD_IDLE);
		cmd_timer_at(cmd, cmd->deadline);
		redis_cmd_dispatch(cmd);
		return;
	}
	cmd_expire(cmd);
}

/* errstr as the callback sees it: the timeout named, else why it failed. */
static void
cmd_errstr_final(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;
	char what[64], last[ERRSTR_MAX];

	if (cmd->out.reply == NULL && cmd->flags.timed_out && !c->closing) {
		(void)snprintf(what, sizeof(what), "%s", cmd_what(cmd));
		(void)snprintf(last, sizeof(last), "%s", cmd->out.errstr);
		if (cmd->out.outcome_unknown || last[0] == '\0')
			(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
			    "%s: timeout", what);
		else
			(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
			    "%s: timeout (%s)", what, last);
	}
	if (cmd->out.reply == NULL && cmd->out.errstr[0] == '\0')
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr), "%s",
		    c->closing ? "shutting down" : "unknown error");
}

/*
 * The end of a command: its callback once, then its memory (after the
 * timer's close).
 */
void
redis_cmd_finish(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;
	struct redis_result res;

	redis_cmdq_remove(cmd);
	cmd_set_state(cmd, CMD_DONE);
	(void)uv_timer_stop(&cmd->timer);
	LIST_REMOVE(cmd, all_link);
	cmd_errstr_final(cmd);
	memset(&res, 0, sizeof(res));
	res.reply = (const struct redis_reply *)(const void *)cmd->out.reply;
	res.outcome_unknown =
	    cmd->out.reply == NULL && cmd->out.outcome_unknown;
	res.durable = cmd->out.reply != NULL && cmd->out.durable;
	memcpy(res.errstr, cmd->out.errstr, sizeof(res.errstr));
	switch (cmd->kind) {
	case CMD_EVAL:
	case CMD_PING:
		/* redis_client_free() from in here is put off (redis_client.c) */
		c->in_cb++;
		cmd->cb(&res, cmd->arg);
		c->in_cb--;
		break;
	case CMD_SENTINEL:
	case CMD_SLOTS: c->topo->answer(cmd); break;
	}
	cmd_reply_drop(cmd);
	uv_close((uv_handle_t *)&cmd->timer, on_cmd_closed);
}

void
redis_cmd_discard(struct cmd *cmd)
{
	assert(cmd->st == CMD_IDLE && cmd->q == NULL);
	cmd_set_state(cmd, CMD_DONE);
	(void)uv_timer_stop(&cmd->timer);
	LIST_REMOVE(cmd, all_link);
	uv_close((uv_handle_t *)&cmd->timer, on_cmd_closed);
}

struct cmd *
redis_cmd_new(struct redis_client *c, enum cmd_kind kind, int timeout_ms)
{
	struct cmd *cmd = calloc(1, sizeof(*cmd));

	if (cmd == NULL)
		return NULL;
	if (uv_timer_init(c->loop, &cmd->timer) != 0) {
		free(cmd);
		return NULL;
	}
	cmd->timer.data = cmd;
	cmd->c = c;
	cmd->kind = kind;
	/* calloc: CMD_IDLE, being routed */
	cmd->route.ask = cmd->route.moved = -1;
	cmd->out.durable = 1;
	cmd->attempt.acked = -1;
	cmd->deadline = uv_now(c->loop) + (uint64_t)timeout_ms;
	LIST_INSERT_HEAD(&c->all, cmd, all_link);
	cmd_timer_at(cmd, cmd->deadline);
	return cmd;
}

/* --- WAIT groups ------------------------------------------------------------- */

/* WAIT's answer (r), or its loss (NULL), to every member. Frees wg. */
void
redis_cmd_wait_resolve(struct wait_group *wg, const redisReply *r)
{
	struct cmd *cmd;

	while ((cmd = SLIST_FIRST(&wg->members)) != NULL) {
		SLIST_REMOVE_HEAD(&wg->members, wait_link);
		cmd->attempt.pending--;
		if (r == NULL)
			cmd->attempt.wait_sent = -1;
		else if (r->type == REDIS_REPLY_INTEGER)
			cmd->attempt.acked = r->integer;
		if (cmd->attempt.pending == 0)
			attempt_done(cmd);
	}
	free(wg);
}

static void
on_wait_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct wait_group *wg = privdata;

	if (reply == NULL) /* the members' own replies said why */
		redis_ac_lost(wg->n->c, ac);
	redis_cmd_wait_resolve(wg, reply);
}

/* Before the loop polls: one WAIT after each connection's group. */
static void
on_prepare(uv_prepare_t *h)
{
	struct redis_client *c = h->data;
	struct wgq todo = STAILQ_HEAD_INITIALIZER(todo);
	struct wait_group *wg;
	const char *wait[] = { "WAIT", c->wait_n, c->wait_ms };

	/* groups that callbacks below start wait for the next turn */
	STAILQ_CONCAT(&todo, &c->wgs);
	(void)uv_prepare_stop(h);
	while ((wg = STAILQ_FIRST(&todo)) != NULL) {
		struct redis_node *n = wg->n;

		STAILQ_REMOVE_HEAD(&todo, link);
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

/* cmd (just sent on n) joins n's group of this turn. 0, or -1 on ENOMEM. */
int
redis_cmd_wait_join(struct redis_node *n, struct cmd *cmd)
{
	struct redis_client *c = n->c;
	struct wait_group *wg = n->wg;

	if (wg == NULL) {
		if ((wg = calloc(1, sizeof(*wg))) == NULL)
			return -1;
		wg->n = n;
		wg->gen = n->gen;
		SLIST_INIT(&wg->members);
		STAILQ_INSERT_TAIL(&c->wgs, wg, link);
		n->wg = wg;
		(void)uv_prepare_start(c->prep, on_prepare);
	}
	SLIST_INSERT_HEAD(&wg->members, cmd, wait_link);
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
reply_lost(struct cmd *cmd, redisAsyncContext *ac)
{
	struct redis_client *c = cmd->c;
	const char *why = c->closing ? "shutting down"
	    : ac->errstr[0] != '\0'  ? ac->errstr
	    : c->drop_reason != NULL ? c->drop_reason
	                             : "connection lost";

	if (!cmd->attempt.lost) {
		cmd->attempt.peer_closed = ac_peer_closed(c, ac);
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
		    "%s: %s", cmd_what(cmd), why);
	}
	redis_ac_lost(c, ac);
	cmd->attempt.lost = 1;
}

void
redis_cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct cmd *cmd = privdata;

	cmd->attempt.pending--;
	if (reply == NULL)
		reply_lost(cmd, ac);
	else if ((cmd->out.reply = reply_dup(reply)) == NULL) {
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
		    "%s: out of memory", cmd_what(cmd));
		cmd->attempt.lost = 1;
	}
	if (cmd->attempt.pending == 0)
		attempt_done(cmd);
}

/*
 * The caller's command whose reply was lost goes once more: the peer
 * closed a connection that was not opened for it, before the deadline.
 */
static int
cmd_may_resend(const struct cmd *cmd)
{
	return (cmd->kind == CMD_EVAL || cmd->kind == CMD_PING) &&
	    cmd->attempt.peer_closed && cmd->attempt.reused &&
	    !cmd->flags.resent && !cmd->flags.timed_out && !cmd->c->closing &&
	    uv_now(cmd->c->loop) < cmd->deadline;
}

/* The command's own reply is lost: it may have run. */
static void
attempt_lost(struct cmd *cmd)
{
	struct redis_node *n = cmd->attempt.node;
	int had_reply = cmd->out.reply != NULL;

	cmd_reply_drop(cmd);
	cmd->out.outcome_unknown = 1;
	if (!had_reply && cmd_may_resend(cmd)) {
		/* once, on a new connection (see redis_client.c's top comment) */
		cmd->flags.resent = 1;
		log_debug(NULL, "Redis %s:%d: %s; sending it again",
		    n->is_unix ? "unix" : n->host, n->port, cmd->out.errstr);
		redis_cmd_pause(cmd, 0);
		return;
	}
	redis_cmd_finish(cmd);
}

/* An error reply: NOSCRIPT loads the script, the topology may go on. */
static void
attempt_error(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;
	const redisReply *r = cmd->out.reply;

	(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr), "%s: %.*s",
	    cmd_what(cmd), (int)r->len, r->str != NULL ? r->str : "");
	if (cmd->kind == CMD_EVAL && !cmd->eval.full &&
	    redis_reply_is(r, "NOSCRIPT")) {
		/* script cache lost (restart, SCRIPT FLUSH): EVAL */
		if (uv_now(c->loop) >= c->noscript_log_at) {
			/* once a second: a whole turn's commands see it */
			log_info(NULL, "NOSCRIPT for %s: loading it again",
			    cmd->eval.s->name);
			c->noscript_log_at =
			    uv_now(c->loop) + NOSCRIPT_LOG_EVERY_MS;
		}
		cmd->eval.full = 1;
		cmd_reply_drop(cmd);
		redis_cmd_dispatch(cmd);
		return;
	}
	if (c->topo->error != NULL && c->topo->error(cmd))
		return;
	cmd_reply_drop(cmd);
	redis_cmd_finish(cmd);
}

/* A good reply: with WAIT, durable or not. */
static void
attempt_good(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;

	cmd->out.errstr[0] = '\0';
	if (c->topo->more != NULL && c->topo->more(cmd))
		return;
	if (cmd->attempt.wait_sent) {
		cmd->out.durable = cmd->attempt.acked >= c->min_replicas;
		if (!cmd->out.durable) {
			(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
			    "WAIT: %lld of %d replica(s) acknowledged in time",
			    cmd->attempt.acked < 0 ? 0 : cmd->attempt.acked,
			    c->min_replicas);
			if (c->topo->wait_short != NULL)
				c->topo->wait_short(cmd);
		}
	} else if (cmd->flags.wait && c->min_replicas > 0) {
		cmd->out.durable = 0;
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr),
		    "WAIT: could not be sent");
	}
	redis_cmd_finish(cmd);
}

/* Every reply of one attempt is in (or lost): what next. */
static void
attempt_done(struct cmd *cmd)
{
	const redisReply *r = cmd->out.reply;

	cmd_set_state(cmd, CMD_IDLE);
	if (r == NULL || (cmd->attempt.lost && cmd->attempt.wait_sent != -1)) {
		attempt_lost(cmd);
		return;
	}
	if (cmd->attempt.wait_sent == -1) {
		/* WAIT's reply lost: the script's reply, not durable */
		cmd->out.durable = 0;
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr), "%s",
		    cmd->flags.timed_out ? "WAIT: timeout"
		                         : "WAIT: reply lost");
		redis_cmd_finish(cmd);
		return;
	}
	if (cmd->kind == CMD_SENTINEL || cmd->kind == CMD_SLOTS)
		redis_cmd_finish(cmd);
	else if (r->type == REDIS_REPLY_ERROR)
		attempt_error(cmd);
	else
		attempt_good(cmd);
}
