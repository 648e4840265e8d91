/*
 * conn_int.h - inside a FastCGI connection: its state, shared by conn.c
 * (the socket: reads, writes, lingering close) and conn_request.c (records
 * to requests and back). Not for other modules: they use conn.h.
 */
#ifndef CHARGE_CONN_INT_H
#define CHARGE_CONN_INT_H

#include <stddef.h>

#include <uv.h>

#include "exchange.h"
#include "fcgi_codec.h"

struct conn_host;

enum conn_state {
	C_IDLE,     /* between requests */
	C_PARAMS,   /* BEGIN seen, params coming */
	C_BODY,     /* params done, body coming */
	C_SERVING,  /* dispatched: the use case has it */
	C_DRAINING, /* answered; reading to the end of STDIN */
	C_LINGER,   /* output shut down; reading until the peer closes */
};

/* Why a request is answered 503 without reaching its use case. */
enum conn_refusal {
	REFUSE_NONE,
	REFUSE_OVERLOADED,  /* max_inflight requests in flight */
	REFUSE_BODY_MEMORY, /* bodies in flight hold body_memory_max_bytes */
};

/*
 * An exchange as a connection allocates it, with what it holds of the
 * process's bounds until it is freed (conn_exchange_free): its slot of
 * max_inflight and the bytes of its body.
 */
struct conn_work {
	struct exchange x;
	int counted;      /* counts in *h->inflight */
	size_t body_held; /* bytes counted in *h->body_bytes */
	size_t body_cap;  /* bytes allocated at x.req.body */
};

struct conn {
	struct conn_host *h;
	/*
	 * The deadline of the state: reading a request's params and body, the
	 * drain of an answered request's input, the lingering close, or a kept
	 * connection's idleness.
	 */
	uv_timer_t timer;
	uv_timer_t out_timer; /* output unsent and not moving: runs */
	int handles;          /* of timer and out_timer, not yet closed */
	int fd;
	struct fcgi_reader *rd;
	enum conn_state state;
	unsigned req_id;
	int keep_conn;
	int stdin_ended;
	int aborted; /* ABORT_REQUEST while serving: send no stdout */
	enum conn_refusal refuse; /* the request in progress gets 503 */
	size_t want;              /* body bytes announced (CONTENT_LENGTH) */
	size_t discarded;         /* bytes of STDIN read past the body */
	struct exchange *x;
	char *out; /* pending output: out[out_off..out_len) */
	size_t out_len, out_off, out_cap;
	char *scratch; /* an answer being rendered, before its framing */
	size_t scratch_len, scratch_cap;
	unsigned poll_events; /* EPOLLIN, EPOLLOUT in the host's set */
	int closing;          /* close once the output is flushed */
	int closed;           /* handles closing: nothing more happens */
	int processing;       /* inside conn_process (re-entry guard) */
	int served;           /* requests begun on this connection */
	int linger;           /* close by shutdown, then wait for the peer */
	int rd_eof;           /* the peer shut its side: no more input */
	int out_paused;       /* reading stopped: too much output unsent */
	int idle_wait;        /* the timer is the idle kept connection's */
	struct conn *prev, *next;
};

/* conn.c: the socket */

/* Output bytes not yet written. */
static inline size_t
conn_out_pending(const struct conn *c)
{
	return c->out_len - c->out_off;
}

/* 1 when more output is unsent than conn_output_max_bytes. */
int conn_out_full(const struct conn *c);
/* Sets c's poll to what its state wants: reading, writing. 0 or -1. */
int conn_poll_update(struct conn *c);
/* Room for n more bytes of output. 0, or -1 on ENOMEM. */
int conn_out_reserve(struct conn *c, size_t n);
/* Appends END_REQUEST (and nothing else) for id. 0 or -1. */
int conn_out_end(struct conn *c, unsigned id, int protocol_status);
/* x's response as STDOUT records, the empty one, END_REQUEST. 0 or -1. */
int conn_out_response(struct conn *c, const struct exchange *x);
/* What the host's epoll set reports for c (EPOLLIN, EPOLLOUT). 0 or -1. */
int conn_poll(struct conn *c, unsigned events);
/* Writes what is pending; the rest when the socket is writable. */
void conn_flush(struct conn *c);
/* Closes c (its handles close later); a request in progress detaches. */
void conn_close(struct conn *c);

/* conn_request.c: records to requests */

/* Acts on every complete event the reader holds. */
void conn_process(struct conn *c);
/* The request is over on this connection: next one, or close. */
void conn_request_complete(struct conn *c);
/* The request in progress is answered 503 at once (the drain is over). */
void conn_answer_unavailable(struct conn *c);
/* Frees an exchange the connection owns or gave up. */
void conn_exchange_free(struct conn_host *h, struct exchange *x);
/* The params or the body did not come within request_timeout_ms. */
void conn_on_read_timeout(uv_timer_t *t);

#endif
