/*
 * charge.c - the /charge use case: check the request, claim its key, call
 * the provider, record the outcome, answer; or replay what was recorded.
 * Fail closed: the provider is called only after a successful claim.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge.h"
#include "clock.h"
#include "digest.h"
#include "headers.h"
#include "idem.h"
#include "log.h"
#include "metrics.h"
#include "provider.h"
#include "spill.h"
#include "timefmt.h"
#include "util.h"

#define JSON_CTYPE "application/json"

/* Everything one /charge request carries between its steps. */
struct charge_ctx {
	struct worker *w;
	const struct request *req;
	struct response *resp;
	const char *principal;
	char key[IDEM_KEY_MAX + 1];
	size_t keylen;
	struct charge_params params;
	char *canon; /* canonical text of params (free) */
	size_t canonlen;
	char fingerprint[65];
	char params_hex[CHARGE_PARAMS_HEX_LEN + 1]; /* per-parameter digests */
	char owner[TOKEN_HEX_LEN + 1];
	char rkey[IDEM_RKEY_MAX];
	long long claim_us; /* monotonic time the last claim was sent */
};

int
charge_fingerprint(const char *canon, size_t canonlen, const char *principal,
    char out[65])
{
	static const char route[] = "POST /charge\n";
	unsigned char md[SHA256_LEN];
	struct digest_part parts[4];

	parts[0].p = route;
	parts[0].n = sizeof(route) - 1;
	parts[1].p = principal;
	parts[1].n = strlen(principal);
	parts[2].p = "\n";
	parts[2].n = 1;
	parts[3].p = canon;
	parts[3].n = canonlen;
	if (digest_sha256_parts(parts, 4, md) != 0)
		return -1;
	digest_hex(md, sizeof(md), out);
	return 0;
}

const char *
charge_param_name(int i)
{
	return i >= 0 && i < CHARGE_PARAM_COUNT ? schema_param_names[i] : NULL;
}

/*
 * The end of the JSON value that starts at p (compact, as cJSON prints it):
 * the first ',' or '}' outside strings at nesting depth 0. NULL if the text
 * ends first.
 */
static const char *
json_value_end(const char *p, const char *end)
{
	int depth = 0, in_str = 0;

	for (; p < end; p++) {
		if (in_str) {
			if (*p == '\\')
				p++; /* the escaped byte cannot end it */
			else if (*p == '"')
				in_str = 0;
			continue;
		}
		switch (*p) {
		case '"': in_str = 1; break;
		case '{':
		case '[': depth++; break;
		case ']': depth--; break;
		case '}':
			if (depth == 0)
				return p;
			depth--;
			break;
		case ',':
			if (depth == 0)
				return p;
			break;
		default: break;
		}
	}
	return NULL;
}

/*
 * 32-bit FNV-1a. The per-parameter digests only tell a 422 which
 * parameters changed (the fingerprint, SHA-256, decides that something
 * did), so they need to spread well, not to resist an attacker: seven
 * SHA-256 computations cost about 20 000 instructions a fresh charge, this
 * about 10 a byte. OpenSSL has no non-cryptographic hash.
 */
static uint32_t
fnv1a32(const char *p, size_t n)
{
	uint32_t h = 2166136261u;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 16777619u;
	}
	return h;
}

int
charge_param_digests(const char *canon, size_t canonlen,
    char out[CHARGE_PARAMS_HEX_LEN + 1])
{
	const char *p = canon, *end = canon + canonlen, *v;
	unsigned char md[CHARGE_PARAM_DIGEST_BYTES];
	size_t namelen;
	uint32_t h;
	int i;

	if (canonlen < 2 || *p++ != '{')
		return -1;
	for (i = 0; i < CHARGE_PARAM_COUNT; i++) {
		/* "name": then the value, up to the next member or the end */
		namelen = strlen(schema_param_names[i]);
		if ((size_t)(end - p) < namelen + 3 || p[0] != '"' ||
		    memcmp(p + 1, schema_param_names[i], namelen) != 0 ||
		    p[namelen + 1] != '"' || p[namelen + 2] != ':')
			return -1;
		if ((v = json_value_end(p + namelen + 3, end)) == NULL ||
		    v == p + namelen + 3 ||
		    *v != (i == CHARGE_PARAM_COUNT - 1 ? '}' : ','))
			return -1;
		h = fnv1a32(p, (size_t)(v - p));
		md[0] = (unsigned char)(h >> 24);
		md[1] = (unsigned char)(h >> 16);
		md[2] = (unsigned char)(h >> 8);
		md[3] = (unsigned char)h;
		digest_hex(md, CHARGE_PARAM_DIGEST_BYTES,
		    out + i * CHARGE_PARAM_DIGEST_HEX);
		p = v + 1;
	}
	if (p != end)
		return -1;
	out[CHARGE_PARAMS_HEX_LEN] = '\0';
	return 0;
}

int
charge_params_diff(const char *stored, const char *ours,
    int differ[CHARGE_PARAM_COUNT])
{
	int i, n = 0;

	if (strlen(stored) != CHARGE_PARAMS_HEX_LEN ||
	    !util_is_hex(stored, CHARGE_PARAMS_HEX_LEN))
		return -1;
	for (i = 0; i < CHARGE_PARAM_COUNT; i++) {
		differ[i] = memcmp(stored + i * CHARGE_PARAM_DIGEST_HEX,
		                ours + i * CHARGE_PARAM_DIGEST_HEX,
		                CHARGE_PARAM_DIGEST_HEX) != 0;
		n += differ[i];
	}
	return n;
}

char *
charge_object_render(const char *canon, size_t canonlen, const char *charge_id,
    long long created, const char *key, size_t keylen, size_t *len)
{
	/* a key is 0x21-0x7E: only '"' and '\\' need escaping, two bytes each */
	char keyjson[2 * IDEM_KEY_MAX + 1];
	size_t i, k = 0, cap;
	struct util_buf b;
	char *out;
	long n;

	if (keylen > IDEM_KEY_MAX || canonlen < 2 || canon[0] != '{' ||
	    canon[canonlen - 1] != '}')
		return NULL;
	for (i = 0; i < keylen; i++) {
		if (key[i] == '"' || key[i] == '\\')
			keyjson[k++] = '\\';
		keyjson[k++] = key[i];
	}
	cap = canonlen + k + 160; /* fixed members, id and created fit in 160 */
	if ((out = malloc(cap)) == NULL)
		return NULL;
	util_buf_init(&b, out, cap);
	util_buf_str(&b, "{\"id\":\"");
	util_buf_str(&b, charge_id);
	util_buf_str(&b, "\",\"object\":\"charge\",\"status\":\"succeeded\",");
	util_buf_put(&b, canon + 1, canonlen - 2);
	util_buf_str(&b, ",\"created\":");
	util_buf_ll(&b, created);
	util_buf_str(&b, ",\"idempotency_key\":\"");
	util_buf_put(&b, keyjson, k);
	util_buf_str(&b, "\"}");
	if ((n = util_buf_len(&b)) < 0) {
		free(out);
		return NULL;
	}
	*len = (size_t)n;
	return out;
}

/*
 * Seconds until our claim lapses by itself (at least 1): when the claim or
 * the record may have been written but we cannot tell, the key stays
 * in_progress under our owner until then, and a retry before it gets 409.
 */
static long long
claim_left_s(const struct charge_ctx *cx)
{
	long long left_ms = 1000LL * cx->w->cfg->lock_ttl_s -
	    (now_mono_us() - cx->claim_us) / 1000;

	return left_ms <= 1000 ? 1 : (left_ms + 999) / 1000;
}

static void
answer_unavailable(struct charge_ctx *cx, const char *detail, long long retry_s)
{
	response_problem(cx->resp, PROB_UNAVAILABLE, detail, NULL);
	(void)response_header(cx->resp, "Retry-After", "%lld", retry_s);
}

static void
answer_redis_error(struct charge_ctx *cx, const char *detail, long long retry_s)
{
	metrics_inc(MC_REDIS_ERRORS);
	log_warn(cx->req->request_id, "idempotency store unavailable: %s",
	    cx->w->redis.errstr);
	answer_unavailable(cx, detail, retry_s);
}

/*
 * The claim failed. When it may have been written (its reply was lost), the
 * key would stay in_progress under an owner nobody uses again: since the
 * provider was not called, give it back on a fresh connection. If that
 * fails too, the retry has to wait until the claim lapses. Only a claim that
 * failed fast (a reset, a closed connection) is worth the try: after a
 * timeout Redis is not answering, and a release would make the client wait
 * another redis_timeout_ms for nothing.
 */
static void
answer_claim_error(struct charge_ctx *cx)
{
	long long retry_s = RETRY_AFTER_UNAVAILABLE_S;
	enum idem_status st;

	metrics_inc(MC_REDIS_ERRORS);
	log_warn(cx->req->request_id, "idempotency store unavailable: %s",
	    cx->w->redis.errstr);
	if (cx->w->redis.outcome_unknown &&
	    now_mono_us() - cx->claim_us <
	        500LL * cx->w->cfg->redis_timeout_ms) {
		st = idem_release(&cx->w->redis, cx->rkey, cx->owner);
		if (st == IDEM_ERR_REDIS) {
			retry_s = claim_left_s(cx);
			log_warn(cx->req->request_id,
			    "claim of %s may hold for "
			    "%lld s: release failed: %s",
			    cx->rkey, retry_s, cx->w->redis.errstr);
		}
	} else if (cx->w->redis.outcome_unknown)
		retry_s = claim_left_s(cx);
	answer_unavailable(cx,
	    "The idempotency store is unavailable. "
	    "Nothing was charged; retry with the same key.",
	    retry_s);
}

/*
 * Idempotency-Key-Expires: when the record (or the claim) the answer comes
 * from expires, as an HTTP-date. Left out when that is unknown (0).
 */
static void
header_expires(struct charge_ctx *cx, long long expires_ms)
{
	char date[HTTP_DATE_LEN + 1];

	if (expires_ms > 0 &&
	    timefmt_http_date(expires_ms, date, sizeof(date)) == 0)
		(void)response_header(cx->resp, "Idempotency-Key-Expires", "%s",
		    date);
}

/* claim_created_ms: when the holder's claim was made (0: unknown). */
static void
answer_in_progress(struct charge_ctx *cx, long long claim_created_ms)
{
	metrics_inc(MC_CONFLICTS);
	response_problem(cx->resp, PROB_IN_PROGRESS,
	    "Another request with this Idempotency-Key is being processed. "
	    "Retry after the delay in Retry-After with the same key, or send "
	    "Prefer: wait=N to wait for its outcome.",
	    NULL);
	(void)response_header(cx->resp, "Retry-After", "%d",
	    RETRY_AFTER_IN_PROGRESS_S);
	if (claim_created_ms > 0)
		header_expires(cx,
		    claim_created_ms + 1000LL * cx->w->cfg->lock_ttl_s);
}

/*
 * 422 with "mismatched_params": the parameters whose stored digests differ
 * from this request's, in the fixed order; left out when the record holds
 * no digests of this layout.
 */
static void
answer_mismatch(struct charge_ctx *cx, const char *stored_params)
{
	int differ[CHARGE_PARAM_COUNT], n, i;
	char detail[256], names[128] = "";
	cJSON *extras = NULL, *list;
	size_t len = 0;

	metrics_inc(MC_MISMATCHES);
	n = charge_params_diff(stored_params, cx->params_hex, differ);
	if (n >= 0 && (extras = cJSON_CreateObject()) != NULL &&
	    (list = cJSON_AddArrayToObject(extras, "mismatched_params")) !=
	        NULL) {
		for (i = 0; i < CHARGE_PARAM_COUNT; i++) {
			if (!differ[i])
				continue;
			cJSON_AddItemToArray(list,
			    cJSON_CreateString(schema_param_names[i]));
			len += (size_t)snprintf(names + len,
			    sizeof(names) - len, "%s%s", len > 0 ? ", " : "",
			    schema_param_names[i]);
		}
	}
	if (n > 0)
		(void)snprintf(detail, sizeof(detail),
		    "This Idempotency-Key was "
		    "already used with different request parameters (%s). Use a "
		    "new key for a new payment.",
		    names);
	else
		(void)snprintf(detail, sizeof(detail),
		    "This Idempotency-Key was "
		    "already used with different request parameters. Use a new "
		    "key for a new payment.");
	response_problem(cx->resp, PROB_KEY_REUSED, detail, extras);
}

/* Answers with a recorded outcome, reading and verifying a spilled body. */
static void
answer_replay(struct charge_ctx *cx, struct idem_record *rec)
{
	char err[160];
	char *body = rec->body;
	size_t len = rec->body_len;
	int rc;

	if (rec->body_file[0] != '\0') {
		rc = spill_read(cx->w->cfg->spill_dir, rec->body_file,
		    rec->body_len, rec->body_sha256, &body, err, sizeof(err));
		if (rc == SPILL_READ_RESOURCES) {
			/* the file may be fine: this process is short of fds */
			log_warn(cx->req->request_id, "replay of %s: %s",
			    cx->rkey, err);
			answer_unavailable(cx,
			    "The outcome of this request was recorded, but its "
			    "stored response cannot be read right now. Retry "
			    "with the same key.",
			    RETRY_AFTER_UNAVAILABLE_S);
			return;
		}
		if (rc != 0) {
			log_error(cx->req->request_id, "replay of %s: %s",
			    cx->rkey, err);
			response_problem(cx->resp, PROB_STORED_UNAVAILABLE,
			    "The outcome of this request was recorded, but its "
			    "stored response could not be read. The charge was "
			    "not executed again.",
			    NULL);
			return;
		}
	} else
		rec->body = NULL; /* ownership moves to the response */
	response_set_body(cx->resp, rec->status, rec->content_type, body, len);
	cx->resp->outcome = OUTCOME_REPLAYED;
	metrics_inc(MC_REPLAYS);
	(void)response_header(cx->resp, "Idempotent-Replayed", "true");
	if (rec->retry_after[0] != '\0')
		(void)response_header(cx->resp, "Retry-After", "%s",
		    rec->retry_after);
	header_expires(cx, rec->expires_ms);
}

/* Renders the provider's answer into out (status, content type, body). */
static int
render_outcome(struct charge_ctx *cx, const struct provider_result *pr,
    struct idem_record *out, enum problem *prob)
{
	const struct config *cfg = cx->w->cfg;
	char detail[160];
	cJSON *extras = NULL;
	size_t len = 0;

	memset(out, 0, sizeof(*out));
	if (pr->outcome == PROV_SUCCEEDED) {
		out->body = charge_object_render(cx->canon, cx->canonlen,
		    pr->charge_id, pr->created, cx->key, cx->keylen, &len);
		out->status = 201;
		(void)snprintf(out->state, sizeof(out->state), "completed");
		(void)snprintf(out->content_type, sizeof(out->content_type),
		    JSON_CTYPE);
		*prob = PROB_NONE;
	} else {
		switch (pr->outcome) {
		case PROV_DECLINED:
			*prob = PROB_DECLINED;
			(void)snprintf(detail, sizeof(detail),
			    "The payment was declined: %s.", pr->decline_code);
			if ((extras = cJSON_CreateObject()) == NULL ||
			    cJSON_AddStringToObject(extras, "decline_code",
			        pr->decline_code) == NULL ||
			    cJSON_AddStringToObject(extras, "charge",
			        pr->charge_id) == NULL)
				goto enomem;
			break;
		case PROV_TIMEOUT:
			*prob = PROB_PROVIDER_TIMEOUT;
			(void)snprintf(detail, sizeof(detail),
			    "The payment provider did not answer within %d ms. "
			    "Nothing is known to be charged.",
			    cfg->provider_timeout_ms);
			break;
		default:
			*prob = PROB_PROVIDER_ERROR;
			(void)snprintf(detail, sizeof(detail),
			    "The payment provider reported an error.");
			break;
		}
		out->body = problem_render(*prob, detail, extras, &len);
		extras = NULL;
		out->status = problem_info(*prob)->status;
		(void)snprintf(out->state, sizeof(out->state), "failed");
		(void)snprintf(out->content_type, sizeof(out->content_type),
		    "application/problem+json");
		if (*prob != PROB_DECLINED)
			(void)snprintf(out->retry_after,
			    sizeof(out->retry_after), "%d", cfg->failed_ttl_s);
	}
	if (out->body == NULL)
		return -1;
	out->body_len = len;
	return 0;
enomem:
	cJSON_Delete(extras);
	return -1;
}

static void charge_execute(struct charge_ctx *cx);

/* Runs the claim script once for cx; rec and cf as idem_claim() fills them. */
static enum idem_status
claim_once(struct charge_ctx *cx, struct idem_record *rec,
    struct idem_conflict *cf)
{
	const struct config *cfg = cx->w->cfg;

	cx->claim_us = now_mono_us();
	return idem_claim(&cx->w->redis, cx->rkey, cx->fingerprint,
	    cx->params_hex, cx->owner, now_wall_ms(), 1000LL * cfg->lock_ttl_s,
	    rec, cf);
}

/*
 * Answers what the claim script found: the replay, 409, 422 or 503. A key
 * that is ours is executed; after a lapse (execute 0) it is given back
 * instead, so a request calls the provider at most once.
 */
static void
answer_claim(struct charge_ctx *cx, enum idem_status st,
    struct idem_record *rec, const struct idem_conflict *cf, int execute)
{
	switch (st) {
	case IDEM_CLAIMED:
		if (execute) {
			charge_execute(cx);
			break;
		}
		(void)idem_release(&cx->w->redis, cx->rkey, cx->owner);
		answer_unavailable(cx,
		    "This request was held up past its claim "
		    "on the key before the payment provider charged; nothing "
		    "was charged. Retry with the same key.",
		    RETRY_AFTER_UNAVAILABLE_S);
		break;
	case IDEM_REPLAY: answer_replay(cx, rec); break;
	case IDEM_IN_PROGRESS:
		answer_in_progress(cx, cf->claim_created_ms);
		break;
	case IDEM_MISMATCH: answer_mismatch(cx, cf->params); break;
	default: answer_claim_error(cx); break;
	}
}

/*
 * This attempt was stopped past its claim's life before the provider
 * charged: nothing was charged, and another attempt may own the key now.
 * Answer what a retry would get: the key's state, read with the claim
 * script once more (the replay, 409 or 422); if the key came back to us,
 * give it up and ask for a retry.
 */
static void
answer_lapsed(struct charge_ctx *cx)
{
	struct idem_record rec;
	struct idem_conflict cf;
	enum idem_status st;

	memset(&rec, 0, sizeof(rec));
	st = claim_once(cx, &rec, &cf);
	answer_claim(cx, st, &rec, &cf, 0);
	idem_record_free(&rec);
}

/*
 * The charge must be recorded while the claim still holds the key, so the
 * provider refuses to charge past the claim's life less the time a record
 * may take: redis_timeout_ms, or less where the configuration leaves less
 * room (lock_ttl_s only has to exceed the provider's own time).
 */
static long long
charge_deadline_us(const struct charge_ctx *cx)
{
	const struct config *cfg = cx->w->cfg;
	long long lock_ms = 1000LL * cfg->lock_ttl_s, margin_ms;

	margin_ms =
	    lock_ms - cfg->provider_timeout_ms - cfg->provider_latency_ms;
	if (margin_ms > cfg->redis_timeout_ms)
		margin_ms = cfg->redis_timeout_ms;
	if (margin_ms < 0)
		margin_ms = 0;
	return cx->claim_us + 1000LL * (lock_ms - margin_ms);
}

/* The key is ours: call the provider, record, answer. */
static void
charge_execute(struct charge_ctx *cx)
{
	const struct config *cfg = cx->w->cfg;
	const char *rid = cx->req->request_id;
	struct provider_result pr;
	struct idem_record out, existing;
	struct idem_conflict cf;
	enum problem prob = PROB_NONE;
	enum idem_status st;
	char err[160];
	long long ttl_ms, now_ms;

	memset(&out, 0, sizeof(out));
	memset(&existing, 0, sizeof(existing));
	metrics_inc(MC_PROVIDER_CALLS);
	if (provider_charge(cfg, &cx->w->ledger_fd, cx->principal, cx->key,
	        cx->keylen, cx->fingerprint, cx->params.amount,
	        cx->params.currency, cx->params.source, charge_deadline_us(cx),
	        &pr) != 0) {
		log_error(rid, "provider ledger %s: write failed",
		    cfg->provider_ledger);
		pr.outcome = PROV_ERROR;
	}
	if (pr.outcome == PROV_LAPSED) {
		log_warn(rid, "claim of %s lapsed before the provider charged",
		    cx->rkey);
		answer_lapsed(cx);
		goto done;
	}
	if (render_outcome(cx, &pr, &out, &prob) != 0) {
		/*
		 * Out of memory after the provider ran. The claim is kept (a
		 * release would let a retry call the provider at once): it
		 * lapses after lock_ttl_s, and the retry then gets the same
		 * charge from the idempotent provider.
		 */
		log_error(rid, "cannot render the outcome of %s", cx->rkey);
		response_problem(cx->resp, PROB_INTERNAL, NULL, NULL);
		(void)response_header(cx->resp, "Retry-After", "%lld",
		    claim_left_s(cx));
		goto done;
	}
	if (out.body_len > (size_t)cfg->spill_threshold_bytes) {
		if (spill_write(cfg->spill_dir, out.body, out.body_len,
		        out.body_file, out.body_sha256, err,
		        sizeof(err)) != 0) {
			/*
			 * The provider ran: record the body inline rather than
			 * give the key up. It is bounded by max_request_bytes
			 * plus the charge object.
			 */
			log_error(rid, "%s: recording the body inline", err);
			out.body_file[0] = '\0';
			metrics_inc(MC_SPILL_FAILURES);
		} else
			metrics_inc(MC_SPILLS);
	}
	ttl_ms = 1000LL *
	    (prob == PROB_NONE ? cfg->completed_ttl_s : cfg->failed_ttl_s);
	now_ms = now_wall_ms();
	st = idem_record(&cx->w->redis, cx->rkey, cx->owner, cx->fingerprint,
	    cx->params_hex, &out, ttl_ms, now_ms, &existing, &cf);
	/*
	 * Our spill file is named by no record unless ours was written (a
	 * record re-sent after a lost reply answers RECORDED too, so a file
	 * that record names is never removed here).
	 */
	if (out.body_file[0] != '\0' &&
	    (st == IDEM_FENCED || st == IDEM_MISMATCH ||
	        (st == IDEM_REPLAY &&
	            strcmp(existing.body_file, out.body_file) != 0)))
		(void)spill_remove(cfg->spill_dir, out.body_file);
	switch (st) {
	case IDEM_RECORDED:
		response_set_body(cx->resp, out.status, out.content_type,
		    out.body, out.body_len);
		out.body = NULL;
		cx->resp->outcome = prob == PROB_NONE
		    ? OUTCOME_CREATED
		    : problem_info(prob)->slug;
		(void)response_header(cx->resp, "Idempotent-Replayed", "false");
		if (out.retry_after[0] != '\0')
			(void)response_header(cx->resp, "Retry-After", "%s",
			    out.retry_after);
		/* the expires_ms record.lua stored: now + TTL */
		header_expires(cx, now_ms + ttl_ms);
		break;
	case IDEM_NOT_DURABLE:
		/*
		 * Recorded, but a failover may still lose it: the retry replays
		 * it, or executes again and gets the same charge from the
		 * idempotent provider. The spill file stays: the record names it.
		 */
		metrics_inc(MC_NOT_DURABLE);
		log_warn(rid, "record of %s: %s", cx->rkey,
		    cx->w->redis.errstr);
		response_problem(cx->resp, PROB_NOT_DURABLE,
		    "The outcome was "
		    "recorded, but not acknowledged by enough Redis replicas. "
		    "Retry with the same key.",
		    NULL);
		(void)response_header(cx->resp, "Retry-After", "%d",
		    RETRY_AFTER_UNAVAILABLE_S);
		break;
	case IDEM_REPLAY:
		/* another attempt recorded first: first recording wins */
		answer_replay(cx, &existing);
		break;
	case IDEM_FENCED:
		log_warn(rid, "claim of %s taken over while the provider ran",
		    cx->rkey);
		answer_in_progress(cx, cf.claim_created_ms);
		break;
	case IDEM_MISMATCH:
		/* our claim lapsed and a different request took the key */
		log_warn(rid,
		    "claim of %s lapsed; the key now holds another "
		    "request",
		    cx->rkey);
		answer_mismatch(cx, cf.params);
		break;
	default:
		/*
		 * Unknown whether the record was written: keep the spill file
		 * (the GC removes it once no record can name it). If it was
		 * not, our claim holds the key until it lapses.
		 */
		answer_redis_error(cx,
		    "The outcome could not be recorded. "
		    "Retry with the same key after the delay in Retry-After.",
		    claim_left_s(cx));
		break;
	}
done:
	idem_record_free(&out);
	idem_record_free(&existing);
}

/* Checks headers and body; 0 when the request may claim its key. */
static int
charge_check(struct charge_ctx *cx)
{
	const struct request *req = cx->req;
	struct response *resp = cx->resp;
	struct validation v;
	cJSON *extras = NULL, *errors, *e;
	char detail[256];
	int i;

	if (strcmp(req->method, "POST") != 0) {
		response_problem(resp, PROB_METHOD_NOT_ALLOWED,
		    "Use POST on /charge.", NULL);
		(void)response_header(resp, "Allow", "POST");
		return -1;
	}
	cx->principal = auth_principal(cx->w->auth, req->authorization);
	if (cx->principal == NULL) {
		response_problem(resp, PROB_UNAUTHORIZED,
		    "Send a valid API key as Authorization: Bearer <key>.",
		    NULL);
		(void)response_header(resp, "WWW-Authenticate", "Bearer");
		return -1;
	}
	switch (idem_key_parse(req->idem_key, cx->key, &cx->keylen)) {
	case KEY_OK: break;
	case KEY_MISSING:
		response_problem(resp, PROB_MISSING_KEY,
		    "Send an Idempotency-Key header: 1-255 visible ASCII "
		    "characters, unique per payment.",
		    NULL);
		return -1;
	default:
		response_problem(resp, PROB_INVALID_KEY,
		    "Idempotency-Key must be 1-255 visible ASCII characters "
		    "(0x21-0x7E), bare or as a quoted Structured-Field string.",
		    NULL);
		return -1;
	}
	if (!content_type_is_json(req->content_type)) {
		response_problem(resp, PROB_UNSUPPORTED_MEDIA_TYPE,
		    "Send the body as Content-Type: application/json.", NULL);
		return -1;
	}
	switch (req->body_status) {
	case BODY_OK: break;
	case BODY_TOO_LARGE:
		(void)snprintf(detail, sizeof(detail),
		    "The body may be at most %ld bytes.",
		    cx->w->cfg->max_request_bytes);
		response_problem(resp, PROB_TOO_LARGE, detail, NULL);
		return -1;
	case BODY_TIMEOUT:
		(void)snprintf(detail, sizeof(detail),
		    "The request body did not arrive within %d ms.",
		    cx->w->cfg->request_timeout_ms);
		response_problem(resp, PROB_REQUEST_TIMEOUT, detail, NULL);
		return -1;
	default:
		v.n = 1;
		(void)snprintf(v.errors[0].field, sizeof(v.errors[0].field),
		    "body");
		(void)snprintf(v.errors[0].message, sizeof(v.errors[0].message),
		    req->body_status == BODY_SHORT
		        ? "the body is shorter than Content-Length"
		        : "Content-Length is invalid");
		goto invalid;
	}
	if (validate_charge(req->body, req->body_len, &cx->params, &v) == 0)
		return 0;
invalid:
	/* a field may hold a client's UTF-8: never cut a character in half */
	(void)snprintf(detail, sizeof(detail), "%.*s: %.*s",
	    (int)util_utf8_prefix(v.errors[0].field, 90), v.errors[0].field,
	    (int)util_utf8_prefix(v.errors[0].message, 150),
	    v.errors[0].message);
	if ((extras = cJSON_CreateObject()) != NULL &&
	    (errors = cJSON_AddArrayToObject(extras, "errors")) != NULL) {
		for (i = 0; i < v.n; i++) {
			if ((e = cJSON_CreateObject()) == NULL)
				break;
			cJSON_AddItemToArray(errors, e);
			if (cJSON_AddStringToObject(e, "field",
			        v.errors[i].field) == NULL ||
			    cJSON_AddStringToObject(e, "message",
			        v.errors[i].message) == NULL)
				break;
		}
	}
	response_problem(resp, PROB_INVALID_REQUEST, detail, extras);
	return -1;
}

void
charge_handle(struct worker *w, const struct request *req,
    struct response *resp)
{
	const struct config *cfg = w->cfg;
	struct charge_ctx cx;
	struct idem_record rec;
	struct idem_conflict cf;
	enum idem_status st;
	long long deadline_us = 0, pause_ms = WAIT_POLL_FIRST_MS, left_ms;
	int wait_s;

	memset(&cx, 0, sizeof(cx));
	memset(&rec, 0, sizeof(rec));
	cx.w = w;
	cx.req = req;
	cx.resp = resp;
	if (charge_check(&cx) != 0)
		goto done;
	cx.canon = validate_canonical_text(&cx.params, &cx.canonlen);
	if (cx.canon == NULL ||
	    charge_fingerprint(cx.canon, cx.canonlen, cx.principal,
	        cx.fingerprint) != 0 ||
	    charge_param_digests(cx.canon, cx.canonlen, cx.params_hex) != 0 ||
	    digest_random_hex(cx.owner, TOKEN_HEX_LEN / 2) != 0 ||
	    idem_key_name(cx.rkey, sizeof(cx.rkey), cfg->key_prefix,
	        cx.principal, cx.key, cx.keylen) < 0) {
		response_problem(resp, PROB_INTERNAL, NULL, NULL);
		goto done;
	}
	wait_s = prefer_wait_parse(req->prefer);
	if (wait_s > cfg->max_wait_s)
		wait_s = cfg->max_wait_s;
	if (wait_s > 0)
		deadline_us = now_mono_us() + 1000000LL * wait_s;
	for (;;) {
		st = claim_once(&cx, &rec, &cf);
		if (st != IDEM_IN_PROGRESS)
			break;
		left_ms = (deadline_us - now_mono_us()) / 1000;
		if (left_ms <= 0)
			break;
		sleep_ms(pause_ms < left_ms ? pause_ms : left_ms);
		if (pause_ms < WAIT_POLL_MAX_MS)
			pause_ms *= 2;
	}
	answer_claim(&cx, st, &rec, &cf, 1);
done:
	idem_record_free(&rec);
	free(cx.canon);
	charge_params_free(&cx.params);
}
