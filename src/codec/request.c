/*
 * request.c - one request from CGI variables and a body stream, within
 * limits. FastCGI and plain CGI both come through request_read().
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "digest.h"
#include "headers.h"
#include "request.h"

#define DRAIN_CHUNK 16384 /* bytes read at a time when discarding a body */

/* The CGI variables the responder reads. */
struct cgi_vars {
	const char *method, *uri, *script, *info, *ctype, *clen, *auth, *key,
	    *prefer, *signature, *xrid, *traceparent;
};

#define VAR(name, field)                                                       \
	{                                                                      \
		name "=", sizeof(name), offsetof(struct cgi_vars, field)       \
	}
static const struct {
	const char *prefix; /* "NAME=" */
	size_t len;         /* strlen(prefix) */
	size_t off;
} cgi_var_table[] = {
	VAR("REQUEST_METHOD", method),
	VAR("REQUEST_URI", uri),
	VAR("SCRIPT_NAME", script),
	VAR("PATH_INFO", info),
	VAR("CONTENT_TYPE", ctype),
	VAR("CONTENT_LENGTH", clen),
	VAR("HTTP_AUTHORIZATION", auth),
	VAR("HTTP_IDEMPOTENCY_KEY", key),
	VAR("HTTP_PREFER", prefer),
	VAR("HTTP_STRIPE_SIGNATURE", signature),
	VAR("HTTP_X_REQUEST_ID", xrid),
	VAR("HTTP_TRACEPARENT", traceparent),
};
#undef VAR

/*
 * One pass over the variables (a FastCGI request carries 30 or more):
 * looking each name up separately scanned the list ten times. The first
 * occurrence of a name wins, as with getenv().
 */
static void
cgi_vars_collect(char **envp, struct cgi_vars *v)
{
	const char **slot;
	size_t i;

	memset(v, 0, sizeof(*v));
	for (; envp != NULL && *envp != NULL; envp++) {
		const char *e = *envp;

		if (e[0] == '\0')
			continue;
		for (i = 0;
		     i < sizeof(cgi_var_table) / sizeof(cgi_var_table[0]);
		     i++) {
			const char *p = cgi_var_table[i].prefix;

			/* two bytes first: most names differ there (e[1]
			 * exists: e[0] is not NUL) */
			if (e[0] != p[0] || e[1] != p[1] ||
			    strncmp(e, p, cgi_var_table[i].len) != 0)
				continue;
			slot =
			    (const char **)((char *)v + cgi_var_table[i].off);
			if (*slot == NULL)
				*slot = e + cgi_var_table[i].len;
			break;
		}
	}
}

/*
 * The path part of REQUEST_URI, else SCRIPT_NAME + PATH_INFO. A path that
 * does not fit is never cut into a shorter one that names another key: its
 * last kept byte becomes a lone '%', malformed percent-encoding, so
 * /charge/keys/... answers 400 invalid-idempotency-key (docs/API.md §14)
 * and no exact route (all far shorter) matches: 404.
 */
static void
request_set_path(struct request *r, const struct cgi_vars *v)
{
	size_t n;
	int len;

	if (v->uri != NULL && v->uri[0] != '\0') {
		n = strcspn(v->uri, "?#");
		if (n >= sizeof(r->path)) {
			memcpy(r->path, v->uri, sizeof(r->path) - 2);
			r->path[sizeof(r->path) - 2] = '%';
			r->path[sizeof(r->path) - 1] = '\0';
			return;
		}
		memcpy(r->path, v->uri, n);
		r->path[n] = '\0';
		return;
	}
	len = snprintf(r->path, sizeof(r->path), "%s%s",
	    v->script != NULL ? v->script : "", v->info != NULL ? v->info : "");
	if (len < 0)
		(void)snprintf(r->path, sizeof(r->path), "%%");
	else if ((size_t)len >= sizeof(r->path))
		r->path[sizeof(r->path) - 2] = '%';
}

/*
 * Reads until n bytes, the end of the stream or the deadline; returns the
 * bytes read, *timed_out set when the deadline ended it.
 */
static size_t
source_read(const struct request_source *src, char *buf, size_t n,
    int *timed_out)
{
	size_t got = 0;
	long r;

	while (got < n) {
		if (src->deadline_us != 0 &&
		    now_mono_us() >= src->deadline_us) {
			*timed_out = 1;
			break;
		}
		r = src->read(src->ctx, buf + got, n - got);
		if (r == READ_TIMED_OUT)
			*timed_out = 1;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* Reads and discards the rest of the stream, at most limit bytes. */
static void
request_drain(const struct request_source *src, size_t limit)
{
	char buf[DRAIN_CHUNK];
	size_t total = 0, n;
	int timed_out = 0;

	while (total < limit && !timed_out) {
		n = source_read(src, buf, sizeof(buf), &timed_out);
		total += n;
		if (n < sizeof(buf))
			break;
	}
}

/*
 * The request's id (the client's X-Request-Id when acceptable, else 32
 * random hex) and its trace (the client's traceparent's trace-id, else a
 * new one) with the traceparent to send on: the same trace, a span id of
 * this request's own. 0 or -1 (no entropy).
 */
static int
request_ids(struct request *r, const struct cgi_vars *v)
{
	char span[SPAN_ID_HEX + 1], flags[3] = "00";

	if (request_id_acceptable(v->xrid))
		memcpy(r->request_id, v->xrid, strlen(v->xrid) + 1);
	else if (digest_random_hex(r->request_id, TOKEN_HEX_LEN / 2) != 0)
		return -1;
	if (traceparent_parse(v->traceparent, r->trace_id, flags) != 0 &&
	    digest_random_hex(r->trace_id, TRACE_ID_HEX / 2) != 0)
		return -1;
	if (digest_random_hex(span, SPAN_ID_HEX / 2) != 0)
		return -1;
	(void)snprintf(r->traceparent, sizeof(r->traceparent), "00-%s-%s-%s",
	    r->trace_id, span, flags);
	return 0;
}

/* The variables of envp into r: ids, method, headers, path. 0 or -1. */
static int
request_start(struct request *r, char **envp, struct cgi_vars *v)
{
	r->start_us = now_mono_us();
	cgi_vars_collect(envp, v);
	if (request_ids(r, v) != 0)
		return -1;
	r->method = v->method != NULL ? v->method : "GET";
	r->content_type = v->ctype;
	r->authorization = v->auth;
	r->idem_key = v->key;
	r->prefer = v->prefer;
	r->signature = v->signature;
	request_set_path(r, v);
	return 0;
}

int
request_from_params(struct request *r, const struct fcgi_param *p, size_t n,
    size_t max_body, size_t *want)
{
	struct cgi_vars v;
	size_t i, total = 0;
	char *q;

	memset(r, 0, sizeof(*r));
	*want = 0;
	/* "NAME=value\0" each, in one block; then the NULL-ended array */
	for (i = 0; i < n; i++) {
		if (memchr(p[i].name, '\0', p[i].namelen) != NULL ||
		    memchr(p[i].value, '\0', p[i].valuelen) != NULL) {
			r->nul_param = 1;
			(void)snprintf(r->nul_name, sizeof(r->nul_name), "%.*s",
			    (int)p[i].namelen, p[i].name);
		}
		total += p[i].namelen + p[i].valuelen + 2;
	}
	if ((r->env_block = malloc(total + 1)) == NULL ||
	    (r->envp = calloc(n + 1, sizeof(char *))) == NULL)
		return -1;
	for (q = r->env_block, i = 0; i < n; i++) {
		r->envp[i] = q;
		memcpy(q, p[i].name, p[i].namelen);
		q += p[i].namelen;
		*q++ = '=';
		memcpy(q, p[i].value, p[i].valuelen);
		q += p[i].valuelen;
		*q++ = '\0';
	}
	if (request_start(r, r->envp, &v) != 0)
		return -1;
	switch (content_length_parse(v.clen, max_body, want)) {
	case CLEN_OK: r->body_status = BODY_OK; break;
	case CLEN_TOO_LARGE: r->body_status = BODY_TOO_LARGE; break;
	case CLEN_INVALID: r->body_status = BODY_BAD_LENGTH; break;
	}
	if (r->body_status != BODY_OK)
		*want = 0;
	r->content_length = *want;
	return 0;
}

int
request_read(struct request *r, const struct request_source *src,
    size_t max_body, int drain)
{
	struct cgi_vars v;
	size_t want = 0, got;
	int to_eof = 0, timed_out = 0;

	memset(r, 0, sizeof(*r));
	if (request_start(r, src->envp, &v) != 0)
		return -1;

	if (drain && v.clen == NULL) {
		/*
		 * CGI without CONTENT_LENGTH: Apache's mod_cgid passes a chunked
		 * body that way. Read to the end of the stream (one byte past
		 * the limit tells a body that is too large), so CGI accepts what
		 * the FastCGI servers, which buffer and count such bodies, do.
		 */
		to_eof = 1;
		want = max_body + 1;
	} else {
		switch (content_length_parse(v.clen, max_body, &want)) {
		case CLEN_OK: break;
		case CLEN_TOO_LARGE:
			r->body_status = BODY_TOO_LARGE;
			goto drain;
		case CLEN_INVALID: r->body_status = BODY_BAD_LENGTH; goto drain;
		}
	}
	if ((r->body = malloc(want + 1)) == NULL)
		return -1;
	got = source_read(src, r->body, want, &timed_out);
	r->body[got] = '\0';
	r->body_len = got;
	if (timed_out) {
		r->body_status = BODY_TIMEOUT;
		return 0; /* nothing more to drain: the client stalled */
	}
	if (to_eof && got > max_body) {
		r->body_status = BODY_TOO_LARGE;
		free(r->body);
		r->body = NULL;
		r->body_len = 0;
	} else if (to_eof) {
		r->content_length = got;
		r->body_status = BODY_OK;
	} else {
		r->content_length = want;
		r->body_status = got < want ? BODY_SHORT : BODY_OK;
	}
drain:
	if (drain)
		request_drain(src, 4 * max_body);
	return 0;
}

void
request_free(struct request *r)
{
	if (r == NULL)
		return;
	free(r->body);
	r->body = NULL;
	free(r->envp);
	r->envp = NULL;
	free(r->env_block);
	r->env_block = NULL;
}
