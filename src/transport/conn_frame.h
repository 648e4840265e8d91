/*
 * conn_frame.h - a FastCGI connection's output as records: an answer as
 * STDOUT records and END_REQUEST, a bare END_REQUEST, the answers to
 * management records, appended to a socket's output (conn_sock.h). Knows
 * records, not the connection's state.
 */
#ifndef CHARGE_CONN_FRAME_H
#define CHARGE_CONN_FRAME_H

#include <stddef.h>

#include "conn_sock.h"
#include "exchange.h"
#include "fcgi_codec.h"

/*
 * An answer being rendered, then framed as records: a loop's, shared by
 * its connections (an answer is rendered, framed and handed to the socket
 * in one call) and kept between answers.
 */
struct conn_frame {
	char *scratch; /* the rendered answer */
	size_t len, cap;
	char *framed; /* the same as records */
	size_t framed_cap;
};

/* Appends END_REQUEST (and nothing else) for id. 0 or -1 (ENOMEM). */
int conn_frame_end(struct sock *s, unsigned id, int protocol_status);

/*
 * Writes x's response as STDOUT records of id, the empty one and
 * END_REQUEST, rendered through f (sock_write: what the socket does not
 * take at once is kept as its output); with handback, an empty STDERR
 * record of id follows in the same write (conn_frame_handback). 0 or -1
 * (ENOMEM).
 */
int conn_frame_response(struct sock *s, struct conn_frame *f, unsigned id,
    const struct exchange *x, int handback);

/*
 * Appends the hand-back of a kept connection: an empty STDERR record of id
 * (the request answered last; for a web server between requests, the id
 * it uses next). nginx does not keep an upstream connection on which a
 * byte follows END_REQUEST, and closes a cached one that becomes readable;
 * a request it sent at that moment reads it as an empty stderr stream
 * (docs/deploying.md). 0 or -1 (ENOMEM).
 */
int conn_frame_handback(struct sock *s, unsigned id);

/*
 * Appends the answer to a management record (FCGI_GET_VALUES with max_reqs
 * for FCGI_MAX_CONNS and FCGI_MAX_REQS, or FCGI_UNKNOWN_TYPE). Nothing on
 * ENOMEM.
 */
void conn_frame_management(struct sock *s, const struct fcgi_event *ev,
    unsigned max_reqs);

/* NULL-safe. */
void conn_frame_free(struct conn_frame *f);

#endif
