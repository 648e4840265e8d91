/*
 * exchange.h - one request in flight and the response it will get, as the
 * use cases see it, whatever carried it (a FastCGI connection or plain
 * CGI). A handler fills resp, then calls exchange_finish() exactly once,
 * at once or from a later callback; the transport then sends the response
 * and frees the exchange. While a request waits (Redis, the provider, a
 * timer) its state is this struct and the handler's own: no thread, no
 * stack.
 */
#ifndef CHARGE_EXCHANGE_H
#define CHARGE_EXCHANGE_H

#include "request.h"
#include "response.h"

struct worker; /* worker.h: a handler that uses the loop's things includes it */

struct exchange {
	struct worker *w; /* the loop serving it */
	struct request req;
	struct response resp;
	/* the transport's: sends resp, frees the exchange */
	void (*done)(struct exchange *x);
	void *transport;      /* the connection; NULL once it went away */
	void *transport_host; /* what outlives it (the loop's side) */
};

/* Hands the finished response to the transport (x may be freed). */
static inline void
exchange_finish(struct exchange *x)
{
	x->done(x);
}

#endif
