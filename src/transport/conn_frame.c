/*
 * conn_frame.c - a FastCGI connection's output as records (see
 * conn_frame.h).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conn_frame.h"
#include "util.h"

#define SCRATCH_FIRST 1024 /* bytes: first allocation of the scratch */
/* bytes: a larger scratch is freed after its answer */
#define SCRATCH_KEEP 16384
#define VALUES_MAX 256 /* bytes of an FCGI_GET_VALUES_RESULT */

int
conn_frame_end(struct sock *s, unsigned id, int protocol_status)
{
	char *p = sock_out_room(s, FCGI_END_REQUEST_SIZE);

	if (p == NULL)
		return -1;
	sock_out_commit(s, fcgi_write_end(p, id, 0, protocol_status));
	return 0;
}

/* The response_sink of conn_frame_response. */
static int
scratch_write(void *ctx, const char *p, size_t n)
{
	struct conn_frame *f = ctx;

	if (n > SIZE_MAX - f->len ||
	    util_grow(&f->scratch, &f->cap, f->len + n, SCRATCH_FIRST,
	        SIZE_MAX) != 0)
		return -1;
	memcpy(f->scratch + f->len, p, n);
	f->len += n;
	return 0;
}

int
conn_frame_handback(struct sock *s, unsigned id)
{
	char *p = sock_out_room(s, fcgi_stream_size(0));

	if (p == NULL)
		return -1;
	sock_out_commit(s, fcgi_write_stream(p, FCGI_STDERR, id, NULL, 0));
	return 0;
}

int
conn_frame_response(struct sock *s, struct conn_frame *f, unsigned id,
    const struct exchange *x, int handback)
{
	struct response_sink sink = { scratch_write, f };
	int head = x->req.method != NULL && strcmp(x->req.method, "HEAD") == 0;
	size_t n;
	int rc;

	f->len = 0;
	if (response_send(&x->resp, x->req.request_id, &sink, head) != 0)
		return -1;
	n = fcgi_stream_size(f->len) + 2 * fcgi_stream_size(0) +
	    FCGI_END_REQUEST_SIZE;
	if (util_grow(&f->framed, &f->framed_cap, n, SCRATCH_FIRST, SIZE_MAX) !=
	    0)
		return -1;
	n = fcgi_write_stream(f->framed, FCGI_STDOUT, id, f->scratch, f->len);
	n += fcgi_write_stream(f->framed + n, FCGI_STDOUT, id, NULL, 0);
	n += fcgi_write_end(f->framed + n, id, 0, FCGI_REQUEST_COMPLETE);
	if (handback)
		n += fcgi_write_stream(f->framed + n, FCGI_STDERR, id, NULL, 0);
	rc = sock_write(s, f->framed, n);
	if (f->cap > SCRATCH_KEEP || f->framed_cap > SCRATCH_KEEP) {
		/* after one large answer */
		conn_frame_free(f);
		memset(f, 0, sizeof(*f));
	}
	return rc;
}

void
conn_frame_management(struct sock *s, const struct fcgi_event *ev,
    unsigned max_reqs)
{
	char tmp[VALUES_MAX], *p;
	size_t n;

	if (ev->type == FCGI_EV_UNKNOWN) {
		if ((p = sock_out_room(s, FCGI_UNKNOWN_TYPE_SIZE)) != NULL)
			sock_out_commit(s,
			    fcgi_write_unknown_type(p, ev->unknown_type));
		return;
	}
	/* one request at a time per connection: max_reqs bounds both */
	n = fcgi_write_values(tmp, sizeof(tmp), ev->params, ev->nparams,
	    max_reqs, max_reqs, 0);
	if (n > 0 && (p = sock_out_room(s, n)) != NULL) {
		memcpy(p, tmp, n);
		sock_out_commit(s, n);
	}
}

void
conn_frame_free(struct conn_frame *f)
{
	if (f == NULL)
		return;
	free(f->scratch);
	free(f->framed);
}
