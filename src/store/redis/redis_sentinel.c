/*
 * redis_sentinel.c - the topology of a primary behind sentinels, for the
 * Redis client (redis_topology_sentinel); its state is struct sentinels.
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
 * Errors that mean the script did not run behind sentinels (READONLY,
 * MASTERDOWN, LOADING, NOREPLICAS) resend after a pause; READONLY and the
 * like retire the connection (its other replies still come) and ask the
 * sentinels again; NOREPLICAS and a WAIT shortfall (with min_replicas)
 * ask them again while the primary keeps serving, passing over answers
 * that name it: under a split brain the majority's new primary takes over
 * as soon as a sentinel names it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "log.h"
#include "redis_int.h"
#include "util.h"

#define PORT_MAX 65535

struct sentinels {
	struct redis_node *node[REDIS_URL_HOSTS_MAX]; /* one per sentinel */
	int primary_ok; /* c->main is the primary the sentinels named */
	char primary[REDIS_HOST_MAX + 1];
	int primary_port;
	int primary_from; /* the sentinel that named it */
	int first;        /* the sentinel asked first */
	/* a discovery round */
	struct {
		int active;
		int k;         /* the sentinel asked now */
		int asked;     /* sentinels asked so far */
		int verifying; /* c->main connects to the answer */
		int answered;  /* err is a sentinel's answer, not a silence */
		uint64_t deadline;
		struct cmdq q; /* commands waiting for a primary */
		char err[ERRSTR_MAX];
	} round;
	/* a primary in doubt (NOREPLICAS, a WAIT shortfall) */
	struct {
		char host[REDIS_HOST_MAX + 1]; /* "": none this round */
		int port;
		int seen;    /* a sentinel named it again */
		uint64_t at; /* when the last refresh started */
	} suspect;
};

static void disc_ask(struct redis_client *c);
static void sentinel_start(struct redis_client *c);

static struct sentinels *
sentinels_of(const struct redis_client *c)
{
	return c->topo_state;
}

/* --- discovery --------------------------------------------------------------- */

/* Discovery ended without a primary: the waiting commands pause. */
static void
disc_fail(struct redis_client *c)
{
	struct sentinels *sn = sentinels_of(c);
	struct cmd *cmd;

	sn->round.active = 0;
	sn->round.verifying = 0;
	sn->suspect.host[0] = '\0';
	while ((cmd = TAILQ_FIRST(&sn->round.q)) != NULL) {
		redis_cmdq_remove(cmd);
		(void)snprintf(cmd->out.errstr, sizeof(cmd->out.errstr), "%s",
		    sn->round.err);
		redis_cmd_pause(cmd, FAILOVER_PAUSE_MS);
	}
}

/* Connects main to host:port and moves the waiting commands there. */
static void
disc_try(struct redis_client *c, const char *host, int port)
{
	struct sentinels *sn = sentinels_of(c);
	struct redis_node *n = c->main;
	struct cmd *cmd;

	if (sn->primary_ok && n->st == NODE_READY && n->port == port &&
	    strcmp(n->host, host) == 0) {
		/* a refresh that names the same primary: keep it */
		sn->first = sn->round.k;
		sn->primary_from = sn->round.k;
		disc_fail(c); /* nothing waits (primary_ok): ends the round */
		return;
	}
	sn->primary_ok = 0;
	redis_node_retire(n);
	redis_node_set_addr(n, host, port);
	sn->round.verifying = 1;
	while ((cmd = TAILQ_FIRST(&sn->round.q)) != NULL) {
		redis_cmdq_remove(cmd);
		redis_node_submit(n, cmd);
		if (!sn->round.verifying)
			break; /* failed at once: handled already */
	}
	if (sn->round.verifying && n->st == NODE_IDLE &&
	    redis_node_connect(n) != 0) {
		char err[ERRSTR_MAX];

		(void)snprintf(err, sizeof(err), "%s", n->errstr);
		redis_node_fail(n, err);
	}
}

/* Why the sentinel asked gave no primary, kept in round.err. */
static void
disc_note(struct redis_client *c, const struct cmd *cmd)
{
	struct sentinels *sn = sentinels_of(c);
	const struct redis_addr *s = &c->t.hosts[cmd->route.idx];
	const redisReply *r = cmd->out.reply;

	/* an answer says more than another one's silence: it stays */
	if (r != NULL || !sn->round.answered)
		(void)snprintf(sn->round.err, sizeof(sn->round.err),
		    "sentinel %s:%d: %s", s->host, s->port,
		    r == NULL                          ? cmd->out.errstr
		        : r->type == REDIS_REPLY_NIL   ? "unknown master name"
		        : r->type == REDIS_REPLY_ERROR ? r->str
		                                       : "unexpected reply");
	sn->round.answered |= r != NULL;
}

/* SENTINEL get-master-addr-by-name came back (or not). */
static void
sentinel_answer(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;
	struct sentinels *sn = sentinels_of(c);
	const redisReply *r = cmd->out.reply;
	unsigned long long v;
	char host[REDIS_HOST_MAX + 1];
	int ok;

	if (c->closing || !sn->round.active)
		return;
	ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[1]->type == REDIS_REPLY_STRING &&
	    r->element[0]->len > 0 && r->element[0]->len <= REDIS_HOST_MAX &&
	    util_decimal(r->element[1]->str, r->element[1]->len, PORT_MAX,
	        &v) == UTIL_DEC_OK &&
	    v > 0;
	if (!ok) {
		disc_note(c, cmd);
		sn->round.k = (sn->round.k + 1) % c->t.nhosts;
		disc_ask(c);
		return;
	}
	memcpy(host, r->element[0]->str, r->element[0]->len + 1);
	if (sn->suspect.host[0] != '\0' && (int)v == sn->suspect.port &&
	    strcmp(host, sn->suspect.host) == 0 &&
	    sn->round.asked < c->t.nhosts) {
		/* names the primary in doubt: another sentinel may know better */
		sn->suspect.seen = 1;
		sn->round.k = (sn->round.k + 1) % c->t.nhosts;
		disc_ask(c);
		return;
	}
	disc_try(c, host, (int)v);
}

/* Asks the next sentinel, with its share of the time left. */
static void
disc_ask(struct redis_client *c)
{
	struct sentinels *sn = sentinels_of(c);
	uint64_t now = uv_now(c->loop);
	struct redis_node *n;
	struct cmd *cmd;
	uint64_t slice;
	int k = sn->round.k;

	if (sn->round.asked >= c->t.nhosts || now >= sn->round.deadline) {
		if (sn->suspect.seen && sn->primary_ok) {
			/* nobody names another: keep the primary in doubt */
			disc_try(c, sn->suspect.host, sn->suspect.port);
			return;
		}
		disc_fail(c);
		return;
	}
	slice = (sn->round.deadline - now) /
	    (uint64_t)(c->t.nhosts - sn->round.asked);
	if (slice == 0)
		slice = 1;
	sn->round.asked++;
	n = sn->node[k];
	if (n == NULL) {
		n = sn->node[k] = redis_node_new(c, c->t.hosts[k].host,
		    c->t.hosts[k].port, 0);
		if (n != NULL)
			n->sentinel = 1;
	}
	if (n == NULL ||
	    (cmd = redis_cmd_new(c, CMD_SENTINEL, (int)slice)) == NULL) {
		(void)snprintf(sn->round.err, sizeof(sn->round.err),
		    "out of memory");
		disc_fail(c);
		return;
	}
	cmd->route.idx = k;
	redis_node_submit(n, cmd);
}

/* Asks the sentinels for the primary, unless a round is under way. */
static void
sentinel_start(struct redis_client *c)
{
	struct sentinels *sn = sentinels_of(c);

	if (sn->round.active || c->t.nhosts == 0)
		return;
	sn->round.active = 1;
	sn->round.verifying = 0;
	sn->round.asked = 0;
	sn->round.answered = 0;
	sn->suspect.seen = 0;
	sn->round.k = sn->first % c->t.nhosts;
	sn->round.deadline = uv_now(c->loop) + (uint64_t)c->timeout_ms;
	(void)snprintf(sn->round.err, sizeof(sn->round.err),
	    "no sentinel answered");
	disc_ask(c);
}

/*
 * A WAIT shortfall or NOREPLICAS on the primary: under a split brain the
 * majority may have a new one. Ask the sentinels again, starting after the
 * one that named this primary and passing over answers that name it;
 * commands keep going to it meanwhile.
 */
static void
sentinel_suspect(struct redis_client *c)
{
	struct sentinels *sn = sentinels_of(c);
	uint64_t now = uv_now(c->loop);

	/* at most one refresh per pause, however many replies fall short */
	if (sn->round.active || c->t.nhosts == 0 ||
	    (sn->suspect.at != 0 && now - sn->suspect.at < FAILOVER_PAUSE_MS))
		return;
	sn->suspect.at = now;
	(void)snprintf(sn->suspect.host, sizeof(sn->suspect.host), "%s",
	    c->main->host);
	sn->suspect.port = c->main->port;
	sn->first = (sn->primary_from + 1) % c->t.nhosts;
	sentinel_start(c);
}

/*
 * The primary did not ROLE master, refused, or its connection died: the
 * sentinels are asked again (for the next commands). 1 when the round
 * took main's queue over.
 */
static int
sentinel_primary_failed(struct redis_client *c, const char *err)
{
	struct sentinels *sn = sentinels_of(c);
	struct cmd *cmd;

	sn->primary_ok = 0;
	if (!sn->round.verifying)
		return 0;
	/* the answer just tried proved stale (debug: a failover repeats it) */
	log_debug(NULL, "Redis primary of '%s' named by sentinel %s:%d: %s",
	    c->t.master_name, c->t.hosts[sn->round.k].host,
	    c->t.hosts[sn->round.k].port, err);
	sn->round.verifying = 0;
	if (sn->first == sn->round.k)
		sn->first = (sn->round.k + 1) % c->t.nhosts;
	/* the commands queued on main go back to wait for a primary */
	while ((cmd = TAILQ_FIRST(&c->main->wq)) != NULL) {
		redis_cmdq_remove(cmd);
		redis_cmdq_push(&sn->round.q, cmd);
	}
	(void)snprintf(sn->round.err, sizeof(sn->round.err), "%s", err);
	sn->round.k = (sn->round.k + 1) % c->t.nhosts;
	disc_ask(c);
	return 1;
}

/* --- the topology's hooks ------------------------------------------------------ */

static int
sentinel_init(struct redis_client *c)
{
	struct sentinels *sn = calloc(1, sizeof(*sn));

	if (sn == NULL)
		return -1;
	TAILQ_INIT(&sn->round.q);
	c->topo_state = sn;
	c->main = redis_node_new(c, c->t.host, c->t.port, 0);
	if (c->main == NULL)
		return -1;
	c->main->want_primary = 1;
	return 0;
}

static void
sentinel_free(struct redis_client *c)
{
	struct sentinels *sn = sentinels_of(c);
	int i;

	if (sn == NULL)
		return;
	for (i = 0; i < REDIS_URL_HOSTS_MAX; i++) {
		redis_node_close(sn->node[i]);
		free(sn->node[i]);
	}
	free(sn);
	c->topo_state = NULL;
}

static void
sentinel_dispatch(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;
	struct sentinels *sn = sentinels_of(c);

	if ((sn->primary_ok && c->main->ac != NULL) || sn->round.verifying) {
		redis_node_submit(c->main, cmd);
		return;
	}
	redis_cmdq_push(&sn->round.q, cmd);
	sentinel_start(c);
}

/* READONLY, MASTERDOWN, LOADING, NOREPLICAS: the command did not run. */
static int
reply_is_failover(const redisReply *r)
{
	return redis_reply_is(r, "READONLY") ||
	    redis_reply_is(r, "MASTERDOWN") || redis_reply_is(r, "LOADING") ||
	    redis_reply_is(r, "NOREPLICAS");
}

/* An error that means nothing ran: ask again, resend. */
static int
sentinel_error(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;
	struct sentinels *sn = sentinels_of(c);
	struct redis_node *n = cmd->attempt.node;

	if (!reply_is_failover(cmd->out.reply))
		return 0;
	log_info(NULL, "Redis %s:%d: %s", n->host, n->port, cmd->out.errstr);
	if (n == c->main && sn->primary_ok && cmd->attempt.ac == n->ac) {
		if (redis_reply_is(cmd->out.reply, "NOREPLICAS"))
			sentinel_suspect(c);
		else {
			sn->primary_ok = 0;
			redis_node_retire(n);
			/* its answer proved stale: not asked first again */
			if (sn->first == sn->primary_from && c->t.nhosts > 0)
				sn->first =
				    (sn->primary_from + 1) % c->t.nhosts;
		}
	}
	freeReplyObject(cmd->out.reply);
	cmd->out.reply = NULL;
	redis_cmd_pause(cmd, FAILOVER_PAUSE_MS);
	return 1;
}

static void
sentinel_wait_short(struct cmd *cmd)
{
	struct redis_client *c = cmd->c;

	if (cmd->attempt.node == c->main && cmd->attempt.ac == c->main->ac)
		sentinel_suspect(c);
}

/* During discovery the next sentinel is asked at once. */
static void
sentinel_requeue(struct cmd *cmd)
{
	redis_cmd_pause(cmd,
	    sentinels_of(cmd->c)->round.verifying ? 0 : FAILOVER_PAUSE_MS);
}

static void
sentinel_node_ready(struct redis_node *n)
{
	struct redis_client *c = n->c;
	struct sentinels *sn = sentinels_of(c);

	if (n != c->main)
		return;
	sn->primary_ok = 1;
	if (!sn->round.verifying)
		return;
	sn->round.verifying = 0;
	sn->round.active = 0;
	sn->first = sn->round.k;
	sn->primary_from = sn->round.k;
	sn->suspect.host[0] = '\0';
	if (n->port != sn->primary_port || strcmp(n->host, sn->primary) != 0) {
		log_info(NULL, "Redis primary of '%s' is %s:%d",
		    c->t.master_name, n->host, n->port);
		(void)snprintf(sn->primary, sizeof(sn->primary), "%s", n->host);
		sn->primary_port = n->port;
	}
}

static void
sentinel_node_lost(struct redis_node *n)
{
	if (n == n->c->main)
		sentinels_of(n->c)->primary_ok = 0;
}

static int
sentinel_node_failed(struct redis_node *n, const char *err)
{
	struct redis_client *c = n->c;
	struct sentinels *sn = sentinels_of(c);

	if (n != c->main)
		return 0;
	if (n->evicting) {
		/* not a stale answer: the commands fail */
		sn->primary_ok = 0;
		sn->round.verifying = 0;
		sn->round.active = 0;
		return 0;
	}
	return sentinel_primary_failed(c, err);
}

const struct redis_topology redis_topology_sentinel = {
	.init = sentinel_init,
	.free = sentinel_free,
	.dispatch = sentinel_dispatch,
	.error = sentinel_error,
	.wait_short = sentinel_wait_short,
	.answer = sentinel_answer,
	.requeue = sentinel_requeue,
	.node_ready = sentinel_node_ready,
	.node_lost = sentinel_node_lost,
	.node_failed = sentinel_node_failed,
};
