/*
 * charge.c - the /charge use case: check the request, claim its key, call
 * the provider, spill a large body, record the outcome, answer; or replay
 * what was recorded. Fail closed: the provider is called only after a
 * successful claim.
 *
 * A request is a small state machine. Each wait (a Redis reply, the
 * provider's latency, a Prefer: wait pause, a spill file on the worker
 * pool) ends in a callback named for the step it completes; the steps read
 * top to bottom:
 *
 *   charge_handle ─ check ─ claim_send ─▶ on_claim_reply ─┬─ replay / 409 / 422 / 503
 *                                 ▲            │ in progress, Prefer: wait
 *                                 └─ on_wait_timer
 *                                              ▼ claimed
 *   provider_start ─▶ on_provider_done ─ render ─▶ [on_spill_written] ─
 *   record_send ─▶ on_record_reply ─ answer ─ charge_finish
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge.h"
#include "charge_answer.h"
#include "clock.h"
#include "digest.h"
#include "headers.h"
#include "idem.h"
#include "log.h"
#include "metrics.h"
#include "provider.h"
#include "spill.h"

static void claim_send(struct charge_ctx *cx);
static void record_send(struct charge_ctx *cx);

static void
on_ctx_closed(uv_handle_t *h)
{
	struct charge_ctx *cx = h->data;

	idem_record_free(&cx->out);
	idem_record_free(&cx->replay);
	free(cx->canon);
	charge_params_free(&cx->params);
	free(cx);
}

/* The response is complete: hand it over, then free the context. */
static void
charge_finish(struct charge_ctx *cx)
{
	exchange_finish(cx->x);
	cx->x = NULL;
	uv_close((uv_handle_t *)&cx->timer, on_ctx_closed);
}

/* --- replay: a recorded outcome, its spilled body read off the loop ---- */

static void
spill_read_work(uv_work_t *req)
{
	struct charge_ctx *cx = req->data;
	struct idem_record *rec = &cx->replay;

	cx->io_rc =
	    spill_read(cx->w->cfg->spill_dir, rec->body_file, rec->body_len,
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
	answer_replay_body(cx);
	charge_finish(cx);
}

/* Answers with rec (moved into cx), reading a spilled body first. */
static void
replay(struct charge_ctx *cx, struct idem_record *rec)
{
	cx->replay = *rec;
	rec->body = NULL; /* ownership moves to cx */
	if (cx->replay.body_file[0] == '\0') {
		answer_replay_body(cx);
		charge_finish(cx);
		return;
	}
	cx->work.data = cx;
	if (uv_queue_work(cx->w->loop, &cx->work, spill_read_work,
	        on_spill_read) != 0) {
		cx->io_rc = SPILL_READ_RESOURCES;
		(void)snprintf(cx->io_err, sizeof(cx->io_err),
		    "cannot queue the spill read");
		answer_replay_body(cx);
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
	answer_unavailable(cx,
	    "The idempotency store is unavailable. "
	    "Nothing was charged; retry with the same key.",
	    retry_s);
	charge_finish(cx);
}

/* After a lapse the key came back to us: give it up, ask for a retry. */
static void
on_release_after_lapse(struct idem_result *res, void *arg)
{
	struct charge_ctx *cx = arg;

	(void)res;
	answer_unavailable(cx,
	    "This request was held up past its claim "
	    "on the key before the payment provider charged; nothing "
	    "was charged. Retry with the same key.",
	    RETRY_AFTER_UNAVAILABLE_S);
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
	    now_mono_us() - cx->claim_us <
	        500LL * cx->w->cfg->redis_timeout_ms &&
	    idem_release(cx->w->redis, cx->rkey, cx->owner,
	        on_release_after_error, cx) == 0)
		return;
	answer_unavailable(cx,
	    "The idempotency store is unavailable. "
	    "Nothing was charged; retry with the same key.",
	    res->outcome_unknown ? claim_left_s(cx)
	                         : RETRY_AFTER_UNAVAILABLE_S);
	charge_finish(cx);
}

/* --- the provider ------------------------------------------------------- */

/*
 * The charge must be recorded while the claim still holds the key, so the
 * provider refuses to charge past the claim's life less the time a record
 * may take (config_record_margin_ms: with replicas, its WAIT too).
 */
static long long
charge_deadline_us(const struct charge_ctx *cx)
{
	const struct config *cfg = cx->w->cfg;
	long long lock_ms = 1000LL * cfg->lock_ttl_s;

	return cx->claim_us + 1000LL * (lock_ms - config_record_margin_ms(cfg));
}

static void
spill_write_work(uv_work_t *req)
{
	struct charge_ctx *cx = req->data;
	struct idem_record *out = &cx->out;

	cx->io_rc = spill_write(cx->w->cfg->spill_dir, out->body, out->body_len,
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

/* The provider answered (its latency was a timer of the loop). */
static void
on_provider_done(uv_timer_t *t)
{
	struct charge_ctx *cx = t->data;
	const struct config *cfg = cx->w->cfg;
	const char *rid = cx->x->req.request_id;

	if (provider_complete(cfg, &cx->w->ledger_fd, cx->principal, cx->key,
	        cx->keylen, cx->params.amount, cx->params.currency,
	        charge_deadline_us(cx), &cx->pr) != 0) {
		log_error(rid, "provider ledger %s: write failed",
		    cfg->provider_ledger);
		cx->pr.outcome = PROV_ERROR;
	}
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
	if (render_outcome(cx) != 0) {
		/*
		 * Out of memory after the provider ran. The claim is kept (a
		 * release would let a retry call the provider at once): it
		 * lapses after lock_ttl_s, and the retry then gets the same
		 * charge from the idempotent provider.
		 */
		log_error(rid, "cannot render the outcome of %s", cx->rkey);
		response_problem(&cx->x->resp, PROB_INTERNAL, NULL, NULL);
		(void)response_header(&cx->x->resp, "Retry-After", "%lld",
		    claim_left_s(cx));
		charge_finish(cx);
		return;
	}
	if (cx->out.body_len > (size_t)cfg->spill_threshold_bytes) {
		/* write, fsync, rename: on the worker pool, never the loop */
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

/* The key is ours: the provider takes its time on a timer. */
static void
provider_start(struct charge_ctx *cx)
{
	int delay_ms = 0;

	metrics_inc(MC_PROVIDER_CALLS);
	if (provider_prepare(cx->w->cfg, cx->principal, cx->key, cx->keylen,
	        cx->fingerprint, cx->params.source, &cx->pr, &delay_ms) != 0)
		cx->pr.outcome = PROV_ERROR;
	(void)uv_timer_start(&cx->timer, on_provider_done, (uint64_t)delay_ms,
	    0);
}

/* --- record -------------------------------------------------------------- */

static void
on_record_reply(struct idem_result *res, void *arg)
{
	struct charge_ctx *cx = arg;
	const struct config *cfg = cx->w->cfg;
	const char *rid = cx->x->req.request_id;
	struct idem_record *out = &cx->out;
	enum idem_status st = res->st;

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
	switch (st) {
	case IDEM_RECORDED: answer_recorded(cx); break;
	case IDEM_NOT_DURABLE:
		/*
		 * Recorded, but a failover may still lose it: the retry
		 * replays it, or executes again and gets the same charge from
		 * the idempotent provider. The spill file stays: the record
		 * names it.
		 */
		metrics_inc(MC_NOT_DURABLE);
		log_warn(rid, "record of %s: %s", cx->rkey, res->errstr);
		response_problem(&cx->x->resp, PROB_NOT_DURABLE,
		    "The outcome was "
		    "recorded, but not acknowledged by enough Redis replicas. "
		    "Retry with the same key.",
		    NULL);
		(void)response_header(&cx->x->resp, "Retry-After", "%d",
		    RETRY_AFTER_UNAVAILABLE_S);
		break;
	case IDEM_REPLAY:
		/* another attempt recorded first: first recording wins */
		replay(cx, &res->rec);
		return;
	case IDEM_FENCED:
		log_warn(rid, "claim of %s taken over while the provider ran",
		    cx->rkey);
		answer_in_progress(cx, res->cf.claim_created_ms);
		break;
	case IDEM_MISMATCH:
		/* our claim lapsed and a different request took the key */
		log_warn(rid,
		    "claim of %s lapsed; the key now holds another "
		    "request",
		    cx->rkey);
		answer_mismatch(cx, res->cf.params);
		break;
	default:
		/*
		 * Unknown whether the record was written: keep the spill file
		 * (the GC removes it once no record can name it). If it was
		 * not, our claim holds the key until it lapses.
		 */
		answer_redis_error(cx, res->errstr,
		    "The outcome could not be recorded. "
		    "Retry with the same key after the delay in Retry-After.",
		    claim_left_s(cx));
		break;
	}
	charge_finish(cx);
}

static void
record_send(struct charge_ctx *cx)
{
	const struct config *cfg = cx->w->cfg;
	struct idem_result res;

	cx->ttl_ms = 1000LL *
	    (cx->prob == PROB_NONE ? cfg->completed_ttl_s : cfg->failed_ttl_s);
	cx->now_ms = now_wall_ms();
	if (idem_record(cx->w->redis, cx->rkey, cx->owner, cx->fingerprint,
	        cx->params_hex, &cx->out, cx->ttl_ms, cx->now_ms,
	        on_record_reply, cx) == 0)
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
 * asking again (Prefer: wait), or the key is ours. After a lapse (execute
 * 0) a key that came back to us is given back instead, so a request calls
 * the provider at most once.
 */
static void
on_claim_reply(struct idem_result *res, void *arg)
{
	struct charge_ctx *cx = arg;
	long long left_ms;

	switch (res->st) {
	case IDEM_CLAIMED:
		if (cx->execute) {
			provider_start(cx);
			return;
		}
		if (idem_release(cx->w->redis, cx->rkey, cx->owner,
		        on_release_after_lapse, cx) == 0)
			return;
		on_release_after_lapse(res, cx);
		return;
	case IDEM_REPLAY: replay(cx, &res->rec); return;
	case IDEM_IN_PROGRESS:
		left_ms = (cx->wait_deadline_us - now_mono_us()) / 1000;
		if (cx->execute && left_ms > 0) {
			(void)uv_timer_start(&cx->timer, on_wait_timer,
			    (uint64_t)(cx->pause_ms < left_ms ? cx->pause_ms
			                                      : left_ms),
			    0);
			if (cx->pause_ms < WAIT_POLL_MAX_MS)
				cx->pause_ms *= 2;
			return;
		}
		answer_in_progress(cx, res->cf.claim_created_ms);
		break;
	case IDEM_MISMATCH: answer_mismatch(cx, res->cf.params); break;
	default: claim_failed(cx, res); return;
	}
	charge_finish(cx);
}

static void
claim_send(struct charge_ctx *cx)
{
	const struct config *cfg = cx->w->cfg;
	struct idem_result res;

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
		response_problem(&x->resp, PROB_INTERNAL, NULL, NULL);
		exchange_finish(x);
		return;
	}
	cx->x = x;
	cx->w = x->w;
	cx->execute = 1;
	cx->pause_ms = WAIT_POLL_FIRST_MS;
	(void)uv_timer_init(x->w->loop, &cx->timer);
	cx->timer.data = cx;
	if (charge_check(cx) != 0) {
		charge_finish(cx);
		return;
	}
	cx->canon = validate_canonical_text(&cx->params, &cx->canonlen);
	if (cx->canon == NULL ||
	    charge_fingerprint(cx->canon, cx->canonlen, cx->principal,
	        cx->fingerprint) != 0 ||
	    charge_param_digests(cx->canon, cx->canonlen, cx->params_hex) !=
	        0 ||
	    digest_random_hex(cx->owner, TOKEN_HEX_LEN / 2) != 0 ||
	    idem_key_name(cx->rkey, sizeof(cx->rkey), cfg->key_prefix,
	        cx->principal, cx->key, cx->keylen) < 0) {
		response_problem(&x->resp, PROB_INTERNAL, NULL, NULL);
		charge_finish(cx);
		return;
	}
	wait_s = prefer_wait_parse(x->req.prefer);
	if (wait_s > cfg->max_wait_s)
		wait_s = cfg->max_wait_s;
	if (wait_s > 0)
		cx->wait_deadline_us = now_mono_us() + 1000000LL * wait_s;
	claim_send(cx);
}
