/*
 * response.c - building and writing responses; problem+json (RFC 9457).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defaults.h"
#include "response.h"
#include "util.h"

#define PROBLEM_CTYPE "application/problem+json"

/* One row per problem: the only place that maps outcomes to HTTP. */
static const struct problem_info problems[PROB_COUNT] = {
	[PROB_NOT_FOUND] = { "not-found", 404, "Not Found" },
	[PROB_METHOD_NOT_ALLOWED] = { "method-not-allowed", 405,
	    "Method Not Allowed" },
	[PROB_UNAUTHORIZED] = { "unauthorized", 401, "Unauthorized" },
	[PROB_MISSING_KEY] = { "missing-idempotency-key", 400,
	    "Idempotency-Key header is required" },
	[PROB_INVALID_KEY] = { "invalid-idempotency-key", 400,
	    "Idempotency-Key header is invalid" },
	[PROB_UNSUPPORTED_MEDIA_TYPE] = { "unsupported-media-type", 415,
	    "Unsupported Media Type" },
	[PROB_TOO_LARGE] = { "content-too-large", 413, "Content Too Large" },
	[PROB_REQUEST_TIMEOUT] = { "request-timeout", 408,
	    "The request was not received in time" },
	[PROB_INVALID_REQUEST] = { "invalid-request", 400,
	    "The request body is invalid" },
	[PROB_DECLINED] = { "payment-declined", 402, "Payment declined" },
	[PROB_PROVIDER_ERROR] = { "provider-error", 502,
	    "The payment provider failed" },
	[PROB_OUTCOME_UNKNOWN] = { "outcome-unknown", 504,
	    "The outcome of the payment is not known yet" },
	[PROB_IN_PROGRESS] = { "request-in-progress", 409,
	    "A request with this Idempotency-Key is in progress" },
	[PROB_KEY_REUSED] = { "idempotency-key-reused", 422,
	    "Idempotency-Key reused with different parameters" },
	[PROB_UNAVAILABLE] = { "service-unavailable", 503,
	    "Service temporarily unavailable" },
	[PROB_STORED_UNAVAILABLE] = { "stored-response-unavailable", 500,
	    "The stored response could not be read" },
	[PROB_INTERNAL] = { "internal-error", 500, "Internal Server Error" },
	[PROB_NOT_DURABLE] = { "outcome-not-durable", 503,
	    "The outcome could not be made durable" },
	[PROB_KEY_NOT_FOUND] = { "key-not-found", 404,
	    "Idempotency-Key not found" },
	[PROB_WEBHOOK_INVALID] = { "invalid-webhook", 400,
	    "The webhook request is malformed" },
	[PROB_WEBHOOK_REJECTED] = { "webhook-signature-rejected", 401,
	    "The webhook signature is not accepted" },
};

const char OUTCOME_CREATED[] = "created";
const char OUTCOME_REPLAYED[] = "replayed";
const char OUTCOME_OK[] = "ok";
const char OUTCOME_KEY_FOUND[] = "key-found";
const char OUTCOME_OTHER[] = "other";

const char *
outcome_label(size_t i)
{
	static const char *const successes[] = {
		OUTCOME_CREATED,
		OUTCOME_REPLAYED,
		OUTCOME_OK,
		OUTCOME_KEY_FOUND,
		OUTCOME_OTHER,
	};

	if (i < PROB_COUNT)
		return problems[i].slug;
	i -= PROB_COUNT;
	return i < sizeof(successes) / sizeof(successes[0]) ? successes[i]
	                                                    : NULL;
}

/* Used when even rendering a problem fails for lack of memory. */
static const char fallback_body[] =
    "{\"type\":\"/problems/internal-error\",\"title\":\"Internal Server Error\",\"status\":500}";

const struct problem_info *
problem_info(enum problem p)
{
	if ((unsigned)p >= PROB_COUNT)
		p = PROB_INTERNAL;
	return &problems[p];
}

const char *
http_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 402: return "Payment Required";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 415: return "Unsupported Media Type";
	case 422: return "Unprocessable Content";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "";
	}
}

char *
problem_render(enum problem p, const char *detail, cJSON *extras, size_t *len)
{
	const struct problem_info *pi = problem_info(p);
	char type[96];
	cJSON *o = NULL, *item;
	char *out = NULL;

	(void)snprintf(type, sizeof(type), "/problems/%s", pi->slug);
	if ((o = cJSON_CreateObject()) == NULL)
		goto fail;
	if (cJSON_AddStringToObject(o, "type", type) == NULL ||
	    cJSON_AddStringToObject(o, "title", pi->title) == NULL ||
	    cJSON_AddNumberToObject(o, "status", pi->status) == NULL)
		goto fail;
	if (detail != NULL &&
	    cJSON_AddStringToObject(o, "detail", detail) == NULL)
		goto fail;
	if (extras != NULL) {
		while ((item = extras->child) != NULL) {
			cJSON_DetachItemViaPointer(extras, item);
			cJSON_AddItemToObject(o, item->string, item);
		}
	}
	out = cJSON_PrintUnformatted(o);
	if (out != NULL && len != NULL)
		*len = strlen(out);
fail:
	cJSON_Delete(extras);
	cJSON_Delete(o);
	return out;
}

void
response_init(struct response *r)
{
	memset(r, 0, sizeof(*r));
	r->status = 500;
}

void
response_free(struct response *r)
{
	if (r == NULL)
		return;
	free(r->body);
	r->body = NULL;
	r->body_len = 0;
}

int
response_header(struct response *r, const char *name, const char *fmt, ...)
{
	size_t room = sizeof(r->headers) - r->headers_len;
	char *p = r->headers + r->headers_len;
	struct util_buf b;
	va_list ap;
	int n, m;

	util_buf_init(&b, p, room);
	util_buf_str(&b, name);
	util_buf_put(&b, ": ", 2);
	if ((n = (int)util_buf_len(&b)) < 0)
		goto fail;
	va_start(ap, fmt);
	if (strcmp(fmt, "%s") == 0) {
		/* the usual case, without vsnprintf's format parsing */
		util_buf_str(&b, va_arg(ap, const char *));
		m = util_buf_len(&b) < 0 ? -1 : (int)b.len - n;
	} else if (strchr(fmt, '%') == NULL) {
		util_buf_str(&b, fmt);
		m = util_buf_len(&b) < 0 ? -1 : (int)b.len - n;
	} else
		m = vsnprintf(p + n, room - (size_t)n, fmt, ap);
	va_end(ap);
	if (m < 0 || (size_t)(n + m + 2) >= room)
		goto fail;
	/* header injection: a value never spans lines */
	if (strpbrk(p, "\r\n") != NULL)
		goto fail;
	memcpy(p + n + m, "\r\n", 3);
	r->headers_len += (size_t)(n + m + 2);
	return 0;
fail:
	*p = '\0';
	return -1;
}

/* Copies ctype, cut to fit (content types here are a few dozen bytes). */
static void
copy_ctype(struct response *r, const char *ctype)
{
	size_t n = strnlen(ctype, sizeof(r->content_type) - 1);

	memcpy(r->content_type, ctype, n);
	r->content_type[n] = '\0';
}

void
response_set_body(struct response *r, int status, const char *ctype, char *body,
    size_t len)
{
	free(r->body);
	r->status = status;
	copy_ctype(r, ctype);
	r->body = body;
	r->body_len = len;
}

int
response_copy_body(struct response *r, int status, const char *ctype,
    const char *body, size_t len)
{
	char *copy;

	if ((copy = malloc(len + 1)) == NULL) {
		response_problem(r, PROB_INTERNAL, NULL, NULL);
		return -1;
	}
	memcpy(copy, body, len);
	copy[len] = '\0';
	response_set_body(r, status, ctype, copy, len);
	return 0;
}

void
response_problem(struct response *r, enum problem p, const char *detail,
    cJSON *extras)
{
	const struct problem_info *pi = problem_info(p);
	size_t len = 0;
	char *body;

	if (r->outcome == NULL)
		r->outcome = pi->slug;
	body = problem_render(p, detail, extras, &len);
	if (body == NULL) {
		free(r->body);
		r->body = NULL;
		r->body_len = 0;
		r->status = 500;
		copy_ctype(r, PROBLEM_CTYPE);
		return;
	}
	response_set_body(r, pi->status, PROBLEM_CTYPE, body, len);
}

void
response_refusal(struct response *r, enum refusal why)
{
	static const char *const detail[REFUSAL_COUNT] = {
		[REFUSAL_OVERLOADED] =
		    "Too many requests are in progress. Nothing was charged; retry with the same key.",
		[REFUSAL_BODY_MEMORY] =
		    "The responder holds too many request bodies. Nothing was charged; retry with the same key.",
		[REFUSAL_STOPPING] =
		    "The responder is shutting down. Retry with the same key.",
	};

	response_problem(r, PROB_UNAVAILABLE, detail[why], NULL);
	(void)response_header(r, "Retry-After", "%d",
	    RETRY_AFTER_UNAVAILABLE_S);
}

int
response_send(const struct response *r, const char *request_id,
    const struct response_sink *sink, int head_only)
{
	char head[RESPONSE_HEADERS_MAX + 512];
	const char *body = r->body;
	const char *ctype =
	    r->content_type[0] != '\0' ? r->content_type : PROBLEM_CTYPE;
	size_t body_len = r->body_len;
	int status = r->status;
	struct util_buf b;
	long n;

	if (body == NULL) {
		/* a response without a body here is a bare 500 (ENOMEM) */
		body = fallback_body;
		body_len = sizeof(fallback_body) - 1;
		status = 500;
		ctype = PROBLEM_CTYPE;
	}
	util_buf_init(&b, head, sizeof(head));
	util_buf_str(&b, "Status: ");
	util_buf_ll(&b, status);
	util_buf_str(&b, " ");
	util_buf_str(&b, http_reason(status));
	util_buf_str(&b, "\r\nContent-Type: ");
	util_buf_str(&b, ctype);
	util_buf_str(&b, "\r\nContent-Length: ");
	util_buf_ull(&b, body_len);
	util_buf_str(&b, "\r\nCache-Control: no-store\r\nX-Request-Id: ");
	util_buf_str(&b, request_id);
	util_buf_str(&b, "\r\n");
	util_buf_put(&b, r->headers, r->headers_len);
	util_buf_str(&b, "\r\n");
	if ((n = util_buf_len(&b)) < 0)
		return -1;
	if (sink->write(sink->ctx, head, (size_t)n) != 0)
		return -1;
	if (!head_only && body_len > 0 &&
	    sink->write(sink->ctx, body, body_len) != 0)
		return -1;
	return 0;
}
