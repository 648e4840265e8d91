/*
 * charge_answer.c - every answer of the /charge use case, one function per
 * kind and one text per problem. charge.c decides which; this file says
 * it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge_answer.h"
#include "charge_object.h"
#include "log.h"
#include "metrics.h"
#include "timefmt.h"
#include "util.h"

#define JSON_CTYPE "application/json"
#define PROBLEM_CTYPE "application/problem+json"

/* The fixed texts, one row per answer. */
static const struct {
	enum problem prob;
	const char *detail;
} texts[] = {
	[TEXT_STORE_DOWN] = { PROB_UNAVAILABLE,
	    "The idempotency store is unavailable. Nothing was charged; retry with the same key." },
	[TEXT_LAPSED] = { PROB_UNAVAILABLE,
	    "This request was held up past its claim on the key before the payment provider charged; nothing was charged. Retry with the same key." },
	[TEXT_NOT_RECORDED] = { PROB_UNAVAILABLE,
	    "The outcome could not be recorded. Retry with the same key after the delay in Retry-After." },
	[TEXT_NOT_DURABLE] = { PROB_NOT_DURABLE,
	    "The outcome was recorded, but not acknowledged by enough Redis replicas. Retry with the same key." },
	[TEXT_STORED_BUSY] = { PROB_UNAVAILABLE,
	    "The outcome of this request was recorded, but its stored response cannot be read right now. Retry with the same key." },
	[TEXT_STORED_UNREADABLE] = { PROB_STORED_UNAVAILABLE,
	    "The outcome of this request was recorded, but its stored response could not be read. The charge was not executed again." },
	[TEXT_INTERNAL] = { PROB_INTERNAL, NULL },
};

void
answer_text(struct response *r, enum charge_text t, long long retry_s)
{
	response_problem(r, texts[t].prob, texts[t].detail, NULL);
	if (retry_s > 0)
		(void)response_header(r, "Retry-After", "%lld", retry_s);
}

/*
 * Idempotency-Key-Expires: when the record (or the claim) the answer comes
 * from expires, as an HTTP-date. Left out when that is unknown (0).
 */
static void
header_expires(struct response *r, long long expires_ms)
{
	char date[HTTP_DATE_LEN + 1];

	if (expires_ms > 0 &&
	    timefmt_http_date(expires_ms, date, sizeof(date)) == 0)
		(void)response_header(r, "Idempotency-Key-Expires", "%s", date);
}

void
answer_refusal(struct response *r, const struct config *cfg,
    enum charge_refusal why, const struct validation *v)
{
	cJSON *extras = NULL, *errors, *e;
	char detail[256];
	int i;

	switch (why) {
	case REFUSE_METHOD:
		response_problem(r, PROB_METHOD_NOT_ALLOWED,
		    "Use POST on /charge.", NULL);
		(void)response_header(r, "Allow", "POST");
		return;
	case REFUSE_UNAUTHORIZED:
		response_problem(r, PROB_UNAUTHORIZED,
		    "Send a valid API key as Authorization: Bearer <key>.",
		    NULL);
		(void)response_header(r, "WWW-Authenticate", "Bearer");
		return;
	case REFUSE_MISSING_KEY:
		response_problem(r, PROB_MISSING_KEY,
		    "Send an Idempotency-Key header: 1-255 visible ASCII characters, unique per payment.",
		    NULL);
		return;
	case REFUSE_INVALID_KEY:
		response_problem(r, PROB_INVALID_KEY,
		    "Idempotency-Key must be 1-255 visible ASCII characters (0x21-0x7E), bare or as a quoted Structured-Field string.",
		    NULL);
		return;
	case REFUSE_MEDIA_TYPE:
		response_problem(r, PROB_UNSUPPORTED_MEDIA_TYPE,
		    "Send the body as Content-Type: application/json.", NULL);
		return;
	case REFUSE_TOO_LARGE:
		(void)snprintf(detail, sizeof(detail),
		    "The body may be at most %ld bytes.",
		    cfg->max_request_bytes);
		response_problem(r, PROB_TOO_LARGE, detail, NULL);
		return;
	case REFUSE_BODY_TIMEOUT:
		(void)snprintf(detail, sizeof(detail),
		    "The request body did not arrive within %d ms.",
		    cfg->request_timeout_ms);
		response_problem(r, PROB_REQUEST_TIMEOUT, detail, NULL);
		return;
	case REFUSE_INVALID: break;
	}
	/* a field may hold a client's UTF-8: never cut a character in half */
	(void)snprintf(detail, sizeof(detail), "%.*s: %.*s",
	    (int)util_utf8_prefix(v->errors[0].field, 90), v->errors[0].field,
	    (int)util_utf8_prefix(v->errors[0].message, 150),
	    v->errors[0].message);
	if ((extras = cJSON_CreateObject()) != NULL &&
	    (errors = cJSON_AddArrayToObject(extras, "errors")) != NULL) {
		for (i = 0; i < v->n; i++) {
			if ((e = cJSON_CreateObject()) == NULL)
				break;
			cJSON_AddItemToArray(errors, e);
			if (cJSON_AddStringToObject(e, "field",
			        v->errors[i].field) == NULL ||
			    cJSON_AddStringToObject(e, "message",
			        v->errors[i].message) == NULL)
				break;
		}
	}
	response_problem(r, PROB_INVALID_REQUEST, detail, extras);
}

void
answer_in_progress(struct response *r, const struct config *cfg,
    long long claim_created_ms)
{
	metrics_inc(MC_CONFLICTS);
	response_problem(r, PROB_IN_PROGRESS,
	    "Another request with this Idempotency-Key is being processed. Retry after the delay in Retry-After with the same key, or send Prefer: wait=N to wait for its outcome.",
	    NULL);
	(void)response_header(r, "Retry-After", "%d",
	    RETRY_AFTER_IN_PROGRESS_S);
	if (claim_created_ms > 0)
		header_expires(r, claim_created_ms + 1000LL * cfg->lock_ttl_s);
}

/*
 * 422 with "mismatched_params": the parameters whose stored digests differ
 * from this request's, in the fixed order; left out when the record holds
 * no digests of this layout.
 */
void
answer_mismatch(struct response *r, const char *stored_params,
    const char *our_params)
{
	int differ[CHARGE_PARAM_COUNT], n, i;
	char detail[256], names[128] = "";
	cJSON *extras = NULL, *list;
	size_t len = 0;

	metrics_inc(MC_MISMATCHES);
	n = charge_params_diff(stored_params, our_params, differ);
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
		    "This Idempotency-Key was already used with different request parameters (%s). Use a new key for a new payment.",
		    names);
	else
		(void)snprintf(detail, sizeof(detail),
		    "This Idempotency-Key was already used with different request parameters. Use a new key for a new payment.");
	response_problem(r, PROB_KEY_REUSED, detail, extras);
}

/* Seconds a client should wait before asking again about an unknown outcome. */
static long
unknown_retry_s(const struct config *cfg)
{
	long steps[CONFIG_SCHEDULE_MAX];
	char err[128];

	if (config_schedule_parse(cfg->completer_schedule_s, steps, err,
	        sizeof(err)) < 1)
		return 1;
	return steps[0];
}

int
answer_outcome_render(const struct provider_result *pr, const char *canon,
    size_t canonlen, const char *key, size_t keylen, const struct config *cfg,
    struct idem_record *out, enum problem *prob)
{
	const char *state = "failed";
	char detail[192];
	cJSON *extras = NULL;
	size_t len = 0;

	memset(out, 0, sizeof(*out));
	if (pr->outcome == PROV_SUCCEEDED) {
		out->body = charge_object_render(canon, canonlen, pr->charge_id,
		    pr->created, key, keylen, &len);
		out->status = 201;
		(void)snprintf(out->state, sizeof(out->state), "completed");
		(void)snprintf(out->content_type, sizeof(out->content_type),
		    JSON_CTYPE);
		*prob = PROB_NONE;
		goto done;
	}
	switch (pr->outcome) {
	case PROV_DECLINED:
		*prob = PROB_DECLINED;
		(void)snprintf(detail, sizeof(detail),
		    "The payment was declined: %s.", pr->decline_code);
		/* a decline that names no charge has no "charge" member */
		if ((extras = cJSON_CreateObject()) == NULL ||
		    cJSON_AddStringToObject(extras, "decline_code",
		        pr->decline_code) == NULL ||
		    (pr->charge_id[0] != '\0' &&
		        cJSON_AddStringToObject(extras, "charge",
		            pr->charge_id) == NULL))
			goto enomem;
		break;
	case PROV_UNKNOWN:
	case PROV_TIMEOUT:
		*prob = PROB_OUTCOME_UNKNOWN;
		state = "unknown";
		out->sent_ms = pr->quiet_ms;
		out->probe_lte = pr->probe_lte;
		(void)snprintf(detail, sizeof(detail),
		    "The payment provider's answer did not come in time: whether the payment was made is not known yet. Retry with the same key to learn the outcome; it is never charged twice.");
		break;
	case PROV_ABSENT:
		*prob = PROB_PROVIDER_ERROR;
		(void)snprintf(detail, sizeof(detail),
		    "The payment provider has no charge for this request: nothing was charged.");
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
	(void)snprintf(out->state, sizeof(out->state), "%s", state);
	(void)snprintf(out->content_type, sizeof(out->content_type),
	    PROBLEM_CTYPE);
	if (*prob == PROB_OUTCOME_UNKNOWN)
		(void)snprintf(out->retry_after, sizeof(out->retry_after),
		    "%ld", unknown_retry_s(cfg));
	else if (*prob != PROB_DECLINED)
		(void)snprintf(out->retry_after, sizeof(out->retry_after), "%d",
		    cfg->failed_ttl_s);
done:
	if (out->body == NULL)
		return -1;
	out->body_len = len;
	return 0;
enomem:
	cJSON_Delete(extras);
	return -1;
}

void
answer_recorded(struct response *r, struct idem_record *out, enum problem prob,
    long long expires_ms, int replayed)
{
	response_set_body(r, out->status, out->content_type, out->body,
	    out->body_len);
	out->body = NULL;
	r->outcome =
	    prob == PROB_NONE ? OUTCOME_CREATED : problem_info(prob)->slug;
	(void)response_header(r, "Idempotent-Replayed",
	    replayed ? "true" : "false");
	if (out->retry_after[0] != '\0')
		(void)response_header(r, "Retry-After", "%s", out->retry_after);
	header_expires(r, expires_ms);
}

void
answer_replay(struct response *r, const struct idem_record *rec, char *body)
{
	response_set_body(r, rec->status, rec->content_type, body,
	    rec->body_len);
	r->outcome = OUTCOME_REPLAYED;
	metrics_inc(MC_REPLAYS);
	(void)response_header(r, "Idempotent-Replayed", "true");
	if (rec->retry_after[0] != '\0')
		(void)response_header(r, "Retry-After", "%s", rec->retry_after);
	header_expires(r, rec->expires_ms);
}
