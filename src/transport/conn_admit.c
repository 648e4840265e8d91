/*
 * conn_admit.c - a request admitted within the process's bounds: its slot
 * of max_inflight and its body's bytes (see conn_admit.h).
 */
#include <stdlib.h>
#include <string.h>

#include "conn_admit.h"
#include "util.h"

#define BODY_FIRST 4096 /* bytes: first allocation of a body */

struct conn_admitted {
	struct exchange x; /* first: admitted_of() */
	struct conn_bounds *b;
	int counted;      /* counts in *b->inflight */
	size_t body_held; /* bytes counted in *b->body_bytes */
	size_t body_cap;  /* bytes allocated at x.req.body */
};

static struct conn_admitted *
admitted_of(struct exchange *x)
{
	return (struct conn_admitted *)(void *)x;
}

struct exchange *
conn_admit_new(struct conn_bounds *b)
{
	struct conn_admitted *a;

	if ((a = calloc(1, sizeof(*a))) == NULL)
		return NULL;
	a->b = b;
	response_init(&a->x.resp);
	return &a->x;
}

int
conn_admit_slot(struct exchange *x, int max_inflight)
{
	struct conn_admitted *a = admitted_of(x);

	if (a->counted)
		return 1;
	if (__atomic_add_fetch(a->b->inflight, 1, __ATOMIC_RELAXED) >
	    max_inflight) {
		__atomic_sub_fetch(a->b->inflight, 1, __ATOMIC_RELAXED);
		return 0;
	}
	a->counted = 1;
	return 1;
}

enum conn_body
conn_admit_body(struct exchange *x, const char *p, size_t n, size_t want,
    long max_bytes)
{
	struct conn_admitted *a = admitted_of(x);
	struct request *r = &x->req;

	if (n > want - r->body_len)
		return CONN_BODY_NOMEM; /* the caller keeps within want */
	if (__atomic_add_fetch(a->b->body_bytes, (long)n, __ATOMIC_RELAXED) >
	    max_bytes) {
		__atomic_sub_fetch(a->b->body_bytes, (long)n, __ATOMIC_RELAXED);
		return CONN_BODY_FULL;
	}
	a->body_held += n;
	if (util_grow(&r->body, &a->body_cap, r->body_len + n + 1, BODY_FIRST,
	        want + 1) != 0)
		return CONN_BODY_NOMEM;
	memcpy(r->body + r->body_len, p, n);
	r->body_len += n;
	r->body[r->body_len] = '\0';
	return CONN_BODY_OK;
}

void
conn_admit_free(struct exchange *x)
{
	struct conn_admitted *a = admitted_of(x);

	if (a->counted)
		__atomic_sub_fetch(a->b->inflight, 1, __ATOMIC_RELAXED);
	if (a->body_held > 0)
		__atomic_sub_fetch(a->b->body_bytes, (long)a->body_held,
		    __ATOMIC_RELAXED);
	request_free(&x->req);
	response_free(&x->resp);
	free(a);
}
