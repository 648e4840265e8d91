/*
 * charge_answer.c - the answers of the /charge use case, one function per
 * kind (the charge, the replay, 409, 422, 503...), and the checks of a
 * request before it may claim its key. charge.c sequences them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge_answer.h"
#include "clock.h"
#include "headers.h"
#include "idem.h"
#include "log.h"
#include "metrics.h"
#include "spill.h"
#include "timefmt.h"
#include "util.h"

#define JSON_CTYPE "application/json"

/*
 * Seconds until our claim lapses by itself (at least 1): when the claim or
 * the record may have been written but we cannot tell, the key stays
 * in_progress under our owner until then, and a retry before it gets 409.
 */
long long
claim_left_s(const struct charge_ctx *cx)
{
	long long left_ms = 1000LL * cx->w->cfg->lock_ttl_s -
	    (now_mono_us() - cx->claim_us) / 1000;

	return left_ms <= 1000 ? 1 : (left_ms + 999) / 1000;
}

void
answer_unavailable(struct charge_ctx *cx, const char *detail, long long retry_s)
{
	response_problem((&cx->x->resp), PROB_UNAVAILABLE, detail, NULL);
	(void)response_header((&cx->x->resp), "Retry-After", "%lld", retry_s);
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
		(void)response_header((&cx->x->resp), "Idempotency-Key-Expires",
		    "%s", date);
}

/* claim_created_ms: when the holder's claim was made (0: unknown). */
void
answer_in_progress(struct charge_ctx *cx, long long claim_created_ms)
{
	metrics_inc(MC_CONFLICTS);
	response_problem((&cx->x->resp), PROB_IN_PROGRESS,
	    "Another request with this Idempotency-Key is being processed. "
	    "Retry after the delay in Retry-After with the same key, or send "
	    "Prefer: wait=N to wait for its outcome.",
	    NULL);
	(void)response_header((&cx->x->resp), "Retry-After", "%d",
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
void
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
	response_problem((&cx->x->resp), PROB_KEY_REUSED, detail, extras);
}

/* Renders the provider's answer into out (status, content type, body). */
int
render_outcome(struct charge_ctx *cx)
{
	const struct provider_result *pr = &cx->pr;
	struct idem_record *out = &cx->out;
	enum problem *prob = &cx->prob;
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

/* Checks headers and body; 0 when the request may claim its key. */
int
charge_check(struct charge_ctx *cx)
{
	const struct request *req = &cx->x->req;
	struct response *resp = &cx->x->resp;
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
redis_error_note(struct charge_ctx *cx, const char *why)
{
	metrics_inc(MC_REDIS_ERRORS);
	log_warn(cx->x->req.request_id, "idempotency store unavailable: %s",
	    why != NULL ? why : "?");
}

void
answer_redis_error(struct charge_ctx *cx, const char *why, const char *detail,
    long long retry_s)
{
	redis_error_note(cx, why);
	answer_unavailable(cx, detail, retry_s);
}

void
answer_replay_body(struct charge_ctx *cx)
{
	struct idem_record *rec = &cx->replay;
	struct response *resp = &cx->x->resp;
	char *body = rec->body;

	if (rec->body_file[0] != '\0') {
		body = cx->io_body;
		cx->io_body = NULL;
		if (cx->io_rc == SPILL_READ_RESOURCES) {
			/* the file may be fine: this process is short of fds */
			log_warn(cx->x->req.request_id, "replay of %s: %s",
			    cx->rkey, cx->io_err);
			answer_unavailable(cx,
			    "The outcome of this request was recorded, but its "
			    "stored response cannot be read right now. Retry "
			    "with the same key.",
			    RETRY_AFTER_UNAVAILABLE_S);
			return;
		}
		if (cx->io_rc != 0) {
			log_error(cx->x->req.request_id, "replay of %s: %s",
			    cx->rkey, cx->io_err);
			response_problem(resp, PROB_STORED_UNAVAILABLE,
			    "The outcome of this request was recorded, but its "
			    "stored response could not be read. The charge was "
			    "not executed again.",
			    NULL);
			return;
		}
	} else
		rec->body = NULL; /* ownership moves to the response */
	response_set_body(resp, rec->status, rec->content_type, body,
	    rec->body_len);
	resp->outcome = OUTCOME_REPLAYED;
	metrics_inc(MC_REPLAYS);
	(void)response_header(resp, "Idempotent-Replayed", "true");
	if (rec->retry_after[0] != '\0')
		(void)response_header(resp, "Retry-After", "%s",
		    rec->retry_after);
	header_expires(cx, rec->expires_ms);
}

void
answer_recorded(struct charge_ctx *cx)
{
	struct response *resp = &cx->x->resp;
	struct idem_record *out = &cx->out;

	response_set_body(resp, out->status, out->content_type, out->body,
	    out->body_len);
	out->body = NULL;
	resp->outcome = cx->prob == PROB_NONE ? OUTCOME_CREATED
	                                      : problem_info(cx->prob)->slug;
	(void)response_header(resp, "Idempotent-Replayed", "false");
	if (out->retry_after[0] != '\0')
		(void)response_header(resp, "Retry-After", "%s",
		    out->retry_after);
	/* the expires_ms record.lua stored: now + TTL */
	header_expires(cx, cx->now_ms + cx->ttl_ms);
}
