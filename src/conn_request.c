/*
 * conn_request.c - FastCGI records to requests and back, on one
 * connection: BEGIN, params, body, the use case, the answer, the end of the
 * input (see conn.c for the life of a request on a connection).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "app.h"
#include "clock.h"
#include "conn.h"
#include "conn_int.h"
#include "log.h"
#include "metrics.h"

static void on_exchange_done(struct exchange *x);

/* --- one request ----------------------------------------------------------- */

void
conn_exchange_free(struct conn_host *h, struct exchange *x)
{
	request_free(&x->req);
	response_free(&x->resp);
	free(x);
	h->nexchanges--;
	if (h->on_idle != NULL)
		h->on_idle(h);
}

void
conn_inflight_release(struct conn *c)
{
	if (c->counted)
		__atomic_sub_fetch(c->h->inflight, 1, __ATOMIC_RELAXED);
	c->counted = 0;
}

/* The request is over on this connection: next one, or close. */
void
conn_request_complete(struct conn *c)
{
	(void)uv_timer_stop(&c->timer);
	fcgi_reader_request_done(c->rd);
	c->state = C_IDLE;
	c->req_id = 0;
	c->stdin_ended = 0;
	c->aborted = 0;
	c->discarded = 0;
	if (!c->keep_conn || c->h->stopping)
		c->closing = 1;
	conn_flush(c);
	/* reading again if pipelined requests had filled the reader */
	if (!c->closed && conn_poll(c, c->poll_events | EPOLLIN) != 0)
		conn_close(c);
	if (!c->closed && !c->processing)
		conn_process(c);
}

static void
on_drain_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;

	/* answered, but the web server never ended its input: give up */
	conn_close(c);
}

/* The use case is done with x (the exchange's done callback). */
static void
on_exchange_done(struct exchange *x)
{
	struct conn *c = x->transport;
	long long dur = now_mono_us() - x->req.start_us;

	metrics_request(x->resp.outcome, dur);
	log_info(x->req.request_id, "%s %s %d %s %.1fms",
	    x->req.method != NULL ? x->req.method : "-", x->req.path,
	    x->resp.status, x->resp.outcome != NULL ? x->resp.outcome : "-",
	    (double)dur / 1000.0);
	if (c == NULL) { /* the connection went away (or was expired) */
		conn_exchange_free(x->transport_host, x);
		return;
	}
	c->x = NULL;
	conn_inflight_release(c);
	if (!c->aborted && conn_out_response(c, x) != 0)
		log_warn(x->req.request_id, "cannot frame the response");
	else if (c->aborted &&
	    conn_out_end(c, c->req_id, FCGI_REQUEST_COMPLETE))
		log_warn(x->req.request_id, "cannot frame END_REQUEST");
	conn_exchange_free(c->h, x);
	if (c->stdin_ended) {
		conn_request_complete(c);
		return;
	}
	c->state = C_DRAINING;
	fcgi_reader_answered(c->rd);
	(void)uv_timer_start(&c->timer, on_drain_timeout,
	    (uint64_t)c->h->w->cfg->request_timeout_ms, 0);
	conn_flush(c);
}

/* Hands the request to the use case, or answers it here. */
static void
dispatch(struct conn *c)
{
	struct exchange *x = c->x;
	char detail[160];

	(void)uv_timer_stop(&c->timer);
	c->state = C_SERVING;
	/*
	 * A body refused before it was read (413, 408...) may still be on its
	 * way: after the answer the connection is shut down for writing and
	 * read until the web server closes it, so that the sender never meets
	 * a reset. So is every TCP connection (a close with unread input
	 * would reset it and could destroy the answer in flight).
	 */
	if (x->req.body_status != BODY_OK)
		c->linger = 1;
	if (x->req.nul_param) {
		(void)snprintf(detail, sizeof(detail),
		    "The web server passed a parameter with a NUL byte (%s).",
		    x->req.nul_name);
		response_problem(&x->resp, PROB_INVALID_REQUEST, detail, NULL);
		exchange_finish(x);
		return;
	}
	if (!c->counted) {
		metrics_inc(MC_OVERLOADED);
		response_problem(&x->resp, PROB_UNAVAILABLE,
		    "Too many requests are in progress. Nothing was charged; "
		    "retry with the same key.",
		    NULL);
		(void)response_header(&x->resp, "Retry-After", "%d",
		    CONN_RETRY_AFTER_OVERLOADED_S);
		exchange_finish(x);
		return;
	}
	app_handle(x);
}

/* Params complete: the exchange is made and its body plan known. */
static int
params_done(struct conn *c, const struct fcgi_event *ev)
{
	const struct config *cfg = c->h->w->cfg;
	struct exchange *x;
	int n;

	if ((x = calloc(1, sizeof(*x))) == NULL)
		return -1;
	response_init(&x->resp);
	x->w = c->h->w;
	x->done = on_exchange_done;
	x->transport = c;
	x->transport_host = c->h;
	c->x = x;
	c->h->nexchanges++;
	if (request_from_params(&x->req, ev->params, ev->nparams,
	        (size_t)cfg->max_request_bytes, &c->want) != 0)
		return -1;
	n = __atomic_add_fetch(c->h->inflight, 1, __ATOMIC_RELAXED);
	c->counted = 1;
	if (n > cfg->max_inflight)
		conn_inflight_release(c); /* dispatch answers 503 */
	if (x->req.body_status != BODY_OK || c->want == 0 || !c->counted ||
	    x->req.nul_param) {
		dispatch(c);
		return 0;
	}
	if ((x->req.body = malloc(c->want + 1)) == NULL)
		return -1;
	c->state = C_BODY;
	return 0;
}

static void
body_data(struct conn *c, const char *p, size_t n)
{
	struct request *r = &c->x->req;
	size_t take = c->want - r->body_len;

	if (take > n)
		take = n; /* bytes past CONTENT_LENGTH are not the body */
	memcpy(r->body + r->body_len, p, take);
	r->body_len += take;
	c->discarded += n - take;
	if (r->body_len == c->want) {
		r->body[r->body_len] = '\0';
		dispatch(c);
	}
}

/* The params or the body did not come within request_timeout_ms. */
void
conn_on_read_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;

	if (c->state == C_BODY) {
		c->x->req.body_status = BODY_TIMEOUT;
		c->x->req.body[c->x->req.body_len] = '\0';
		dispatch(c);
		return;
	}
	log_warn(NULL, "FastCGI params did not arrive within %d ms",
	    c->h->w->cfg->request_timeout_ms);
	conn_close(c);
}

/* --- events ----------------------------------------------------------------- */

static void
on_begin(struct conn *c, const struct fcgi_event *ev)
{
	c->served++;
	if (c->state == C_DRAINING) {
		/*
		 * The web server gave up the rest of the answered request's
		 * input and sends the next one (Apache mod_proxy_fcgi after
		 * an early answer): that one begins.
		 */
		c->stdin_ended = 0;
		c->aborted = 0;
		c->discarded = 0;
	}
	if (ev->role != FCGI_RESPONDER) {
		if (conn_out_end(c, ev->request_id, FCGI_UNKNOWN_ROLE) != 0)
			conn_close(c);
		fcgi_reader_request_done(c->rd);
		c->keep_conn = ev->keep_conn;
		if (!c->keep_conn)
			c->closing = 1;
		return;
	}
	c->state = C_PARAMS;
	c->req_id = ev->request_id;
	c->keep_conn = ev->keep_conn;
	(void)uv_timer_start(&c->timer, conn_on_read_timeout,
	    (uint64_t)c->h->w->cfg->request_timeout_ms, 0);
}

static void
on_stdin_end(struct conn *c)
{
	c->stdin_ended = 1;
	if (c->state == C_BODY) {
		c->x->req.body_status = BODY_SHORT;
		c->x->req.body[c->x->req.body_len] = '\0';
		dispatch(c);
	} else if (c->state == C_DRAINING)
		conn_request_complete(c);
}

static void
on_abort(struct conn *c)
{
	if (c->state == C_SERVING) {
		c->aborted = 1; /* the use case goes on; no stdout */
		return;
	}
	if (c->state == C_DRAINING) {
		conn_request_complete(c);
		return;
	}
	if (c->x != NULL) {
		conn_inflight_release(c);
		conn_exchange_free(c->h, c->x);
		c->x = NULL;
	}
	if (conn_out_end(c, c->req_id, FCGI_REQUEST_COMPLETE) != 0)
		conn_close(c);
	else
		conn_request_complete(c);
}

/* Acts on every complete event the reader holds. */
void
conn_process(struct conn *c)
{
	const struct config *cfg = c->h->w->cfg;
	struct fcgi_event ev;
	char tmp[256];
	size_t n;

	c->processing = 1;
	while (!c->closed) {
		/*
		 * The request in progress has all its input: what follows (the
		 * next request on a kept connection, pipelined) waits in the
		 * reader until it has been answered.
		 */
		if (c->state == C_SERVING && c->stdin_ended)
			break;
		fcgi_reader_next(c->rd, &ev);
		switch (ev.type) {
		case FCGI_EV_NONE: goto out;
		case FCGI_EV_BEGIN: on_begin(c, &ev); break;
		case FCGI_EV_PARAMS:
			if (params_done(c, &ev) != 0) {
				log_error(NULL,
				    "FastCGI request: out of memory");
				conn_close(c);
			}
			break;
		case FCGI_EV_STDIN:
			if (c->state == C_BODY)
				body_data(c, ev.data, ev.len);
			else if ((c->discarded += ev.len) >
			    4 * (size_t)cfg->max_request_bytes)
				conn_close(c); /* bounded, as CGI drains */
			break;
		case FCGI_EV_STDIN_END: on_stdin_end(c); break;
		case FCGI_EV_ABORT: on_abort(c); break;
		case FCGI_EV_GET_VALUES:
			/*
			 * A connection carries one request at a time, so
			 * max_inflight bounds both; no multiplexing.
			 */
			n = fcgi_write_values(tmp, sizeof(tmp), ev.params,
			    ev.nparams, (unsigned)cfg->max_inflight,
			    (unsigned)cfg->max_inflight, 0);
			if (n == 0 || conn_out_reserve(c, n) != 0)
				break;
			memcpy(c->out + c->out_len, tmp, n);
			c->out_len += n;
			break;
		case FCGI_EV_UNKNOWN:
			if (conn_out_reserve(c, 16) == 0)
				c->out_len +=
				    fcgi_write_unknown_type(c->out + c->out_len,
				        ev.unknown_type);
			break;
		case FCGI_EV_REFUSE_MPX:
			if (conn_out_end(c, ev.request_id,
			        FCGI_CANT_MPX_CONN) != 0)
				conn_close(c);
			break;
		case FCGI_EV_ERROR:
			log_warn(NULL, "FastCGI protocol error: %s",
			    fcgi_reader_error(c->rd));
			conn_close(c);
			break;
		}
	}
out:
	c->processing = 0;
	if (!c->closed && c->out_len > c->out_off)
		conn_flush(c);
}
