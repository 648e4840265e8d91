/*
 * http1_read.c - the answer reader of http1_read.h: llhttp's callbacks.
 */
#include <string.h>

#include "http1_read.h"

#define H1_STATUS_MIN 100 /* the lowest status code HTTP has */

/* Appends at[0..len) to a header buffer, as far as it holds. */
static void
span_add(char *buf, size_t *used, size_t cap, const char *at, size_t len)
{
	if (len > cap - *used)
		len = cap - *used;
	memcpy(buf + *used, at, len);
	*used += len;
}

static int
on_hfield(llhttp_t *h, const char *at, size_t len)
{
	struct h1_reader *rd = h->data;

	span_add(rd->hname, &rd->hname_len, sizeof(rd->hname), at, len);
	return 0;
}

static int
on_hvalue(llhttp_t *h, const char *at, size_t len)
{
	struct h1_reader *rd = h->data;

	span_add(rd->hval, &rd->hval_len, sizeof(rd->hval), at, len);
	return 0;
}

static int
on_hvalue_done(llhttp_t *h)
{
	struct h1_reader *rd = h->data;

	if (rd->header != NULL)
		rd->header(rd->arg, rd->hname, rd->hname_len, rd->hval,
		    rd->hval_len);
	rd->hname_len = rd->hval_len = 0;
	return 0;
}

static int
on_headers_done(llhttp_t *h)
{
	struct h1_reader *rd = h->data;

	/* llhttp takes 1 to 3 digits ("HTTP/1.1 0"): no status of HTTP's */
	if (h->status_code < H1_STATUS_MIN)
		return -1;
	rd->status = (int)h->status_code;
	rd->hname_len = rd->hval_len = 0;
	return 0;
}

static int
on_body(llhttp_t *h, const char *at, size_t len)
{
	struct h1_reader *rd = h->data;

	return rd->body != NULL && rd->body(rd->arg, at, len) != 0 ? -1 : 0;
}

static int
on_message_begin(llhttp_t *h)
{
	struct h1_reader *rd = h->data;

	rd->hname_len = rd->hval_len = 0;
	/* bytes after the answer: not ours, the connection is not kept */
	return rd->complete ? -1 : 0;
}

static int
on_message_done(llhttp_t *h)
{
	struct h1_reader *rd = h->data;

	/* a 1xx is not the answer: the real one follows */
	if (h->status_code >= 100 && h->status_code < 200)
		return 0;
	rd->complete = 1;
	/* only here: after the message, llhttp has forgotten its headers */
	rd->keep = llhttp_should_keep_alive(h);
	return 0;
}

static const llhttp_settings_t settings = {
	.on_message_begin = on_message_begin,
	.on_header_field = on_hfield,
	.on_header_value = on_hvalue,
	.on_header_value_complete = on_hvalue_done,
	.on_headers_complete = on_headers_done,
	.on_body = on_body,
	.on_message_complete = on_message_done,
};

void
h1_read_start(struct h1_reader *rd, h1_header_fn *header, h1_body_fn *body,
    void *arg)
{
	memset(rd, 0, sizeof(*rd));
	llhttp_init(&rd->parser, HTTP_RESPONSE, &settings);
	rd->parser.data = rd;
	rd->header = header;
	rd->body = body;
	rd->arg = arg;
}

llhttp_errno_t
h1_read(struct h1_reader *rd, const char *p, size_t n)
{
	return llhttp_execute(&rd->parser, p, n);
}

int
h1_read_eof(struct h1_reader *rd)
{
	return llhttp_finish(&rd->parser) == HPE_OK && rd->complete;
}
