/*
 * conn_admit.h - admission: a request as a FastCGI connection makes it,
 * its exchange, with what it holds of the process's bounds until it is
 * freed: a slot of max_inflight and the bytes of its body, which grows as
 * they arrive.
 * Whether the connection still exists makes no difference here: a request
 * holds its share until its work ends.
 */
#ifndef CHARGE_CONN_ADMIT_H
#define CHARGE_CONN_ADMIT_H

#include <stddef.h>

#include "exchange.h"

/* The process's counters the requests of every loop share (atomic). */
struct conn_bounds {
	int *inflight;    /* requests in flight */
	long *body_bytes; /* bytes their bodies hold */
};

/* A new exchange (response initialised), or NULL on ENOMEM. */
struct exchange *conn_admit_new(struct conn_bounds *b);

/* Takes a slot of max_inflight: 1, or 0 when all are taken. */
int conn_admit_slot(struct exchange *x, int max_inflight);

enum conn_body {
	CONN_BODY_OK,
	CONN_BODY_FULL,  /* the bodies would hold more than max_bytes */
	CONN_BODY_NOMEM, /* ENOMEM */
};

/*
 * Appends n bytes to x's body (at most want in all, NUL-terminated),
 * counted against max_bytes for the process. Nothing is appended unless
 * CONN_BODY_OK.
 */
enum conn_body conn_admit_body(struct exchange *x, const char *p, size_t n,
    size_t want, long max_bytes);

/* Frees x, giving back its slot and its body's bytes. */
void conn_admit_free(struct exchange *x);

#endif
