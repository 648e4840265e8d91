/*
 * redis_sentinel.c - the primary behind the sentinels, for the Redis
 * client.
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
#include <string.h>

#include <uv.h>

#include "log.h"
#include "redis_int.h"
#include "util.h"

#define PORT_MAX 65535

static void disc_ask(struct redis_client *c);

/* Sentinel mode, an error that means nothing ran: ask again, resend. */
void
redis_sentinel_eval_failover(struct cmd *x)
{
	struct redis_client *c = x->c;
	struct redis_node *n = x->node;

	log_info(NULL, "Redis %s:%d: %s", n->host, n->port, x->errstr);
	if (n == c->main && c->primary_ok && x->ac == n->ac) {
		if (redis_reply_is(x->reply, "NOREPLICAS"))
			redis_sentinel_suspect(c);
		else {
			c->primary_ok = 0;
			redis_node_retire(n);
			/* its answer proved stale: not asked first again */
			if (c->sentinel_first == c->primary_from &&
			    c->t.nhosts > 0)
				c->sentinel_first =
				    (c->primary_from + 1) % c->t.nhosts;
		}
	}
	freeReplyObject(x->reply);
	x->reply = NULL;
	redis_cmd_pause(x, FAILOVER_PAUSE_MS);
}

/* Discovery ended without a primary: the waiting commands pause. */
static void
disc_fail(struct redis_client *c)
{
	struct cmd *x;

	c->disc_active = 0;
	c->disc_verifying = 0;
	c->suspect[0] = '\0';
	while ((x = c->disc_q.head) != NULL) {
		redis_cmdq_remove(x);
		(void)snprintf(x->errstr, sizeof(x->errstr), "%s", c->disc_err);
		redis_cmd_pause(x, FAILOVER_PAUSE_MS);
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
	redis_node_retire(n);
	redis_node_set_addr(n, host, port);
	c->disc_verifying = 1;
	while ((x = c->disc_q.head) != NULL) {
		redis_cmdq_remove(x);
		redis_node_submit(n, x);
		if (!c->disc_verifying)
			break; /* failed at once: handled already */
	}
	if (c->disc_verifying && n->st == NODE_IDLE &&
	    redis_node_connect(n) != 0) {
		char err[ERRSTR_MAX];

		(void)snprintf(err, sizeof(err), "%s", n->errstr);
		redis_node_fail(n, err);
	}
}

/* SENTINEL get-master-addr-by-name came back (or not). */
void
redis_sentinel_answer(struct cmd *x)
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
		/* an answer says more than another one's silence: it stays */
		if (r != NULL || !c->disc_answered)
			(void)snprintf(c->disc_err, sizeof(c->disc_err),
			    "sentinel %s:%d: %s", s->host, s->port,
			    r == NULL ? x->errstr
			        : r->type == REDIS_REPLY_NIL
			        ? "unknown master name"
			        : r->type == REDIS_REPLY_ERROR
			        ? r->str
			        : "unexpected reply");
		c->disc_answered |= r != NULL;
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
		n = c->sentinels[k] = redis_node_new(c, c->t.hosts[k].host,
		    c->t.hosts[k].port, 0);
		if (n != NULL)
			n->sentinel = 1;
	}
	if (n == NULL ||
	    (x = redis_cmd_new(c, CMD_SENTINEL, (int)slice)) == NULL) {
		(void)snprintf(c->disc_err, sizeof(c->disc_err),
		    "out of memory");
		disc_fail(c);
		return;
	}
	x->sentinel_idx = k;
	redis_node_submit(n, x);
}

void
redis_sentinel_start(struct redis_client *c)
{
	if (c->disc_active || c->t.nhosts == 0)
		return;
	c->disc_active = 1;
	c->disc_verifying = 0;
	c->disc_asked = 0;
	c->disc_answered = 0;
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
void
redis_sentinel_primary_failed(struct redis_client *c, const char *err)
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
			redis_cmdq_remove(x);
			redis_cmdq_push(&c->disc_q, x);
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
void
redis_sentinel_suspect(struct redis_client *c)
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
	redis_sentinel_start(c);
}
