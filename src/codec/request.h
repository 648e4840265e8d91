/*
 * request.h - one request read from FastCGI params or the CGI environment
 * and a body stream, within limits. Both paths fill the same struct.
 */
#ifndef CHARGE_REQUEST_H
#define CHARGE_REQUEST_H

#include <stddef.h>

#include "defaults.h"
#include "fcgi_codec.h"

struct request_source {
	/*
	 * The CGI variables as "NAME=value" strings, NULL-terminated: FastCGI's
	 * request envp or the process environment. They live until the
	 * request ends.
	 */
	char **envp;
	/*
	 * Reads up to n bytes: > 0 bytes read, 0 end of body, -1 error,
	 * READ_TIMED_OUT when nothing arrived in time.
	 */
	long (*read)(void *ctx, char *buf, size_t n);
	void *ctx;
	long long deadline_us; /* monotonic; 0: none. Reading stops past it */
};

#define READ_TIMED_OUT (-2L)

enum body_status {
	BODY_OK,
	BODY_TOO_LARGE,
	BODY_BAD_LENGTH,
	BODY_SHORT,
	BODY_TIMEOUT
};

#define REQUEST_PATH_SIZE 2048 /* bytes, with the NUL */

struct request {
	const char *method;
	const char *content_type;
	const char *authorization;
	const char *idem_key;
	const char *prefer;
	const char *signature; /* Stripe-Signature (the webhook route) */
	/*
	 * The path part of REQUEST_URI (or SCRIPT_NAME+PATH_INFO), still
	 * percent-encoded; room for /charge/keys/ and the longest key of
	 * §4.2 in any spelling (a quoted 255-byte key of backslashes, every
	 * byte encoded: 1549 bytes). A longer path is kept cut and ending in
	 * a lone '%', which no route accepts (request_set_path).
	 */
	char path[REQUEST_PATH_SIZE];
	char *body; /* malloc'd, NUL-terminated, may be NULL when empty */
	size_t body_len;
	size_t content_length;
	enum body_status body_status;
	/* the client's X-Request-Id when acceptable, else 32 random hex */
	char request_id[REQUEST_ID_MAX + 1];
	/* W3C Trace Context: the client's trace (or a new one) and the
	 * traceparent the responder sends on (its own span id) */
	char trace_id[TRACE_ID_HEX + 1];
	char traceparent[TRACEPARENT_LEN + 1];
	long long start_us; /* monotonic microseconds */
	/* FastCGI: the params as "NAME=value" strings (owned) */
	char *env_block;
	char **envp;
	int nul_param;     /* a name or value held a NUL byte */
	char nul_name[64]; /* the first such name, cut */
};

/*
 * Fills r from src; reads the body when CONTENT_LENGTH <= max_body (a larger
 * body is not read: BODY_TOO_LARGE). drain (CGI): read and discard what is
 * left of the stream (bounded by 4 * max_body), and without CONTENT_LENGTH
 * read the body to end of stream. 0, or -1 on ENOMEM/entropy error.
 */
int request_read(struct request *r, const struct request_source *src,
    size_t max_body, int drain);
/*
 * Fills r from a FastCGI request's params (their lengths kept: a NUL inside
 * a name or value sets nul_param, which the caller answers with 400). The
 * body is the caller's to read: *want bytes (CONTENT_LENGTH) when
 * body_status is BODY_OK; BODY_TOO_LARGE or BODY_BAD_LENGTH read none.
 * The caller fills body, body_len and, when the input ended early or late,
 * body_status. 0, or -1 on ENOMEM/entropy error (free r either way).
 */
int request_from_params(struct request *r, const struct fcgi_param *p, size_t n,
    size_t max_body, size_t *want);

/* NULL-safe. */
void request_free(struct request *r);

#endif
