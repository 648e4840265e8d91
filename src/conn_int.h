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

struct conn {
	struct conn_host *h;
	uv_timer_t timer; /* the request's read deadline, or the drain's */
	int fd;
	struct fcgi_reader *rd;
	enum conn_state state;
	unsigned req_id;
	int keep_conn;
	int stdin_ended;
	int aborted;      /* ABORT_REQUEST while serving: send no stdout */
	int counted;      /* the request counts in *h->inflight */
	size_t want;      /* body bytes announced (CONTENT_LENGTH) */
	size_t discarded; /* bytes of STDIN read past the body */
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
	struct conn *prev, *next;
};

/* conn.c: the socket */

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
/* Frees an exchange the connection owns or gave up. */
void conn_exchange_free(struct conn_host *h, struct exchange *x);
/* The request stops counting against max_inflight. */
void conn_inflight_release(struct conn *c);
/* The params or the body did not come within request_timeout_ms. */
void conn_on_read_timeout(uv_timer_t *t);

#endif
