/*
 * request.c - one request from CGI variables and a body stream, within
 * limits. FastCGI and plain CGI both come through request_read().
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "digest.h"
#include "headers.h"
#include "request.h"

#define DRAIN_CHUNK 16384   /* bytes read at a time when discarding a body */

long long
now_mono_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

long long
now_wall_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return 0;
	return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* The path part of REQUEST_URI, else SCRIPT_NAME + PATH_INFO. */
static void
request_set_path(struct request *r, const struct request_source *src)
{
	const char *uri = src->param(src->ctx, "REQUEST_URI");
	const char *script, *info;
	size_t n;

	if (uri != NULL && uri[0] != '\0') {
		n = strcspn(uri, "?#");
		if (n >= sizeof(r->path))
			n = sizeof(r->path) - 1;
		memcpy(r->path, uri, n);
		r->path[n] = '\0';
		return;
	}
	script = src->param(src->ctx, "SCRIPT_NAME");
	info = src->param(src->ctx, "PATH_INFO");
	(void)snprintf(r->path, sizeof(r->path), "%s%s",
	    script != NULL ? script : "", info != NULL ? info : "");
}

static void
request_drain(const struct request_source *src, size_t limit)
{
	char buf[DRAIN_CHUNK];
	size_t total = 0;
	long n;

	while (total < limit) {
		n = src->read(src->ctx, buf, sizeof(buf));
		if (n <= 0)
			break;
		total += (size_t)n;
	}
}

int
request_read(struct request *r, const struct request_source *src,
    size_t max_body, int drain)
{
	const char *clen;
	size_t want = 0, got = 0;
	long n;

	memset(r, 0, sizeof(*r));
	r->start_us = now_mono_us();
	if (digest_random_hex(r->request_id, TOKEN_HEX_LEN / 2) != 0)
		return -1;
	r->method = src->param(src->ctx, "REQUEST_METHOD");
	if (r->method == NULL)
		r->method = "GET";
	r->content_type = src->param(src->ctx, "CONTENT_TYPE");
	r->authorization = src->param(src->ctx, "HTTP_AUTHORIZATION");
	r->idem_key = src->param(src->ctx, "HTTP_IDEMPOTENCY_KEY");
	r->prefer = src->param(src->ctx, "HTTP_PREFER");
	request_set_path(r, src);

	clen = src->param(src->ctx, "CONTENT_LENGTH");
	switch (content_length_parse(clen, max_body, &want)) {
	case CLEN_OK:
		break;
	case CLEN_TOO_LARGE:
		r->body_status = BODY_TOO_LARGE;
		if (drain)
			request_drain(src, 4 * max_body);
		return 0;
	case CLEN_INVALID:
		r->body_status = BODY_BAD_LENGTH;
		if (drain)
			request_drain(src, 4 * max_body);
		return 0;
	}
	r->content_length = want;
	if ((r->body = malloc(want + 1)) == NULL)
		return -1;
	while (got < want) {
		n = src->read(src->ctx, r->body + got, want - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	r->body[got] = '\0';
	r->body_len = got;
	r->body_status = got < want ? BODY_SHORT : BODY_OK;
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
}
