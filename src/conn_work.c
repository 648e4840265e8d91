/*
 * conn_work.c - a request and its share of the process's bounds (see
 * conn_work.h).
 */
#include <stdlib.h>
#include <string.h>

#include "conn_work.h"
#include "util.h"

#define BODY_FIRST 4096 /* bytes: first allocation of a body */

struct conn_work {
	struct exchange x; /* first: work_of() */
	struct conn_bounds *b;
	int counted;      /* counts in *b->inflight */
	size_t body_held; /* bytes counted in *b->body_bytes */
	size_t body_cap;  /* bytes allocated at x.req.body */
};

static struct conn_work *
work_of(struct exchange *x)
{
	return (struct conn_work *)(void *)x;
}

struct exchange *
conn_work_new(struct conn_bounds *b)
{
	struct conn_work *w;

	if ((w = calloc(1, sizeof(*w))) == NULL)
		return NULL;
	w->b = b;
	response_init(&w->x.resp);
	return &w->x;
}

int
conn_work_admit(struct exchange *x, int max_inflight)
{
	struct conn_work *w = work_of(x);

	if (w->counted)
		return 1;
	if (__atomic_add_fetch(w->b->inflight, 1, __ATOMIC_RELAXED) >
	    max_inflight) {
		__atomic_sub_fetch(w->b->inflight, 1, __ATOMIC_RELAXED);
		return 0;
	}
	w->counted = 1;
	return 1;
}

enum conn_body
conn_work_append(struct exchange *x, const char *p, size_t n, size_t want,
    long max_bytes)
{
	struct conn_work *w = work_of(x);
	struct request *r = &x->req;

	if (n > want - r->body_len)
		return CONN_BODY_NOMEM; /* the caller keeps within want */
	if (__atomic_add_fetch(w->b->body_bytes, (long)n, __ATOMIC_RELAXED) >
	    max_bytes) {
		__atomic_sub_fetch(w->b->body_bytes, (long)n, __ATOMIC_RELAXED);
		return CONN_BODY_FULL;
	}
	w->body_held += n;
	if (util_grow(&r->body, &w->body_cap, r->body_len + n + 1, BODY_FIRST,
	        want + 1) != 0)
		return CONN_BODY_NOMEM;
	memcpy(r->body + r->body_len, p, n);
	r->body_len += n;
	r->body[r->body_len] = '\0';
	return CONN_BODY_OK;
}

void
conn_work_free(struct exchange *x)
{
	struct conn_work *w = work_of(x);

	if (w->counted)
		__atomic_sub_fetch(w->b->inflight, 1, __ATOMIC_RELAXED);
	if (w->body_held > 0)
		__atomic_sub_fetch(w->b->body_bytes, (long)w->body_held,
		    __ATOMIC_RELAXED);
	request_free(&x->req);
	response_free(&x->resp);
	free(w);
}
