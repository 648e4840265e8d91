/*
 * response.h - one HTTP response: status, headers, body; problem+json
 * (RFC 9457) with one table mapping each problem to status and type URI.
 */
#ifndef CHARGE_RESPONSE_H
#define CHARGE_RESPONSE_H

#include <stddef.h>

#include <cJSON.h>

enum problem {
	PROB_NONE = -1, /* success: no problem to report */
	PROB_NOT_FOUND,
	PROB_METHOD_NOT_ALLOWED,
	PROB_UNAUTHORIZED,
	PROB_MISSING_KEY,
	PROB_INVALID_KEY,
	PROB_UNSUPPORTED_MEDIA_TYPE,
	PROB_TOO_LARGE,
	PROB_REQUEST_TIMEOUT,
	PROB_INVALID_REQUEST,
	PROB_DECLINED,
	PROB_PROVIDER_ERROR,
	PROB_OUTCOME_UNKNOWN, /* 504: the provider's outcome is not known yet */
	PROB_IN_PROGRESS,
	PROB_KEY_REUSED,
	PROB_UNAVAILABLE,
	PROB_STORED_UNAVAILABLE,
	PROB_INTERNAL,
	PROB_NOT_DURABLE,
	PROB_KEY_NOT_FOUND,
	PROB_WEBHOOK_INVALID,  /* 400: the provider's event, or its header */
	PROB_WEBHOOK_REJECTED, /* 401: its signature is not accepted */
	PROB_COUNT
};

struct problem_info {
	const char
	    *slug; /* type = "/problems/<slug>"; also the metrics outcome */
	int status;
	const char *title;
};

/* Never NULL; p outside the table gives the internal-error row. */
const struct problem_info *problem_info(enum problem p);

/*
 * The labels of a request's outcome (charge_requests_total{outcome=...}):
 * every problem's slug, then these successes, then OUTCOME_OTHER. One
 * table, in response.c.
 */
extern const char OUTCOME_CREATED[];   /* "created" */
extern const char OUTCOME_REPLAYED[];  /* "replayed" */
extern const char OUTCOME_OK[];        /* "ok": /healthz, /metrics */
extern const char OUTCOME_KEY_FOUND[]; /* "key-found": GET /charge/keys/<key> */
extern const char OUTCOME_OTHER[];     /* "other": anything unlabelled */
#define OUTCOME_COUNT (PROB_COUNT + 5)

/* The i-th label (i < OUTCOME_COUNT), or NULL. */
const char *outcome_label(size_t i);

/*
 * Renders {"type","title","status","detail",...extras} as compact JSON.
 * extras (an object, may be NULL) is consumed. Malloc'd; NULL on ENOMEM.
 */
char *problem_render(enum problem p, const char *detail, cJSON *extras,
    size_t *len);

#define RESPONSE_HEADERS_MAX 512

struct response {
	int status;
	char content_type[128];
	char headers[RESPONSE_HEADERS_MAX]; /* extra "Name: value\r\n" lines */
	size_t headers_len;
	char *body; /* owned (malloc'd) */
	size_t body_len;
	const char *outcome; /* metrics label, static string */
};

void response_init(struct response *r);
/* NULL-safe; frees the body. */
void response_free(struct response *r);
/* Adds one header line; 0, or -1 when it does not fit (nothing added). */
int response_header(struct response *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Takes ownership of body (malloc'd). */
void response_set_body(struct response *r, int status, const char *ctype,
    char *body, size_t len);
/* Copies body into the response. 0 or -1 (ENOMEM: becomes a bare 500). */
int response_copy_body(struct response *r, int status, const char *ctype,
    const char *body, size_t len);
/*
 * A problem response; extras consumed. On ENOMEM a fixed 500 body is used.
 */
void response_problem(struct response *r, enum problem p, const char *detail,
    cJSON *extras);

struct response_sink {
	int (*write)(void *ctx, const char *p, size_t n); /* 0 or -1 */
	void *ctx;
};

/*
 * Writes the CGI/FastCGI response: Status, Content-Type, Cache-Control:
 * no-store, X-Request-Id, extra headers, blank line, body (unless head_only).
 */
/*
 * Why a request is refused before any use case runs it: 503
 * service-unavailable with Retry-After, nothing claimed or charged.
 */
enum refusal {
	REFUSAL_OVERLOADED,  /* max_inflight requests in flight */
	REFUSAL_BODY_MEMORY, /* bodies in flight hold body_memory_max_bytes */
	REFUSAL_STOPPING,    /* the drain is over */
	REFUSAL_COUNT
};

/* Fills r with the answer of a refusal (one text per reason). */
void response_refusal(struct response *r, enum refusal why);

int response_send(const struct response *r, const char *request_id,
    const struct response_sink *sink, int head_only);

/* Reason phrase for an HTTP status ("Created"), "" when unknown. */
const char *http_reason(int status);

#endif
