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
#include "util.h"

static void on_exchange_done(struct exchange *x);

/* --- one request ----------------------------------------------------------- */

#define BODY_FIRST 4096 /* bytes: first allocation of a body */

static struct conn_work *
conn_work_of(struct exchange *x)
{
	return (struct conn_work *)(void *)x; /* x is its first member */
}

/* Frees x and gives back its slot of max_inflight and its body's bytes. */
void
conn_exchange_free(struct conn_host *h, struct exchange *x)
{
	struct conn_work *w = conn_work_of(x);

	if (w->counted)
		__atomic_sub_fetch(h->inflight, 1, __ATOMIC_RELAXED);
	if (w->body_held > 0)
		__atomic_sub_fetch(h->body_bytes, (long)w->body_held,
		    __ATOMIC_RELAXED);
	request_free(&x->req);
	response_free(&x->resp);
	free(w);
	h->nexchanges--;
	if (h->on_idle != NULL)
		h->on_idle(h);
}

/* A kept connection was idle for keepalive_idle_timeout_ms. */
static void
on_idle_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;

	metrics_inc(MC_CONN_IDLE_CLOSED);
	log_debug(NULL, "FastCGI connection: idle for %d ms: closed",
	    c->h->w->cfg->keepalive_idle_timeout_ms);
	conn_close(c);
}

/*
 * The request is over on this connection: the next one (with
 * FCGI_KEEP_CONN, within keepalive_idle_timeout_ms), or close. A request
 * read past the last answer is never begun: nothing can answer it.
 */
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
	c->refuse = REFUSE_NONE;
	if (!c->keep_conn || c->h->stopping || c->rd_eof)
		c->closing = 1;
	else {
		c->idle_wait = 1;
		(void)uv_timer_start(&c->timer, on_idle_timeout,
		    (uint64_t)c->h->w->cfg->keepalive_idle_timeout_ms, 0);
	}
	conn_flush(c);
	/* reading again if pipelined requests had filled the reader */
	if (!c->closed && conn_poll_update(c) != 0)
		conn_close(c);
	if (!c->closed && !c->processing && !c->closing)
		conn_process(c);
}

void
conn_answer_unavailable(struct conn *c)
{
	struct exchange *x = c->x;
	struct exchange tmp;

	/*
	 * The use case keeps a request it serves and finishes it later
	 * (nothing is sent then); this answer is made from a copy. A request
	 * still arriving was never executed: it ends here.
	 */
	memset(&tmp, 0, sizeof(tmp));
	response_init(&tmp.resp);
	if (x != NULL) {
		tmp.req.method = x->req.method;
		memcpy(tmp.req.request_id, x->req.request_id,
		    sizeof(tmp.req.request_id));
	}
	response_problem(&tmp.resp, PROB_UNAVAILABLE,
	    "The responder is shutting down. Retry with the same key.", NULL);
	(void)response_header(&tmp.resp, "Retry-After", "%d",
	    RETRY_AFTER_UNAVAILABLE_S);
	(void)conn_out_response(c, &tmp);
	response_free(&tmp.resp);
	if (x != NULL && c->state == C_SERVING)
		x->transport = NULL;
	else if (x != NULL)
		conn_exchange_free(c->h, x);
	c->x = NULL;
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
	if (!c->aborted && conn_out_response(c, x) != 0)
		log_warn(x->req.request_id, "cannot frame the response");
	else if (c->aborted &&
	    conn_out_end(c, c->req_id, FCGI_REQUEST_COMPLETE))
		log_warn(x->req.request_id, "cannot frame END_REQUEST");
	conn_exchange_free(c->h, x);
	if (c->stdin_ended || c->rd_eof) {
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
	if (x->req.body_status != BODY_OK || c->refuse != REFUSE_NONE)
		c->linger = 1;
	if (x->req.nul_param) {
		(void)snprintf(detail, sizeof(detail),
		    "The web server passed a parameter with a NUL byte (%s).",
		    x->req.nul_name);
		response_problem(&x->resp, PROB_INVALID_REQUEST, detail, NULL);
		exchange_finish(x);
		return;
	}
	if (c->refuse == REFUSE_OVERLOADED) {
		metrics_inc(MC_OVERLOADED);
		response_problem(&x->resp, PROB_UNAVAILABLE,
		    "Too many requests are in progress. Nothing was charged; retry with the same key.",
		    NULL);
		(void)response_header(&x->resp, "Retry-After", "%d",
		    CONN_RETRY_AFTER_OVERLOADED_S);
		exchange_finish(x);
		return;
	}
	if (c->refuse == REFUSE_BODY_MEMORY) {
		metrics_inc(MC_BODY_MEMORY_FULL);
		response_problem(&x->resp, PROB_UNAVAILABLE,
		    "The responder holds too many request bodies. Nothing was charged; retry with the same key.",
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
	struct conn_work *w;
	struct exchange *x;
	int n;

	if ((w = calloc(1, sizeof(*w))) == NULL)
		return -1;
	x = &w->x;
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
	/* the slot is held until the work ends (conn_exchange_free) */
	n = __atomic_add_fetch(c->h->inflight, 1, __ATOMIC_RELAXED);
	if (n > cfg->max_inflight) {
		__atomic_sub_fetch(c->h->inflight, 1, __ATOMIC_RELAXED);
		c->refuse = REFUSE_OVERLOADED; /* dispatch answers 503 */
	} else
		w->counted = 1;
	if (x->req.body_status != BODY_OK || c->want == 0 ||
	    c->refuse != REFUSE_NONE || x->req.nul_param) {
		dispatch(c);
		return 0;
	}
	c->state = C_BODY;
	return 0;
}

/* The body so far, NUL-terminated when it holds any byte. */
static void
body_end(struct request *r)
{
	if (r->body != NULL)
		r->body[r->body_len] = '\0';
}

/*
 * Bytes of STDIN while the body is read. Memory follows the bytes that
 * arrived, and bodies in flight hold at most body_memory_max_bytes in the
 * process (beyond it 503, nothing executed). 0, or -1 on ENOMEM.
 */
static int
body_data(struct conn *c, const char *p, size_t n)
{
	struct conn_work *w = conn_work_of(c->x);
	struct request *r = &c->x->req;
	size_t take = c->want - r->body_len;
	long held;

	if (take > n)
		take = n; /* bytes past CONTENT_LENGTH are not the body */
	c->discarded += n - take;
	if (take == 0)
		return 0;
	held =
	    __atomic_add_fetch(c->h->body_bytes, (long)take, __ATOMIC_RELAXED);
	if (held > c->h->w->cfg->body_memory_max_bytes) {
		__atomic_sub_fetch(c->h->body_bytes, (long)take,
		    __ATOMIC_RELAXED);
		c->discarded += take;
		c->refuse = REFUSE_BODY_MEMORY;
		body_end(r);
		dispatch(c);
		return 0;
	}
	w->body_held += take;
	if (util_grow(&r->body, &w->body_cap, r->body_len + take + 1,
	        BODY_FIRST, c->want + 1) != 0)
		return -1;
	memcpy(r->body + r->body_len, p, take);
	r->body_len += take;
	if (r->body_len == c->want) {
		body_end(r);
		dispatch(c);
	}
	return 0;
}

/* The params or the body did not come within request_timeout_ms. */
void
conn_on_read_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;

	if (c->state == C_BODY) {
		c->x->req.body_status = BODY_TIMEOUT;
		body_end(&c->x->req);
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
	c->idle_wait = 0;
	if (c->state == C_DRAINING) {
		/*
		 * The web server gave up the rest of the answered request's
		 * input and sends the next one (Apache mod_proxy_fcgi after
		 * an early answer): that one begins.
		 */
		c->stdin_ended = 0;
		c->aborted = 0;
		c->discarded = 0;
		c->refuse = REFUSE_NONE;
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
		body_end(&c->x->req);
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
	while (!c->closed && !c->closing) {
		/*
		 * The peer does not read: what it sends waits in the reader
		 * (and then in its socket) until the output is sent.
		 */
		if (conn_out_full(c)) {
			conn_flush(c);
			if (c->closed || !conn_out_full(c))
				continue;
			if (!c->out_paused)
				metrics_inc(MC_CONN_OUTPUT_FULL);
			c->out_paused = 1;
			break;
		}
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
			if (c->state == C_BODY) {
				if (body_data(c, ev.data, ev.len) != 0) {
					log_error(NULL,
					    "FastCGI request: out of memory");
					conn_close(c);
				}
			} else if ((c->discarded += ev.len) >
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
