/*
 * charge.c - the /charge use case: check the request, claim its key, call
 * the provider, spill a large body, record the outcome, answer; or replay
 * what was recorded. Fail closed: the provider is called only after a
 * successful claim. The request's state (struct charge_ctx) and every
 * transition live here; the answers are rendered by charge_answer.c.
 *
 * A request is a small state machine. Each wait (a Redis reply, the
 * provider, a Prefer: wait pause, a spill file on the I/O thread pool) ends in
 * a callback named for the step it completes; the steps read top to
 * bottom:
 *
 *   charge_handle ─ charge_check ─ claim_send ─▶ on_claim_reply ─┬─ replay / 409 / 422 / 503
 *                                 ▲            │ in progress, Prefer: wait
 *                                 └─ on_wait_timer
 *                                              ▼ claimed, or resumed (unknown)
 *   provider_start ─▶ on_provider_done ─ render ─▶ [on_spill_written |
 *   on_pending_added (unknown)] ─ record_send ─▶ on_record_reply ─ answer ─
 *   charge_finish
 *
 * The step a request is in is cx->state, changed in one place,
 * charge_set_state, which asserts every change against charge_allowed:
 *
 *   CHECK ─▶ CLAIM ─▶ [QUIET] ─▶ PROVIDER ─▶ [SPILL | INDEX] ─▶ RECORD ─▶ [REPLAY] ─▶ ANSWER
 *            ▲ │ ▲                   │
 *     WAIT ──┘ │ └───────────────────┘ the claim lapsed: read the key's state again
 *   (Prefer:   ├─▶ REPLAY, RELEASE ─▶ ANSWER
 *    wait) ◀───┘
 *
 * QUIET: a retry that took an unknown outcome over past the execute window
 * probes the provider read-only, after waiting until no earlier delivery
 * can be in flight (completer_settle_step).
 *
 * and every step may end in ANSWER when it answers at once (a refusal, an
 * error, 409, 422, 503).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge.h"
#include "charge_answer.h"
#include "clock.h"
#include "completer.h"
#include "digest.h"
#include "headers.h"
#include "idem.h"
#include "log.h"
#include "metrics.h"
#include "provider.h"
#include "spill.h"
#include "worker.h"

/* The step a request is in: what it waits for (see charge_set_state). */
enum charge_state {
	CS_CHECK, /* checking the request (nothing sent yet) */
	CS_CLAIM, /* the claim script */
	CS_WAIT,  /* Prefer: wait, a pause before claiming again */
	CS_QUIET, /* resumed: waiting until no earlier delivery is in flight */
	CS_PROVIDER, /* the provider call */
	CS_SPILL,    /* writing a large body on the I/O thread pool */
	CS_INDEX,    /* naming an unknown outcome in the index */
	CS_RECORD,   /* the record script */
	CS_REPLAY,   /* reading a recorded outcome's spilled body */
	CS_RELEASE,  /* giving back a claim that will not be executed */
	CS_ANSWER,   /* answered, handed over: the context closes */
	CS_NSTATES
};

/* charge_set_state's map: charge_allowed[from] has bit `to`. */
#define B(s) (1u << (s))
static const unsigned charge_allowed[CS_NSTATES] = {
	[CS_CHECK] = B(CS_CLAIM) | B(CS_ANSWER),
	[CS_CLAIM] = B(CS_WAIT) | B(CS_QUIET) | B(CS_PROVIDER) | B(CS_REPLAY) |
	    B(CS_RELEASE) | B(CS_ANSWER),
	[CS_WAIT] = B(CS_CLAIM),
	[CS_QUIET] = B(CS_PROVIDER),
	[CS_PROVIDER] = B(CS_CLAIM) | B(CS_SPILL) | B(CS_INDEX) | B(CS_RECORD) |
	    B(CS_ANSWER),
	[CS_SPILL] = B(CS_RECORD),
	[CS_INDEX] = B(CS_RECORD),
	[CS_RECORD] = B(CS_REPLAY) | B(CS_ANSWER),
	[CS_REPLAY] = B(CS_ANSWER),
	[CS_RELEASE] = B(CS_ANSWER),
	[CS_ANSWER] = 0,
};
#undef B

/* Everything one /charge request carries between its steps. */
struct charge_ctx {
	struct exchange *x; /* NULL once finished */
	struct worker *w;
	const struct config *cfg; /* the one in force at the start (reloads) */
	enum charge_state state;  /* only charge_set_state changes it */
	const char *principal;
	char key[IDEM_KEY_MAX + 1];
	size_t keylen;
	struct charge_params params;
	char fingerprint[65];
	char params_hex[CHARGE_PARAMS_HEX_LEN + 1]; /* per-parameter digests */
	char owner[TOKEN_HEX_LEN + 1];
	char rkey[IDEM_RKEY_MAX];
	long long claim_us;         /* monotonic time the last claim was sent */
	long long wait_deadline_us; /* Prefer: wait; 0: none */
	long long pause_ms;         /* before the next claim while waiting */
	int execute; /* 0 after a lapse: a claim is given back, not run */
	int resumed; /* the key held an unknown outcome we took over */
	struct idem_resume taken; /* resumed: its created_ms and quiet_ms */
	uv_timer_t timer; /* Prefer: wait pauses, the settle step's quiet */
	uv_work_t work;   /* a spill write or read on the I/O thread pool */
	struct provider_result pr;
	struct idem_record out;    /* the outcome to record */
	enum problem prob;         /* out's problem, PROB_NONE for a charge */
	long long ttl_ms, now_ms;  /* of the record sent */
	struct idem_record replay; /* a recorded outcome to answer with */
	int io_rc;                 /* the pool's spill_write/spill_read */
	char *io_body;             /* spill_read's body (malloc'd) */
	char io_err[160];
};

static void claim_send(struct charge_ctx *cx);
static void record_send(struct charge_ctx *cx);

/*
 * The one place a request's step changes: only along charge_allowed, and
 * the provider is called only by a request that may execute (not after a
 * lapse) and still has its exchange.
 */
static void
charge_set_state(struct charge_ctx *cx, enum charge_state to)
{
	(void)charge_allowed; /* read by the asserts only (none with NDEBUG) */
	assert(cx->state < CS_NSTATES && to < CS_NSTATES);
	assert((charge_allowed[cx->state] & (1u << to)) != 0);
	assert(cx->x != NULL);
	assert(to != CS_PROVIDER || cx->execute);
	cx->state = to;
}

static void
on_ctx_closed(uv_handle_t *h)
{
	struct charge_ctx *cx = h->data;

	idem_record_free(&cx->out);
	idem_record_free(&cx->replay);
	free(cx->io_body);
	charge_params_free(&cx->params);
	free(cx);
}

/* The response is complete: hand it over, then free the context. */
static void
charge_finish(struct charge_ctx *cx)
{
	charge_set_state(cx, CS_ANSWER);
	exchange_finish(cx->x);
	cx->x = NULL;
	uv_close((uv_handle_t *)&cx->timer, on_ctx_closed);
}

/*
 * Seconds until our claim lapses by itself (at least 1): when the claim or
 * the record may have been written but we cannot tell, the key stays
 * in_progress under our owner until then, and a retry before it gets 409.
 */
static long long
claim_left_s(const struct charge_ctx *cx)
{
	long long left_ms = 1000LL * cx->cfg->lock_ttl_s -
	    (now_mono_us() - cx->claim_us) / 1000;

	return left_ms <= 1000 ? 1 : (left_ms + 999) / 1000;
}

/* Counts a Redis error and logs why (the request's id). */
static void
redis_error_note(struct charge_ctx *cx, const char *why)
{
	metrics_inc(MC_REDIS_ERRORS);
	log_warn(cx->x->req.request_id, "idempotency store unavailable: %s",
	    why != NULL ? why : "?");
}

/* --- the check ----------------------------------------------------------- */

/*
 * Checks method, API key, Idempotency-Key, content type and body; fills
 * cx->principal, key and params. 0 when the request may claim its key,
 * else -1 with the refusal in the response.
 */
static int
charge_check(struct charge_ctx *cx)
{
	const struct request *req = &cx->x->req;
	struct response *resp = &cx->x->resp;
	const struct config *cfg = cx->cfg;
	struct validation v;

	if (strcmp(req->method, "POST") != 0) {
		answer_refusal(resp, cfg, REFUSE_METHOD, NULL);
		return -1;
	}
	cx->principal = auth_principal(cx->w->auth, req->authorization);
	if (cx->principal == NULL) {
		answer_refusal(resp, cfg, REFUSE_UNAUTHORIZED, NULL);
		return -1;
	}
	switch (idem_key_parse(req->idem_key, cx->key, &cx->keylen)) {
	case KEY_OK: break;
	case KEY_MISSING:
		answer_refusal(resp, cfg, REFUSE_MISSING_KEY, NULL);
		return -1;
	default: answer_refusal(resp, cfg, REFUSE_INVALID_KEY, NULL); return -1;
	}
	if (!content_type_is_json(req->content_type)) {
		answer_refusal(resp, cfg, REFUSE_MEDIA_TYPE, NULL);
		return -1;
	}
	switch (req->body_status) {
	case BODY_OK: break;
	case BODY_TOO_LARGE:
		answer_refusal(resp, cfg, REFUSE_TOO_LARGE, NULL);
		return -1;
	case BODY_TIMEOUT:
		answer_refusal(resp, cfg, REFUSE_BODY_TIMEOUT, NULL);
		return -1;
	default:
		v.n = 1;
		(void)snprintf(v.errors[0].field, sizeof(v.errors[0].field),
		    "body");
		(void)snprintf(v.errors[0].message, sizeof(v.errors[0].message),
		    req->body_status == BODY_SHORT
		        ? "the body is shorter than Content-Length"
		        : "Content-Length is invalid");
		answer_refusal(resp, cfg, REFUSE_INVALID, &v);
		return -1;
	}
	if (validate_charge(req->body, req->body_len, &cx->params, &v) == 0)
		return 0;
	answer_refusal(resp, cfg, REFUSE_INVALID, &v);
	return -1;
}

/* --- replay: a recorded outcome, its spilled body read off the loop ---- */

/*
 * Answers with cx->replay; a spilled body is cx->io_body as the pool's
 * spill_read left it (io_rc, io_err): 503 when the process lacked
 * resources, 500 stored-response-unavailable when the file is unsound.
 */
static void
replay_answer(struct charge_ctx *cx)
{
	struct idem_record *rec = &cx->replay;
	char *body = rec->body;

	if (rec->body_file[0] != '\0') {
		if (cx->io_rc == SPILL_READ_RESOURCES) {
			/* the file may be fine: this process is short of fds */
			log_warn(cx->x->req.request_id, "replay of %s: %s",
			    cx->rkey, cx->io_err);
			answer_text(&cx->x->resp, TEXT_STORED_BUSY,
			    RETRY_AFTER_UNAVAILABLE_S);
			return;
		}
		if (cx->io_rc != 0) {
			log_error(cx->x->req.request_id, "replay of %s: %s",
			    cx->rkey, cx->io_err);
			answer_text(&cx->x->resp, TEXT_STORED_UNREADABLE, 0);
			return;
		}
		body = cx->io_body;
		cx->io_body = NULL;
	} else
		rec->body = NULL; /* ownership moves to the response */
	answer_replay(&cx->x->resp, rec, body);
}

static void
spill_read_work(uv_work_t *req)
{
	struct charge_ctx *cx = req->data;
	struct idem_record *rec = &cx->replay;

	cx->io_rc =
	    spill_read(cx->cfg->spill_dir, rec->body_file, rec->body_len,
	        rec->body_sha256, &cx->io_body, cx->io_err, sizeof(cx->io_err));
}

static void
on_spill_read(uv_work_t *req, int status)
{
	struct charge_ctx *cx = req->data;

	if (status != 0) {
		cx->io_rc = -1;
		(void)snprintf(cx->io_err, sizeof(cx->io_err),
		    "spill read cancelled");
	}
	replay_answer(cx);
	charge_finish(cx);
}

/* Answers with rec (moved into cx), reading a spilled body first. */
static void
replay(struct charge_ctx *cx, struct idem_record *rec)
{
	charge_set_state(cx, CS_REPLAY);
	cx->replay = *rec;
	rec->body = NULL; /* ownership moves to cx */
	if (cx->replay.body_file[0] == '\0') {
		replay_answer(cx);
		charge_finish(cx);
		return;
	}
	cx->work.data = cx;
	if (uv_queue_work(cx->w->loop, &cx->work, spill_read_work,
	        on_spill_read) != 0) {
		cx->io_rc = SPILL_READ_RESOURCES;
		(void)snprintf(cx->io_err, sizeof(cx->io_err),
		    "cannot queue the spill read");
		replay_answer(cx);
		charge_finish(cx);
	}
}

/* --- releasing a claim that will not be executed ------------------------ */

/* After a failed claim: the release's own outcome sets Retry-After. */
static void
on_release_after_error(struct idem_result *res, void *arg)
{
	struct charge_ctx *cx = arg;
	long long retry_s = RETRY_AFTER_UNAVAILABLE_S;

	if (res->st == IDEM_ERR_REDIS) {
		retry_s = claim_left_s(cx);
		log_warn(cx->x->req.request_id,
		    "claim of %s may hold for %lld s: release failed: %s",
		    cx->rkey, retry_s, res->errstr);
	}
	answer_text(&cx->x->resp, TEXT_STORE_DOWN, retry_s);
	charge_finish(cx);
}

/* After a lapse the key came back to us: give it up, ask for a retry. */
static void
on_release_after_lapse(struct idem_result *res, void *arg)
{
	struct charge_ctx *cx = arg;

	(void)res;
	answer_text(&cx->x->resp, TEXT_LAPSED, RETRY_AFTER_UNAVAILABLE_S);
	charge_finish(cx);
}

/*
 * The claim failed. When it may have been written (its reply was lost),
 * the key would stay in_progress under an owner nobody uses again: since
 * the provider was not called, give it back. Only a claim that failed fast
 * (a reset, a closed connection) is worth the try: after a timeout Redis is
 * not answering, and a release would make the client wait another
 * redis_timeout_ms for nothing.
 */
static void
claim_failed(struct charge_ctx *cx, const struct idem_result *res)
{
	redis_error_note(cx, res->errstr);
	if (res->outcome_unknown &&
	    now_mono_us() - cx->claim_us < 500LL * cx->cfg->redis_timeout_ms &&
	    idem_release(cx->w->redis, cx->rkey, cx->owner,
	        on_release_after_error, cx) == 0) {
		charge_set_state(cx, CS_RELEASE);
		return;
	}
	answer_text(&cx->x->resp, TEXT_STORE_DOWN,
	    res->outcome_unknown ? claim_left_s(cx)
	                         : RETRY_AFTER_UNAVAILABLE_S);
	charge_finish(cx);
}

/* --- the provider ------------------------------------------------------- */

/*
 * The charge must be recorded while the claim still holds the key, so the
 * provider refuses to charge past the claim's life less the time a record
 * may take (config_record_margin_ms: with replicas, its WAIT too). An
 * HTTP provider also stops retrying after provider_deadline_ms.
 */
static long long
charge_deadline_us(const struct charge_ctx *cx)
{
	const struct config *cfg = cx->cfg;
	long long lock_ms = 1000LL * cfg->lock_ttl_s, end_us;

	end_us =
	    cx->claim_us + 1000LL * (lock_ms - config_record_margin_ms(cfg));
	if (cfg->provider_url[0] != '\0' &&
	    cx->claim_us + 1000LL * cfg->provider_deadline_ms < end_us)
		end_us = cx->claim_us + 1000LL * cfg->provider_deadline_ms;
	return end_us;
}

static void
spill_write_work(uv_work_t *req)
{
	struct charge_ctx *cx = req->data;
	struct idem_record *out = &cx->out;

	cx->io_rc = spill_write(cx->cfg->spill_dir, out->body, out->body_len,
	    out->body_file, out->body_sha256, cx->io_err, sizeof(cx->io_err));
}

static void
on_spill_written(uv_work_t *req, int status)
{
	struct charge_ctx *cx = req->data;

	if (status != 0 || cx->io_rc != 0) {
		/*
		 * The provider ran: record the body inline rather than give
		 * the key up. It is bounded by max_request_bytes plus the
		 * charge object.
		 */
		log_error(cx->x->req.request_id,
		    "%s: recording the body inline",
		    status != 0 ? "spill write cancelled" : cx->io_err);
		cx->out.body_file[0] = '\0';
		metrics_inc(MC_SPILL_FAILURES);
	} else
		metrics_inc(MC_SPILLS);
	record_send(cx);
}

/* Nothing waits on it: a name the index keeps too long is dropped later. */
static void
on_pending_note(struct idem_result *res, void *arg)
{
	(void)arg;
	if (res->st != IDEM_DONE)
		log_warn(NULL, "index of unknown outcomes: %s",
		    res->errstr != NULL ? res->errstr : "?");
}

/*
 * The index names an unknown record before it is written (a record the
 * index misses would wait for its client's retry); an index that failed
 * is logged, and the record written all the same.
 */
static void
on_pending_added(struct idem_result *res, void *arg)
{
	on_pending_note(res, NULL);
	record_send(arg);
}

/* The provider answered, or its attempts ran out (PROV_UNKNOWN). */
static void
on_provider_done(const struct provider_result *pr, void *arg)
{
	struct charge_ctx *cx = arg;
	const struct config *cfg = cx->cfg;
	const char *rid = cx->x->req.request_id;
	char index[KEY_PREFIX_MAX + 16];
	long long due_ms;

	cx->pr = *pr;
	if (cx->pr.decline_code == pr->decline_buf)
		cx->pr.decline_code = cx->pr.decline_buf;
	if (cx->pr.outcome == PROV_LAPSED) {
		/*
		 * Held up past the claim's life before the provider charged:
		 * nothing was charged, and another attempt may own the key.
		 * Answer what a retry would get: the key's state, read with
		 * the claim script once more, never executed again.
		 */
		log_warn(rid, "claim of %s lapsed before the provider charged",
		    cx->rkey);
		cx->execute = 0;
		claim_send(cx);
		return;
	}
	if (answer_outcome_render(&cx->pr, cx->params.canonical,
	        cx->params.canonical_len, cx->key, cx->keylen, cfg, &cx->out,
	        &cx->prob) != 0) {
		/*
		 * Out of memory after the provider ran. The claim is kept (a
		 * release would let a retry call the provider at once): it
		 * lapses after lock_ttl_s, and the retry then gets the same
		 * charge from the idempotent provider.
		 */
		log_error(rid, "cannot render the outcome of %s", cx->rkey);
		answer_text(&cx->x->resp, TEXT_INTERNAL, claim_left_s(cx));
		charge_finish(cx);
		return;
	}
	if (cx->prob == PROB_OUTCOME_UNKNOWN) {
		log_warn(rid, "outcome of %s unknown after %d attempt(s): %s",
		    cx->rkey, cx->pr.attempts, cx->pr.why);
		/* the completer's first look: as soon as a retry may come */
		due_ms = now_wall_ms() + 1000LL * atoll(cx->out.retry_after);
		charge_set_state(cx, CS_INDEX);
		if (idem_index_name(index, sizeof(index), cfg->key_prefix) >
		        0 &&
		    idem_pending_add(cx->w->redis, index, cx->rkey, due_ms,
		        on_pending_added, cx) == 0)
			return;
		record_send(cx);
		return;
	}
	if (cx->out.body_len > (size_t)cfg->spill_threshold_bytes) {
		/* write, fsync, rename: on the I/O thread pool, never the loop */
		charge_set_state(cx, CS_SPILL);
		cx->work.data = cx;
		if (uv_queue_work(cx->w->loop, &cx->work, spill_write_work,
		        on_spill_written) == 0)
			return;
		cx->io_rc = -1;
		(void)snprintf(cx->io_err, sizeof(cx->io_err),
		    "cannot queue the spill write");
		on_spill_written(&cx->work, 0);
		return;
	}
	record_send(cx);
}

static void provider_start(struct charge_ctx *cx);

static void
on_quiet_timer(uv_timer_t *t)
{
	provider_start(t->data);
}

/*
 * The key is ours (or its unknown outcome is): ask the provider. An
 * unknown outcome takes the completer's settle step (the same rule): ask
 * again within the execute window, or probe read-only after the quiet it
 * asks for (state QUIET).
 */
static void
provider_start(struct charge_ctx *cx)
{
	struct provider_result res;
	struct provider_call call;
	long long wait_ms;

	memset(&call, 0, sizeof(call));
	if (cx->resumed) {
		wait_ms = completer_settle_step(cx->cfg, &cx->taken,
		    now_wall_ms(), &call);
		/* waited once already: the probe goes now, found or not */
		if (wait_ms > 0 && cx->state != CS_QUIET) {
			charge_set_state(cx, CS_QUIET);
			(void)uv_timer_start(&cx->timer, on_quiet_timer,
			    (uint64_t)wait_ms, 0);
			return;
		}
	}
	charge_set_state(cx, CS_PROVIDER);
	metrics_inc(MC_PROVIDER_CALLS);
	provider_call_request(&call, cx->principal, cx->key, cx->keylen,
	    cx->fingerprint, &cx->params);
	call.request_id = cx->x->req.request_id;
	call.trace_id = cx->x->req.trace_id;
	call.traceparent = cx->x->req.traceparent;
	call.deadline_us = charge_deadline_us(cx);
	if (provider_charge_start(cx->w->provider, &call, on_provider_done,
	        cx) == 0)
		return;
	/*
	 * Nothing was sent: a fresh request's outcome is known, a provider
	 * error; an unknown outcome taken over stays unknown (an earlier
	 * delivery may have charged).
	 */
	memset(&res, 0, sizeof(res));
	res.outcome = cx->resumed ? PROV_UNKNOWN : PROV_ERROR;
	(void)snprintf(res.why, sizeof(res.why), "cannot start the call");
	on_provider_done(&res, cx);
}

/* --- record -------------------------------------------------------------- */

static void
on_record_reply(struct idem_result *res, void *arg)
{
	struct charge_ctx *cx = arg;
	const struct config *cfg = cx->cfg;
	const char *rid = cx->x->req.request_id;
	struct idem_record *out = &cx->out;
	enum idem_status st = res->st;
	char index[KEY_PREFIX_MAX + 16];

	/*
	 * Our spill file is named by no record unless ours was written (a
	 * record re-sent after a lost reply answers RECORDED too, so a file
	 * that record names is never removed here).
	 */
	if (out->body_file[0] != '\0' &&
	    (st == IDEM_FENCED || st == IDEM_MISMATCH ||
	        (st == IDEM_REPLAY &&
	            strcmp(res->rec.body_file, out->body_file) != 0)))
		(void)spill_remove(cfg->spill_dir, out->body_file);
	/* an unknown outcome we settled leaves the index */
	if (cx->resumed && cx->prob != PROB_OUTCOME_UNKNOWN &&
	    (st == IDEM_RECORDED || st == IDEM_NOT_DURABLE) &&
	    idem_index_name(index, sizeof(index), cfg->key_prefix) > 0)
		(void)idem_pending_remove(cx->w->redis, index, cx->rkey,
		    on_pending_note, NULL);
	switch (st) {
	case IDEM_RECORDED:
		answer_recorded(&cx->x->resp, out, cx->prob,
		    cx->now_ms + cx->ttl_ms, cx->pr.replayed);
		break;
	case IDEM_NOT_DURABLE:
		/*
		 * Recorded, but a failover may still lose it: the retry
		 * replays it, or executes again and gets the same charge from
		 * the idempotent provider. The spill file stays: the record
		 * names it.
		 */
		metrics_inc(MC_NOT_DURABLE);
		log_warn(rid, "record of %s: %s", cx->rkey, res->errstr);
		answer_text(&cx->x->resp, TEXT_NOT_DURABLE,
		    RETRY_AFTER_UNAVAILABLE_S);
		break;
	case IDEM_REPLAY:
		/* another attempt recorded first: first recording wins */
		replay(cx, &res->rec);
		return;
	case IDEM_FENCED:
		log_warn(rid, "claim of %s taken over while the provider ran",
		    cx->rkey);
		answer_in_progress(&cx->x->resp, cfg, res->cf.claim_created_ms);
		break;
	case IDEM_MISMATCH:
		/* our claim lapsed and a different request took the key */
		log_warn(rid,
		    "claim of %s lapsed; the key now holds another request",
		    cx->rkey);
		answer_mismatch(&cx->x->resp, res->cf.params, cx->params_hex);
		break;
	default:
		/*
		 * Unknown whether the record was written: keep the spill file
		 * (the GC removes it once no record can name it). If it was
		 * not, our claim holds the key until it lapses.
		 */
		redis_error_note(cx, res->errstr);
		answer_text(&cx->x->resp, TEXT_NOT_RECORDED, claim_left_s(cx));
		break;
	}
	charge_finish(cx);
}

static void
record_send(struct charge_ctx *cx)
{
	const struct config *cfg = cx->cfg;
	struct idem_result res;
	int unknown = cx->prob == PROB_OUTCOME_UNKNOWN;

	charge_set_state(cx, CS_RECORD);
	/* an unknown outcome lives as long as a charge would */
	cx->ttl_ms = 1000LL *
	    (cx->prob == PROB_NONE || unknown ? cfg->completed_ttl_s
	                                      : cfg->failed_ttl_s);
	cx->now_ms = now_wall_ms();
	if (idem_record_send(cx->w->redis, cx->rkey, cx->owner, cx->fingerprint,
	        cx->params_hex, &cx->out, unknown ? cx->params.canonical : NULL,
	        cx->ttl_ms, cx->now_ms, on_record_reply, cx) == 0)
		return;
	memset(&res, 0, sizeof(res));
	res.st = IDEM_ERR_REDIS;
	res.errstr = "record: out of memory";
	on_record_reply(&res, cx);
}

/* --- claim --------------------------------------------------------------- */

static void
on_wait_timer(uv_timer_t *t)
{
	claim_send(t->data);
}

/*
 * What the claim script found: the replay, 409, 422 or 503, a pause before
 * asking again (Prefer: wait), or the key is ours (claimed, or its unknown
 * outcome taken over: resumed). After a lapse (execute 0) a key that came
 * back to us is given back instead, so a request calls the provider at
 * most once.
 */
static void
on_claim_reply(struct idem_result *res, void *arg)
{
	struct charge_ctx *cx = arg;
	long long left_ms;

	switch (res->st) {
	case IDEM_RESUMED:
	case IDEM_CLAIMED:
		if (cx->execute) {
			cx->resumed = res->st == IDEM_RESUMED;
			if (cx->resumed) {
				cx->taken = res->resume;
				cx->taken.request = NULL; /* not the claim's */
			}
			provider_start(cx);
			return;
		}
		if (res->st == IDEM_CLAIMED &&
		    idem_release(cx->w->redis, cx->rkey, cx->owner,
		        on_release_after_lapse, cx) == 0) {
			charge_set_state(cx, CS_RELEASE);
			return;
		}
		on_release_after_lapse(res, cx);
		return;
	case IDEM_REPLAY: replay(cx, &res->rec); return;
	case IDEM_IN_PROGRESS:
		left_ms = (cx->wait_deadline_us - now_mono_us()) / 1000;
		if (cx->execute && left_ms > 0) {
			charge_set_state(cx, CS_WAIT);
			(void)uv_timer_start(&cx->timer, on_wait_timer,
			    (uint64_t)(cx->pause_ms < left_ms ? cx->pause_ms
			                                      : left_ms),
			    0);
			if (cx->pause_ms < WAIT_POLL_MAX_MS)
				cx->pause_ms *= 2;
			return;
		}
		answer_in_progress(&cx->x->resp, cx->cfg,
		    res->cf.claim_created_ms);
		break;
	case IDEM_MISMATCH:
		answer_mismatch(&cx->x->resp, res->cf.params, cx->params_hex);
		break;
	default: claim_failed(cx, res); return;
	}
	charge_finish(cx);
}

static void
claim_send(struct charge_ctx *cx)
{
	const struct config *cfg = cx->cfg;
	struct idem_result res;

	charge_set_state(cx, CS_CLAIM);
	cx->claim_us = now_mono_us();
	if (idem_claim(cx->w->redis, cx->rkey, cx->fingerprint, cx->params_hex,
	        cx->owner, now_wall_ms(), 1000LL * cfg->lock_ttl_s,
	        on_claim_reply, cx) == 0)
		return;
	memset(&res, 0, sizeof(res));
	res.st = IDEM_ERR_REDIS;
	res.errstr = "claim: out of memory";
	on_claim_reply(&res, cx);
}

/* --- the start ----------------------------------------------------------- */

void
charge_handle(struct exchange *x)
{
	const struct config *cfg = x->w->cfg;
	struct charge_ctx *cx;
	int wait_s;

	if ((cx = calloc(1, sizeof(*cx))) == NULL) {
		answer_text(&x->resp, TEXT_INTERNAL, 0);
		exchange_finish(x);
		return;
	}
	cx->x = x;
	cx->w = x->w;
	cx->cfg = x->w->cfg;
	cx->state = CS_CHECK;
	cx->execute = 1;
	cx->pause_ms = WAIT_POLL_FIRST_MS;
	(void)uv_timer_init(x->w->loop, &cx->timer);
	cx->timer.data = cx;
	if (charge_check(cx) != 0) {
		charge_finish(cx);
		return;
	}
	if (charge_fingerprint(cx->params.canonical, cx->params.canonical_len,
	        cx->principal, cx->fingerprint) != 0 ||
	    charge_param_digests(cx->params.canonical, cx->params.canonical_len,
	        cx->params_hex) != 0 ||
	    digest_random_hex(cx->owner, TOKEN_HEX_LEN / 2) != 0 ||
	    idem_key_name(cx->rkey, sizeof(cx->rkey), cfg->key_prefix,
	        cx->principal, cx->key, cx->keylen) < 0) {
		answer_text(&x->resp, TEXT_INTERNAL, 0);
		charge_finish(cx);
		return;
	}
	wait_s = prefer_wait_parse(x->req.prefer);
	if (wait_s > cfg->max_wait_s)
		wait_s = cfg->max_wait_s;
	if (wait_s > 0)
		cx->wait_deadline_us = now_mono_us() + 1000LL * 1000 * wait_s;
	claim_send(cx);
}
