/*
 * webhook.c - the provider's webhook route (docs/API.md §17.5). An event
 * is verified (webhook_sig.c), claimed by its id so that a redelivery
 * changes nothing, and settles a record only when the charge is proven
 * the request's (settle_is_ours: the downstream key in its metadata, its
 * amount and currency). The steps, each a callback:
 *
 *   webhook_handle ─ check ─ signature ─ event ─▶ on_event_begun ─▶
 *   on_peeked ─┬─ unknown, proven ours ─▶ on_resumed ─ render ─▶
 *              │    on_recorded ─▶ on_index_removed ─┐
 *              ├─ settled: the same charge? [on_spill_read] ─┤
 *              └─ absent, not ours ──────────────────┴─▶ decide ─▶
 *   on_event_kept (200) | on_event_forgotten (503) ─ finish
 *
 * A settled record never changes: an event for one settled with the same
 * charge is a no-op, with another charge (or one not proven ours) a
 * provider-mismatch alert (log and metric) that leaves it alone; the
 * provider gets 200 either way (delivering it again cannot help). What
 * cannot be decided now (the request still in flight, a take-over held by
 * a retry or the completer, no record yet for a charge younger than
 * completed_ttl_s, Redis down) is answered 503 and its id not kept:
 * Stripe delivers it again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge_answer.h"
#include "clock.h"
#include "digest.h"
#include "idem.h"
#include "log.h"
#include "metrics.h"
#include "provider_wire.h"
#include "settle.h"
#include "spill.h"
#include "validate.h"
#include "webhook.h"
#include "webhook_sig.h"
#include "webhook_store.h"
#include "worker.h"

#define JSON_CTYPE "application/json"
#define TYPE_SUCCEEDED "charge.succeeded"
#define TYPE_FAILED "charge.failed"
#define PEEKS_MAX 3 /* a record that changes under us is read again, twice */

/* The details of the 503s that more than one step gives. */
static const char WH_STORE_DOWN[] =
    "The idempotency store is unavailable. Deliver the event again later.";
static const char WH_NO_MEMORY[] =
    "Out of memory. Deliver the event again later.";
static const char WH_STORED_BUSY[] =
    "The record's stored response cannot be read now. Deliver the event again later.";

/* What an event came to: the result label of the answer and the metric. */
enum wh_result {
	WR_SETTLED,   /* an unknown record settled with the charge */
	WR_DUPLICATE, /* the event, or its outcome, was seen before: no-op */
	WR_IGNORED,   /* not an event that settles anything */
	WR_BAD_SIGNATURE,
	WR_MALFORMED,
	WR_MISMATCH,  /* provider-mismatch: the record left alone */
	WR_NOT_FOUND, /* no record of ours for the charge */
	WR_RETRY,     /* not now: 503, delivered again */
	WR_ERROR,     /* Redis or memory: 503, delivered again */
};

/* Labels, in enum wh_result's order (metrics_webhook_results). */
static const char *const result_names[] = { "settled", "duplicate", "ignored",
	"bad_signature", "malformed", "mismatch", "not_found", "retry",
	"error" };

struct webhook_ctx {
	struct exchange *x;
	const struct config *cfg;
	struct redis_client *redis;
	const char *rid; /* the request id, for the log */
	enum wh_result result;
	const char *why; /* the 503's detail, or the mismatch's reason */
	/* the event */
	char type[32]; /* as counted: charge.succeeded, charge.failed, other */
	char event_id[WEBHOOK_EVENT_ID_MAX + 1];
	char ekey[WSTORE_EKEY_MAX];
	int event_claimed; /* this delivery holds the event's claim */
	/* the charge it carries, and what it says of itself */
	struct provider_result pr;
	long long amount;
	char currency[8];
	char seen_request[WIRE_KEY_LEN + 1]; /* metadata.charge_request */
	int has_seen_request;
	/* the request its metadata names, and that request's record */
	char principal[PRINCIPAL_MAX + 1];
	char key[IDEM_KEY_MAX + 1];
	size_t keylen;
	char rkey[IDEM_RKEY_MAX];
	char owner[TOKEN_HEX_LEN + 1];
	char fingerprint[65];
	char dkey[WIRE_KEY_LEN + 1]; /* the record's downstream key */
	struct idem_record rec;      /* a settled record, as peeked */
	int peeks;
	/* the take-over and what is recorded */
	struct idem_resume rs;
	struct idem_record out;
	enum problem prob;
	/* a settled record's spilled body, read off the loop */
	uv_work_t work;
	int io_rc;
	char *io_body;
	char io_err[128];
};

int
webhook_route_on(const struct config *cfg, const char *path)
{
	return cfg->provider_webhook_secret[0] != '\0' &&
	    strcmp(path, cfg->provider_webhook_path) == 0;
}

static void
ctx_free(struct webhook_ctx *wx)
{
	idem_record_free(&wx->rec);
	idem_record_free(&wx->out);
	free(wx->rs.request);
	free(wx->io_body);
	free(wx);
}

/* The answer is in x->resp: counted, handed over, the context freed. */
static void
finish(struct webhook_ctx *wx)
{
	struct exchange *x = wx->x;

	metrics_webhook_event(wx->type, result_names[wx->result]);
	ctx_free(wx);
	exchange_finish(x);
}

/* 200 {"received":true,"result":"..."}: the provider stops delivering. */
static void
answer_received(struct webhook_ctx *wx)
{
	char body[64];
	int n;

	n = snprintf(body, sizeof(body),
	    "{\"received\":true,\"result\":\"%s\"}", result_names[wx->result]);
	(void)response_copy_body(&wx->x->resp, 200, JSON_CTYPE, body,
	    (size_t)n);
	wx->x->resp.outcome = OUTCOME_OK;
}

/* 503 with Retry-After: the provider delivers the event again. */
static void
answer_later(struct webhook_ctx *wx)
{
	response_problem(&wx->x->resp, PROB_UNAVAILABLE, wx->why, NULL);
	(void)response_header(&wx->x->resp, "Retry-After", "%d",
	    RETRY_AFTER_UNAVAILABLE_S);
}

static void
on_event_kept(struct wstore_result *res, void *arg)
{
	struct webhook_ctx *wx = arg;

	/* not kept: a redelivery decides it again, to the same end */
	if (res->st != WSTORE_DONE)
		log_warn(wx->rid, "webhook: event %s: not kept: %s",
		    wx->event_id, res->errstr != NULL ? res->errstr : "?");
	answer_received(wx);
	finish(wx);
}

static void
on_event_forgotten(struct wstore_result *res, void *arg)
{
	struct webhook_ctx *wx = arg;

	/* not forgotten: the claim lapses after lock_ttl_s */
	if (res->st != WSTORE_DONE)
		log_warn(wx->rid, "webhook: event %s: claim not given back: %s",
		    wx->event_id, res->errstr != NULL ? res->errstr : "?");
	answer_later(wx);
	finish(wx);
}

/*
 * The event is decided (result): kept under its id so that a redelivery
 * changes nothing, then 200; or not decidable now: its claim given back,
 * then 503.
 */
static void
decide(struct webhook_ctx *wx, enum wh_result result)
{
	int later = result == WR_RETRY || result == WR_ERROR;

	wx->result = result;
	if (result == WR_MISMATCH) {
		metrics_inc(MC_PROVIDER_MISMATCH);
		log_error(wx->rid,
		    "webhook: provider-mismatch: event %s, charge %s, record %s: %s; the record is left alone",
		    wx->event_id, wx->pr.charge_id, wx->rkey, wx->why);
	} else if (later)
		log_warn(wx->rid, "webhook: event %s: %s", wx->event_id,
		    wx->why);
	if (!wx->event_claimed) {
		if (later)
			answer_later(wx);
		else
			answer_received(wx);
		finish(wx);
		return;
	}
	if (later ? wstore_event_forget(wx->redis, wx->ekey, on_event_forgotten,
	                wx)
	          : wstore_event_done(wx->redis, wx->ekey, result_names[result],
	                1000LL * WEBHOOK_EVENT_TTL_S, on_event_kept, wx)) {
		if (later)
			answer_later(wx);
		else
			answer_received(wx);
		finish(wx);
	}
}

static void
decide_later(struct webhook_ctx *wx, enum wh_result result, const char *why)
{
	wx->why = why;
	decide(wx, result);
}

static void
mismatch(struct webhook_ctx *wx, const char *why)
{
	wx->why = why;
	decide(wx, WR_MISMATCH);
}

static void peek_send(struct webhook_ctx *wx);

/* --- a settled record: the same charge, or an alert -------------------- */

/*
 * The charge a settled record names, from its body: a 201's "id", a 402's
 * "charge"; with its amount and currency (a 201's; -1 and "" for a 402).
 * 0, or -1 when the body names none.
 */
static int
settled_charge(const char *body, size_t len, int status, char *id, size_t idlen,
    long long *amount, char *currency, size_t curlen)
{
	cJSON *o = cJSON_ParseWithLength(body, len);
	const cJSON *c, *a, *cur;
	int rc = -1;

	*amount = -1;
	currency[0] = '\0';
	c = cJSON_GetObjectItemCaseSensitive(o,
	    status == 201 ? "id" : "charge");
	if (!cJSON_IsString(c) || strlen(c->valuestring) >= idlen)
		goto done;
	(void)snprintf(id, idlen, "%s", c->valuestring);
	if (status == 201) {
		a = cJSON_GetObjectItemCaseSensitive(o, "amount");
		cur = cJSON_GetObjectItemCaseSensitive(o, "currency");
		if (!cJSON_IsNumber(a) || !cJSON_IsString(cur) ||
		    a->valuedouble != (double)(long long)a->valuedouble)
			goto done;
		*amount = (long long)a->valuedouble;
		(void)snprintf(currency, curlen, "%s", cur->valuestring);
	}
	rc = 0;
done:
	cJSON_Delete(o);
	return rc;
}

/* Compares the settled record's body with the event's charge. */
static void
settled_compare(struct webhook_ctx *wx, const char *body, size_t len)
{
	const struct idem_record *rec = &wx->rec;
	char id[PROVIDER_ID_MAX], currency[8];
	long long amount;
	int completed = strcmp(rec->state, "completed") == 0;

	if ((rec->status != 201 && rec->status != 402) ||
	    settled_charge(body, len, rec->status, id, sizeof(id), &amount,
	        currency, sizeof(currency)) != 0) {
		mismatch(wx,
		    "the record settled without a charge (failed before the provider charged), and the provider reports one for its request");
		return;
	}
	if (!wx->has_seen_request || strcmp(wx->seen_request, wx->dkey) != 0) {
		mismatch(wx,
		    "the charge's metadata.charge_request is not the record's downstream key");
		return;
	}
	if (completed &&
	    (amount != wx->amount || strcmp(currency, wx->currency) != 0)) {
		mismatch(wx,
		    "the charge's amount or currency is not the record's");
		return;
	}
	if (strcmp(id, wx->pr.charge_id) != 0) {
		mismatch(wx,
		    "the record settled with another charge: the provider holds two for one request");
		return;
	}
	if (completed != (wx->pr.outcome == PROV_SUCCEEDED)) {
		mismatch(wx,
		    "the record settled the other way (completed against failed) with this charge");
		return;
	}
	decide(wx, WR_DUPLICATE);
}

static void
spill_read_work(uv_work_t *req)
{
	struct webhook_ctx *wx = req->data;

	wx->io_rc = spill_read(wx->cfg->spill_dir, wx->rec.body_file,
	    wx->rec.body_len, wx->rec.body_sha256, &wx->io_body, wx->io_err,
	    sizeof(wx->io_err));
}

static void
on_spill_read(uv_work_t *req, int status)
{
	struct webhook_ctx *wx = req->data;

	if (status != 0 || wx->io_rc != 0) {
		log_warn(wx->rid, "webhook: %s: the stored response: %s",
		    wx->rkey, status != 0 ? "cancelled" : wx->io_err);
		decide_later(wx, WR_ERROR, WH_STORED_BUSY);
		return;
	}
	settled_compare(wx, wx->io_body, wx->rec.body_len);
}

static void
settled_check(struct webhook_ctx *wx)
{
	if (wx->rec.body_file[0] == '\0') {
		settled_compare(wx, wx->rec.body, wx->rec.body_len);
		return;
	}
	wx->work.data = wx;
	if (uv_queue_work(wx->x->w->loop, &wx->work, spill_read_work,
	        on_spill_read) != 0)
		decide_later(wx, WR_ERROR, WH_STORED_BUSY);
}

/* --- an unknown record: taken over, settled with the charge ------------ */

static void
on_index_removed(struct idem_result *res, void *arg)
{
	struct webhook_ctx *wx = arg;

	/* still named: the completer drops it when it finds it settled */
	if (res->st != IDEM_DONE)
		log_warn(wx->rid, "webhook: %s settled, still in the index: %s",
		    wx->rkey, res->errstr != NULL ? res->errstr : "?");
	decide(wx, WR_SETTLED);
}

static void
on_recorded(struct idem_result *res, void *arg)
{
	struct webhook_ctx *wx = arg;
	char index[KEY_PREFIX_MAX + 16];

	switch (res->st) {
	case IDEM_RECORDED:
		log_info(wx->rid, "webhook: %s settled %s (%d) by event %s",
		    wx->rkey, wx->out.state, wx->out.status, wx->event_id);
		if (idem_index_name(index, sizeof(index), wx->cfg->key_prefix) >
		        0 &&
		    idem_pending_remove(wx->redis, index, wx->rkey,
		        on_index_removed, wx) == 0)
			return;
		decide(wx, WR_SETTLED);
		return;
	case IDEM_NOT_DURABLE:
		/* a failover may lose it: the redelivery finds out */
		decide_later(wx, WR_RETRY,
		    "The outcome was recorded but not acknowledged by enough Redis replicas. Deliver the event again.");
		return;
	case IDEM_REPLAY:
		/* settled by someone else first: is it this charge? */
		peek_send(wx);
		return;
	case IDEM_ERR_REDIS: decide_later(wx, WR_ERROR, WH_STORE_DOWN); return;
	default:
		decide_later(wx, WR_RETRY,
		    "The record was taken over by another attempt. Deliver the event again later.");
		return;
	}
}

/* Ours for a lease: the outcome rendered as the completer renders it. */
static void
record_send(struct webhook_ctx *wx)
{
	const struct config *cfg = wx->cfg;
	long long ttl_ms;

	if (answer_outcome_render(&wx->pr, wx->rs.request, wx->rs.request_len,
	        wx->key, wx->keylen, cfg, &wx->out, &wx->prob) != 0) {
		decide_later(wx, WR_ERROR,
		    "The outcome could not be rendered. Deliver the event again later.");
		return;
	}
	ttl_ms = 1000LL *
	    (wx->prob == PROB_NONE ? cfg->completed_ttl_s : cfg->failed_ttl_s);
	if (idem_record_send(wx->redis, wx->rkey, wx->owner, wx->rs.fingerprint,
	        wx->rs.params, &wx->out, NULL, ttl_ms, now_wall_ms(),
	        on_recorded, wx) != 0)
		decide_later(wx, WR_ERROR, WH_NO_MEMORY);
}

static void
on_resumed(struct idem_result *res, void *arg)
{
	struct webhook_ctx *wx = arg;

	switch (res->st) {
	case IDEM_RESUMED:
		wx->rs = res->resume;
		res->resume.request = NULL; /* ours now */
		if (strcmp(wx->rs.fingerprint, wx->fingerprint) != 0) {
			/* another request took the key since the peek */
			decide_later(wx, WR_RETRY,
			    "The record changed while the event was read. Deliver the event again later.");
			return;
		}
		record_send(wx);
		return;
	case IDEM_SETTLED:
		peek_send(wx); /* settled meanwhile: by this charge? */
		return;
	case IDEM_IN_PROGRESS:
		decide_later(wx, WR_RETRY,
		    "A retry or the completer is settling this record now. Deliver the event again later.");
		return;
	default: decide_later(wx, WR_ERROR, WH_STORE_DOWN); return;
	}
}

/*
 * The proof (settle_is_ours): the charge names the record's downstream key
 * and carries the amount and currency of the request it keeps.
 */
static void
unknown_settle(struct webhook_ctx *wx, const char *request, size_t len)
{
	struct charge_params params;
	struct validation v;
	struct settle_expect e;
	struct settle_seen s;
	int ours;

	memset(&params, 0, sizeof(params));
	if (validate_charge(request, len, &params, &v) != 0) {
		log_error(wx->rid, "webhook: %s: the kept request is invalid",
		    wx->rkey);
		decide_later(wx, WR_ERROR,
		    "The record's kept request cannot be read.");
		return;
	}
	e.request = wx->dkey;
	e.amount = params.amount;
	e.currency = params.currency;
	s.request = wx->has_seen_request ? wx->seen_request : NULL;
	s.amount = wx->amount;
	s.currency = wx->currency;
	ours = settle_is_ours(&e, &s);
	charge_params_free(&params);
	if (!ours) {
		mismatch(wx,
		    wx->has_seen_request &&
		            strcmp(wx->seen_request, wx->dkey) == 0
		        ? "the charge's amount or currency is not the request's"
		        : "the charge's metadata.charge_request is not the record's downstream key");
		return;
	}
	if (digest_random_hex(wx->owner, TOKEN_HEX_LEN / 2) != 0 ||
	    idem_resume(wx->redis, wx->rkey, wx->owner, now_wall_ms(),
	        1000LL * wx->cfg->lock_ttl_s, on_resumed, wx) != 0)
		decide_later(wx, WR_ERROR, WH_NO_MEMORY);
}

/* --- the record the charge names --------------------------------------- */

static void
on_peeked(struct wstore_result *res, void *arg)
{
	struct webhook_ctx *wx = arg;

	switch (res->st) {
	case WSTORE_ABSENT:
		/*
		 * No record, for a charge young enough that its request may
		 * still have one (a claim that lapsed before a retry claims
		 * again, a record lost): not final, delivered again; an older
		 * one's record expired: final
		 */
		if (wx->pr.created * 1000 >
		    now_wall_ms() - 1000LL * wx->cfg->completed_ttl_s) {
			decide_later(wx, WR_RETRY,
			    "No record of this charge's request yet. Deliver the event again later.");
			return;
		}
		wx->why = "no record";
		decide(wx, WR_NOT_FOUND);
		return;
	case WSTORE_FOUND: break;
	default: decide_later(wx, WR_ERROR, WH_STORE_DOWN); return;
	}
	(void)snprintf(wx->fingerprint, sizeof(wx->fingerprint), "%s",
	    res->fingerprint);
	if (wire_downstream_key(wx->cfg->provider_secret, wx->principal,
	        wx->key, wx->keylen, wx->fingerprint, wx->dkey) != 0) {
		decide_later(wx, WR_ERROR,
		    "The record's downstream key cannot be computed.");
		return;
	}
	if (strcmp(res->rec.state, "in_progress") == 0) {
		decide_later(wx, WR_RETRY,
		    "The request this charge belongs to is still waiting for the provider's answer. Deliver the event again later.");
		return;
	}
	if (strcmp(res->rec.state, "unknown") == 0) {
		unknown_settle(wx, res->request, res->request_len);
		return;
	}
	idem_record_free(&wx->rec);
	wx->rec = res->rec;
	res->rec.body = NULL; /* ours now */
	settled_check(wx);
}

static void
peek_send(struct webhook_ctx *wx)
{
	if (++wx->peeks > PEEKS_MAX) {
		decide_later(wx, WR_RETRY,
		    "The record keeps changing. Deliver the event again later.");
		return;
	}
	if (wstore_peek(wx->redis, wx->rkey, on_peeked, wx) != 0)
		decide_later(wx, WR_ERROR, WH_NO_MEMORY);
}

static void
on_event_begun(struct wstore_result *res, void *arg)
{
	struct webhook_ctx *wx = arg;

	switch (res->st) {
	case WSTORE_NEW:
		wx->event_claimed = 1;
		peek_send(wx);
		return;
	case WSTORE_SEEN:
		log_info(wx->rid, "webhook: event %s again (it came to %s)",
		    wx->event_id, res->seen);
		decide(wx, WR_DUPLICATE);
		return;
	case WSTORE_BUSY:
		decide_later(wx, WR_RETRY,
		    "Another delivery of this event is being processed. Deliver it again later.");
		return;
	default: decide_later(wx, WR_ERROR, WH_STORE_DOWN); return;
	}
}

/* --- the request: method, body, signature, the event ------------------- */

static void
refuse(struct webhook_ctx *wx, enum wh_result result, enum problem p,
    const char *detail)
{
	wx->result = result;
	response_problem(&wx->x->resp, p, detail, NULL);
	finish(wx);
}

static int
principal_ok(const char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		        (s[i] >= 'A' && s[i] <= 'Z') ||
		        (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		        s[i] == '-'))
			return 0;
	return i > 0 && i <= PRINCIPAL_MAX;
}

/* 1..max visible ASCII (0x21-0x7E): an Idempotency-Key, an event id. */
static int
visible_ok(const char *s, size_t max)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return 0;
	return i > 0 && i <= max;
}

static const char *
json_str(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/*
 * The charge of a charge.* event into wx: what settles (pr), what it says
 * of itself (amount, currency, metadata.charge_request) and the request
 * its metadata names. NULL, or what is wrong (a 400).
 */
static const char *
charge_read(struct webhook_ctx *wx, const cJSON *charge, int *ours)
{
	const cJSON *amount =
	    cJSON_GetObjectItemCaseSensitive(charge, "amount");
	const cJSON *md = cJSON_GetObjectItemCaseSensitive(charge, "metadata");
	const char *cur = json_str(charge, "currency"), *p, *k, *rq;
	int succeeded = strcmp(wx->type, TYPE_SUCCEEDED) == 0;

	if (wire_charge_object(charge, &wx->pr) != 0 ||
	    wx->pr.outcome != (succeeded ? PROV_SUCCEEDED : PROV_DECLINED))
		return succeeded
		    ? "data.object is not a succeeded charge (id, created, status)."
		    : "data.object is not a failed charge (id, created, status, failure_code).";
	if (!cJSON_IsNumber(amount) || amount->valuedouble < 0 ||
	    amount->valuedouble > 1e15 || cur == NULL ||
	    strlen(cur) >= sizeof(wx->currency))
		return "data.object has no amount or currency.";
	/* an amount is an integer on every path (the list's, a 200's) */
	if (amount->valuedouble != (double)(long long)amount->valuedouble)
		return "data.object's amount is not an integer.";
	wx->amount = (long long)amount->valuedouble;
	(void)snprintf(wx->currency, sizeof(wx->currency), "%s", cur);
	p = json_str(md, "charge_principal");
	k = json_str(md, "charge_idempotency_key");
	rq = json_str(md, "charge_request");
	*ours = p != NULL && k != NULL && principal_ok(p) &&
	    visible_ok(k, IDEM_KEY_MAX);
	if (!*ours)
		return NULL;
	(void)snprintf(wx->principal, sizeof(wx->principal), "%s", p);
	wx->keylen = strlen(k);
	memcpy(wx->key, k, wx->keylen + 1);
	if (rq != NULL && strlen(rq) < sizeof(wx->seen_request)) {
		(void)snprintf(wx->seen_request, sizeof(wx->seen_request), "%s",
		    rq);
		wx->has_seen_request = 1;
	}
	return NULL;
}

/*
 * The signed body as an event: {"id", "type", "data": {"object"}}. A
 * charge.* event goes on to its record; any other type is ignored.
 */
static void
event_read(struct webhook_ctx *wx)
{
	const struct request *req = &wx->x->req;
	const cJSON *data, *obj;
	const char *id, *type, *why = NULL;
	cJSON *ev;
	int ours = 0;

	ev = cJSON_ParseWithLength(req->body != NULL ? req->body : "",
	    req->body_len);
	data = cJSON_GetObjectItemCaseSensitive(ev, "data");
	obj = cJSON_GetObjectItemCaseSensitive(data, "object");
	id = json_str(ev, "id");
	type = json_str(ev, "type");
	if (!cJSON_IsObject(ev) || id == NULL || type == NULL ||
	    !cJSON_IsObject(obj)) {
		cJSON_Delete(ev);
		refuse(wx, WR_MALFORMED, PROB_WEBHOOK_INVALID,
		    "The body is not an event: a JSON object with id, type and data.object.");
		return;
	}
	if (!visible_ok(id, WEBHOOK_EVENT_ID_MAX)) {
		cJSON_Delete(ev);
		refuse(wx, WR_MALFORMED, PROB_WEBHOOK_INVALID,
		    "The event's id must be 1-255 visible ASCII characters.");
		return;
	}
	(void)snprintf(wx->event_id, sizeof(wx->event_id), "%s", id);
	if (strcmp(type, TYPE_SUCCEEDED) != 0 &&
	    strcmp(type, TYPE_FAILED) != 0) {
		cJSON_Delete(ev);
		wx->result = WR_IGNORED;
		answer_received(wx);
		finish(wx);
		return;
	}
	(void)snprintf(wx->type, sizeof(wx->type), "%s", type);
	why = charge_read(wx, obj, &ours);
	cJSON_Delete(ev);
	if (why != NULL) {
		refuse(wx, WR_MALFORMED, PROB_WEBHOOK_INVALID, why);
		return;
	}
	if (!ours) {
		/* no request of ours: nothing in Redis to look at */
		wx->result = WR_NOT_FOUND;
		answer_received(wx);
		finish(wx);
		return;
	}
	if (idem_key_name(wx->rkey, sizeof(wx->rkey), wx->cfg->key_prefix,
	        wx->principal, wx->key, wx->keylen) < 0 ||
	    wstore_event_name(wx->ekey, sizeof(wx->ekey), wx->cfg->key_prefix,
	        wx->event_id) < 0) {
		refuse(wx, WR_ERROR, PROB_INTERNAL, NULL);
		return;
	}
	if (wstore_event_begin(wx->redis, wx->ekey,
	        1000LL * wx->cfg->lock_ttl_s, on_event_begun, wx) != 0)
		decide_later(wx, WR_ERROR, WH_NO_MEMORY);
}

void
webhook_handle(struct exchange *x)
{
	const struct config *cfg = x->w->cfg;
	const struct request *req = &x->req;
	const char *secrets[2];
	struct webhook_ctx *wx;
	enum wsig_status st;

	if ((wx = calloc(1, sizeof(*wx))) == NULL) {
		response_problem(&x->resp, PROB_INTERNAL, NULL, NULL);
		metrics_webhook_event(NULL, result_names[WR_ERROR]);
		exchange_finish(x);
		return;
	}
	wx->x = x;
	wx->cfg = cfg;
	wx->redis = x->w->redis;
	wx->rid = req->request_id;
	(void)snprintf(wx->type, sizeof(wx->type), "other");
	if (strcmp(req->method, "POST") != 0) {
		(void)response_header(&x->resp, "Allow", "POST");
		refuse(wx, WR_MALFORMED, PROB_METHOD_NOT_ALLOWED,
		    "Use POST on the webhook path.");
		return;
	}
	switch (req->body_status) {
	case BODY_OK: break;
	case BODY_TOO_LARGE:
		wx->result = WR_MALFORMED;
		answer_refusal(&x->resp, cfg, REFUSE_TOO_LARGE, NULL);
		finish(wx);
		return;
	case BODY_TIMEOUT:
		wx->result = WR_MALFORMED;
		answer_refusal(&x->resp, cfg, REFUSE_BODY_TIMEOUT, NULL);
		finish(wx);
		return;
	default:
		refuse(wx, WR_MALFORMED, PROB_WEBHOOK_INVALID,
		    req->body_status == BODY_SHORT
		        ? "The body is shorter than Content-Length."
		        : "Content-Length is invalid.");
		return;
	}
	secrets[0] = cfg->provider_webhook_secret;
	secrets[1] = cfg->provider_webhook_secret_previous;
	st = webhook_sig_verify(req->signature,
	    req->body != NULL ? req->body : "", req->body_len, secrets, 2,
	    now_wall_ms() / 1000, cfg->provider_webhook_tolerance_s, NULL);
	switch (st) {
	case WSIG_OK: break;
	case WSIG_MISSING:
	case WSIG_MALFORMED:
	case WSIG_NO_V1:
		log_info(wx->rid, "webhook: refused: %s", webhook_sig_name(st));
		refuse(wx, WR_BAD_SIGNATURE, PROB_WEBHOOK_INVALID,
		    webhook_sig_detail(st));
		return;
	case WSIG_ERROR: refuse(wx, WR_ERROR, PROB_INTERNAL, NULL); return;
	default:
		log_info(wx->rid, "webhook: refused: %s", webhook_sig_name(st));
		refuse(wx, WR_BAD_SIGNATURE, PROB_WEBHOOK_REJECTED,
		    webhook_sig_detail(st));
		return;
	}
	event_read(wx);
}
