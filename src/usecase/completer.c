/*
 * completer.c - one record at a time: due ─ resume ─ provider ─ [pending
 * add, if still unknown] ─ record ─ [pending remove, if settled] ─ next.
 * Every step ends in a callback named for it. The settle step (ask again,
 * or probe read-only after the execute window) is completer_settle_step, which a retry
 * that takes an unknown record over (charge.c) takes too.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge_answer.h"
#include "clock.h"
#include "completer.h"
#include "digest.h"
#include "idem.h"
#include "log.h"
#include "metrics.h"
#include "provider_wire.h"
#include "settle.h"
#include "validate.h"

/* What the completer waits for (see completer_set_state). */
enum completer_state {
	CP_IDLE,     /* nothing out: the next tick may start a batch */
	CP_DUE,      /* asking the index for the records that are due */
	CP_RESUME,   /* taking a record over (resume.lua) */
	CP_QUIET,    /* waiting until no earlier delivery can execute */
	CP_PROVIDER, /* the provider call: a re-send or a probe */
	CP_INDEX,    /* naming a still unknown record's next look */
	CP_RECORD,   /* the record script */
	CP_FORGET,   /* removing a settled record from the index */
	CP_NSTATES
};

#define B(s) (1u << (s))
/* completer_set_state's map: completer_allowed[from] has bit `to`. */
static const unsigned completer_allowed[CP_NSTATES] = {
	[CP_IDLE] = B(CP_DUE),
	[CP_DUE] = B(CP_RESUME) | B(CP_IDLE),
	/* RESUME to RESUME: the record was not ours to take, the next one */
	[CP_RESUME] = B(CP_QUIET) | B(CP_PROVIDER) | B(CP_FORGET) |
	    B(CP_RESUME) | B(CP_IDLE),
	[CP_QUIET] = B(CP_PROVIDER) | B(CP_RESUME) | B(CP_IDLE),
	[CP_PROVIDER] = B(CP_INDEX) | B(CP_RECORD) | B(CP_RESUME) | B(CP_IDLE),
	[CP_INDEX] = B(CP_RECORD),
	[CP_RECORD] = B(CP_FORGET) | B(CP_RESUME) | B(CP_IDLE),
	[CP_FORGET] = B(CP_RESUME) | B(CP_IDLE),
};
#undef B

struct completer {
	enum completer_state state; /* only completer_set_state changes it */
	uv_timer_t tick;
	uv_timer_t quiet; /* the settle step's wait before a probe */
	long long quiet_wait_ms;
	int handles; /* tick and quiet, not yet closed */
	const struct config *cfg;
	struct redis_client *redis;
	struct provider *provider;
	char index[KEY_PREFIX_MAX + 16];
	long steps[CONFIG_SCHEDULE_MAX];
	int nsteps;
	int stopped; /* completer_stop: finish, start nothing */
	int closed;  /* both timers closed: freed once idle */
	/* the batch */
	char *names[IDEM_DUE_MAX];
	size_t n, i;
	/* the record in hand */
	char principal[PRINCIPAL_MAX + 1];
	char key[IDEM_KEY_MAX + 1];
	size_t keylen;
	char owner[TOKEN_HEX_LEN + 1];
	struct idem_resume rs;
	struct charge_params params;
	struct idem_record out;
	enum problem prob;
};

static void item_next(struct completer *cp);

static void
completer_set_state(struct completer *cp, enum completer_state to)
{
	(void)completer_allowed; /* read by the asserts only */
	assert(cp->state < CP_NSTATES && to < CP_NSTATES);
	assert((completer_allowed[cp->state] & (1u << to)) != 0);
	/* a stopped completer starts nothing new: no batch, no call */
	assert(!cp->stopped || (to != CP_DUE && to != CP_PROVIDER));
	cp->state = to;
}

static void
item_clear(struct completer *cp)
{
	free(cp->rs.request);
	cp->rs.request = NULL;
	charge_params_free(&cp->params);
	memset(&cp->params, 0, sizeof(cp->params));
	idem_record_free(&cp->out);
}

static void
batch_clear(struct completer *cp)
{
	size_t i;

	for (i = 0; i < cp->n; i++)
		free(cp->names[i]);
	cp->n = cp->i = 0;
	item_clear(cp);
}

/*
 * Nothing is out any more. A stopped completer is freed here when its
 * timer already closed: the Redis client may call back on the loop's turn
 * after the stop (redis.h), so the memory lives until the last callback.
 * cp may be freed on return.
 */
static void
completer_idle(struct completer *cp)
{
	batch_clear(cp);
	if (cp->state != CP_IDLE)
		completer_set_state(cp, CP_IDLE);
	if (cp->closed)
		free(cp);
}

static const char *
item_name(const struct completer *cp)
{
	return cp->names[cp->i];
}

/* A command whose outcome changes nothing for us: next record. */
static void
on_step_done(struct idem_result *res, void *arg)
{
	struct completer *cp = arg;

	if (res->st == IDEM_ERR_REDIS)
		log_warn(NULL, "completer: %s: %s", item_name(cp),
		    res->errstr != NULL ? res->errstr : "?");
	cp->i++;
	item_next(cp);
}

int
completer_index_forgets(enum idem_status st, int settled)
{
	switch (st) {
	case IDEM_RECORDED:
	case IDEM_NOT_DURABLE: return settled;
	case IDEM_REPLAY: return 1; /* settled by someone else meanwhile */
	default: return 0; /* FENCED, MISMATCH, errors: not ours to forget */
	}
}

static void
on_recorded(struct idem_result *res, void *arg)
{
	struct completer *cp = arg;
	int settled = cp->prob != PROB_OUTCOME_UNKNOWN;

	if ((res->st == IDEM_RECORDED || res->st == IDEM_NOT_DURABLE) &&
	    settled) {
		metrics_completer_settled(cp->out.state);
		log_info(NULL, "completer: %s settled %s (%d)", item_name(cp),
		    cp->out.state, cp->out.status);
	} else if (res->st == IDEM_ERR_REDIS) {
		on_step_done(res, cp);
		return;
	}
	settled = completer_index_forgets(res->st, settled);
	if (settled && !cp->stopped) {
		completer_set_state(cp, CP_FORGET);
		if (idem_pending_remove(cp->redis, cp->index, item_name(cp),
		        on_step_done, cp) == 0)
			return;
	}
	cp->i++;
	item_next(cp);
}

static void
record_send(struct completer *cp)
{
	const struct config *cfg = cp->cfg;
	int unknown = cp->prob == PROB_OUTCOME_UNKNOWN;
	long long ttl_ms = 1000LL *
	    (cp->prob == PROB_NONE || unknown ? cfg->completed_ttl_s
	                                      : cfg->failed_ttl_s);

	completer_set_state(cp, CP_RECORD);
	if (cp->stopped ||
	    idem_record_send(cp->redis, item_name(cp), cp->owner,
	        cp->rs.fingerprint, cp->rs.params, &cp->out,
	        unknown ? cp->rs.request : NULL, ttl_ms, now_wall_ms(),
	        on_recorded, cp) != 0) {
		cp->i++;
		item_next(cp);
	}
}

static void
on_pending_readded(struct idem_result *res, void *arg)
{
	struct completer *cp = arg;

	(void)res;
	record_send(cp);
}

static void
on_provider_done(const struct provider_result *pr, void *arg)
{
	struct completer *cp = arg;
	long long next_ms, proof_ms;
	int last;

	if (cp->stopped) {
		cp->i++;
		item_next(cp);
		return;
	}
	if (answer_outcome_render(pr, cp->rs.request, cp->rs.request_len,
	        cp->key, cp->keylen, cp->cfg, &cp->out, &cp->prob) != 0) {
		log_error(NULL, "completer: cannot render the outcome of %s",
		    item_name(cp));
		cp->i++;
		item_next(cp);
		return;
	}
	if (cp->prob != PROB_OUTCOME_UNKNOWN) {
		record_send(cp);
		return;
	}
	/* still unknown: when to ask next, written before the record */
	next_ms = wire_schedule_next(cp->steps, cp->nsteps, cp->rs.created_ms,
	    now_wall_ms(), &last);
	proof_ms = completer_proof_ms(cp->cfg, &cp->rs, pr->quiet_ms);
	if (proof_ms > now_wall_ms() && proof_ms < next_ms)
		next_ms = proof_ms; /* the first read that can prove absence */
	/* a read that went further down the list: on at the next tick */
	if (pr->probe_lte > 0 &&
	    (cp->rs.probe_lte == 0 || pr->probe_lte < cp->rs.probe_lte))
		next_ms = now_wall_ms() + COMPLETER_TICK_MS;
	log_warn(NULL, "completer: %s still unknown (%s); next at +%lld s",
	    item_name(cp), pr->why, (next_ms - now_wall_ms()) / 1000);
	completer_set_state(cp, CP_INDEX);
	if (idem_pending_add(cp->redis, cp->index, item_name(cp), next_ms,
	        on_pending_readded, cp) != 0)
		record_send(cp);
}

long long
completer_proof_ms(const struct config *cfg, const struct idem_resume *rs,
    long long kept_quiet_ms)
{
	struct settle_clock clk;
	long long window_end =
	    rs->created_ms + 1000LL * cfg->provider_execute_window_s;

	memset(&clk, 0, sizeof(clk));
	clk.created_ms = rs->created_ms;
	/* a call that may have sent moved the quiet to now */
	clk.quiet_ms = kept_quiet_ms > 0 ? kept_quiet_ms : now_wall_ms();
	clk.deadline_ms = cfg->provider_deadline_ms;
	if (rs->created_ms < 1)
		return 0;
	clk.quiet_ms = settle_quiet_ms(&clk) +
	    settle_execute_ms(cfg->provider_timeout_ms,
	        cfg->provider_execute_max_ms);
	return clk.quiet_ms > window_end ? clk.quiet_ms : window_end;
}

long long
completer_settle_step(const struct config *cfg, const struct idem_resume *rs,
    long long now_ms, struct provider_call *call)
{
	struct settle_clock clk;
	long long wait_ms;

	clk.now_ms = now_ms;
	clk.created_ms = rs->created_ms;
	clk.quiet_ms = rs->quiet_ms;
	clk.window_ms = 1000LL * cfg->provider_execute_window_s;
	clk.timeout_ms = cfg->provider_timeout_ms;
	clk.execute_ms = settle_execute_ms(cfg->provider_timeout_ms,
	    cfg->provider_execute_max_ms);
	clk.deadline_ms = cfg->provider_deadline_ms;
	call->resume = 1;
	call->probe = settle_step(&clk, &wait_ms) == SETTLE_PROBE;
	call->resend_until_ms =
	    call->probe ? 0 : rs->created_ms + clk.window_ms;
	call->created_ms = rs->created_ms;
	call->quiet_ms = settle_quiet_ms(&clk);
	call->probe_lte = call->probe ? rs->probe_lte : 0;
	return wait_ms;
}

/*
 * Asks the provider again, or probes it read-only (completer_settle_step). waited_ms: the
 * part of the lease already spent waiting for the quiet.
 */
static void
provider_call_start(struct completer *cp, long long waited_ms)
{
	struct provider_call call;
	long long lease_ms, budget_ms;

	lease_ms = 1000LL * cp->cfg->lock_ttl_s - cp->cfg->redis_timeout_ms;
	budget_ms = cp->cfg->provider_deadline_ms < lease_ms
	    ? cp->cfg->provider_deadline_ms
	    : lease_ms;
	memset(&call, 0, sizeof(call));
	provider_call_request(&call, cp->principal, cp->key, cp->keylen,
	    cp->rs.fingerprint, &cp->params);
	call.deadline_us = now_mono_us() + 1000LL * (budget_ms - waited_ms);
	(void)completer_settle_step(cp->cfg, &cp->rs, now_wall_ms(), &call);
	metrics_inc(MC_PROVIDER_CALLS);
	completer_set_state(cp, CP_PROVIDER);
	if (provider_charge_start(cp->provider, &call, on_provider_done, cp) !=
	    0) {
		cp->i++;
		item_next(cp);
	}
}

/* The quiet waited for: no earlier delivery can be in flight. */
static void
on_quiet(uv_timer_t *t)
{
	struct completer *cp = t->data;

	provider_call_start(cp, cp->quiet_wait_ms);
}

/*
 * The record is ours for a lease: ask the provider again, or probe it
 * (after the quiet the settle step asks for).
 */
static void
provider_ask(struct completer *cp)
{
	struct provider_call call;
	struct validation v;

	if (validate_charge(cp->rs.request, cp->rs.request_len, &cp->params,
	        &v) != 0) {
		log_error(NULL, "completer: %s: the kept request is invalid",
		    item_name(cp));
		cp->i++;
		item_next(cp);
		return;
	}
	memset(&call, 0, sizeof(call));
	cp->quiet_wait_ms =
	    completer_settle_step(cp->cfg, &cp->rs, now_wall_ms(), &call);
	if (cp->quiet_wait_ms > 0) {
		completer_set_state(cp, CP_QUIET);
		(void)uv_timer_start(&cp->quiet, on_quiet,
		    (uint64_t)cp->quiet_wait_ms, 0);
		return;
	}
	provider_call_start(cp, 0);
}

static void
on_resume_reply(struct idem_result *res, void *arg)
{
	struct completer *cp = arg;

	switch (res->st) {
	case IDEM_RESUMED:
		cp->rs = res->resume;
		res->resume.request = NULL; /* ours now */
		if (cp->stopped) {
			cp->i++;
			item_next(cp);
			return;
		}
		provider_ask(cp);
		return;
	case IDEM_SETTLED:
		/* settled by a retry, or expired: the index forgets it */
		if (cp->stopped)
			break;
		completer_set_state(cp, CP_FORGET);
		if (idem_pending_remove(cp->redis, cp->index, item_name(cp),
		        on_step_done, cp) == 0)
			return;
		break;
	case IDEM_IN_PROGRESS: break; /* a retry has it: its turn */
	default:
		log_warn(NULL, "completer: resume %s: %s", item_name(cp),
		    res->errstr != NULL ? res->errstr : "?");
		break;
	}
	cp->i++;
	item_next(cp);
}

static void
item_next(struct completer *cp)
{
	item_clear(cp);
	for (; cp->i < cp->n && !cp->stopped; cp->i++) {
		if (idem_key_split(item_name(cp), cp->cfg->key_prefix,
		        cp->principal, cp->key, &cp->keylen) != 0) {
			log_warn(NULL, "completer: %s is not a record name",
			    item_name(cp));
			continue;
		}
		if (digest_random_hex(cp->owner, TOKEN_HEX_LEN / 2) != 0)
			break;
		completer_set_state(cp, CP_RESUME);
		if (idem_resume(cp->redis, item_name(cp), cp->owner,
		        now_wall_ms(), 1000LL * cp->cfg->lock_ttl_s,
		        on_resume_reply, cp) != 0)
			break;
		return;
	}
	completer_idle(cp);
}

static void
on_due(struct idem_result *res, void *arg)
{
	struct completer *cp = arg;
	size_t i;

	if (res->st != IDEM_DONE) {
		if (!cp->stopped)
			log_warn(NULL, "completer: %s",
			    res->errstr != NULL ? res->errstr : "?");
		completer_idle(cp);
		return;
	}
	metrics_unknown_outstanding(res->due.count);
	for (i = 0; i < res->due.n; i++) {
		cp->names[i] = res->due.names[i];
		res->due.names[i] = NULL;
	}
	cp->n = res->due.n;
	res->due.n = 0;
	cp->i = 0;
	item_next(cp);
}

static void
on_tick(uv_timer_t *t)
{
	struct completer *cp = t->data;

	if (cp->state != CP_IDLE || cp->stopped)
		return;
	completer_set_state(cp, CP_DUE);
	if (idem_pending_due(cp->redis, cp->index, now_wall_ms(),
	        COMPLETER_BATCH, on_due, cp) != 0)
		completer_set_state(cp, CP_IDLE);
}

struct completer *
completer_start(uv_loop_t *loop, const struct config *cfg,
    struct redis_client *redis, struct provider *provider)
{
	struct completer *cp;
	char err[256];

	if ((cp = calloc(1, sizeof(*cp))) == NULL)
		return NULL;
	cp->cfg = cfg;
	cp->redis = redis;
	cp->provider = provider;
	if ((cp->nsteps = config_schedule_parse(cfg->completer_schedule_s,
	         cp->steps, err, sizeof(err))) < 1 ||
	    idem_index_name(cp->index, sizeof(cp->index), cfg->key_prefix) <
	        0) {
		free(cp);
		return NULL;
	}
	(void)uv_timer_init(loop, &cp->tick);
	cp->tick.data = cp;
	(void)uv_timer_init(loop, &cp->quiet);
	cp->quiet.data = cp;
	cp->handles = 2;
	(void)uv_timer_start(&cp->tick, on_tick, COMPLETER_TICK_MS,
	    COMPLETER_TICK_MS);
	return cp;
}

static void
on_tick_closed(uv_handle_t *h)
{
	struct completer *cp = h->data;

	if (--cp->handles > 0)
		return;
	cp->closed = 1;
	if (cp->state == CP_IDLE)
		completer_idle(cp);
}

void
completer_stop(struct completer *cp)
{
	if (cp == NULL)
		return;
	cp->stopped = 1;
	(void)uv_timer_stop(&cp->tick);
	if (uv_is_active((uv_handle_t *)&cp->quiet)) {
		/* a probe waited for: it never starts; the batch ends */
		(void)uv_timer_stop(&cp->quiet);
		cp->i++;
		item_next(cp);
	}
	uv_close((uv_handle_t *)&cp->tick, on_tick_closed);
	uv_close((uv_handle_t *)&cp->quiet, on_tick_closed);
}
