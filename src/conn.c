/*
 * conn.c - one FastCGI connection, in the manner of Redis's networking.c:
 * the connection owns its reader (the codec), the request it serves and the
 * one state machine of both; its socket (conn_sock.c) hands up bytes and
 * events through one callback and knows nothing of requests.
 *
 * A request's life on a connection (conn_set_state checks every step):
 *
 *   IDLE ─▶ PARAMS ─▶ BODY ─▶ SERVING ─▶ (answer sent) ─▶ DRAINING ─▶ IDLE
 *                                                   └──────────────▶ IDLE
 *   any ─▶ ENDING (the output goes out, then close) ─▶ CLOSED
 *
 * A request is dispatched once its body is complete (or refused early: 413,
 * 400, 503). After the answer the rest of the input is read and discarded
 * up to the end of STDIN, so a web server still sending a body never meets
 * a closed socket; then the connection closes, or with FCGI_KEEP_CONN
 * serves the next request. A request arriving behind the last answer a
 * connection will give is never begun. A connection that goes away while a
 * request is served detaches from it: the request still finishes, and holds
 * its slot of max_inflight until then.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "clock.h"
#include "conn.h"
#include "conn_frame.h"
#include "conn_work.h"
#include "exchange.h"
#include "fcgi_codec.h"
#include "log.h"
#include "metrics.h"

#define DISCARD_FACTOR 4 /* STDIN past the body: up to 4 x max_request_bytes */

enum conn_state {
	C_IDLE,     /* between requests */
	C_PARAMS,   /* BEGIN seen, params coming */
	C_BODY,     /* params done, body coming */
	C_SERVING,  /* dispatched: the use case has it */
	C_DRAINING, /* answered; reading to the end of STDIN */
	C_ENDING,   /* no more requests: the output goes out, then close */
	C_CLOSED,   /* the socket closed; the memory goes with the handles */
	C_NSTATES
};

/* conn_set_state's map: allowed[from] has bit `to`. */
#define B(s) (1u << (s))
static const unsigned allowed[C_NSTATES] = {
	[C_IDLE] = B(C_PARAMS) | B(C_ENDING) | B(C_CLOSED),
	[C_PARAMS] =
	    B(C_BODY) | B(C_SERVING) | B(C_IDLE) | B(C_ENDING) | B(C_CLOSED),
	[C_BODY] = B(C_SERVING) | B(C_IDLE) | B(C_ENDING) | B(C_CLOSED),
	[C_SERVING] = B(C_DRAINING) | B(C_IDLE) | B(C_CLOSED),
	[C_DRAINING] = B(C_IDLE) | B(C_PARAMS) | B(C_CLOSED),
	[C_ENDING] = B(C_CLOSED),
	[C_CLOSED] = 0,
};
#undef B

struct conn {
	struct sock sock; /* first: conn_of() */
	struct conn_host *h;
	/*
	 * The deadline of the state: reading a request's params and body, the
	 * drain of an answered request's input, or a kept connection's
	 * idleness.
	 */
	uv_timer_t timer;
	int handles; /* the socket's and the timer's, not yet closed */
	struct fcgi_reader *rd;
	enum conn_state state;
	unsigned req_id;
	int keep_conn;
	int stdin_ended;
	int aborted;          /* ABORT_REQUEST while serving: send no stdout */
	enum refusal refused; /* with refusing: answered 503 at dispatch */
	int refusing;
	size_t want;      /* body bytes announced (CONTENT_LENGTH) */
	size_t discarded; /* bytes of STDIN read past the body */
	struct exchange *x;
	int processing; /* inside conn_process (re-entry guard) */
	int served;     /* requests begun on this connection */
	int linger;     /* end by shutdown, then wait for the peer */
	int rd_eof;     /* the peer shut its side: no more input */
	int out_paused; /* not reading: too much output unsent */
	int idle_wait;  /* the timer is the idle kept connection's */
	TAILQ_ENTRY(conn) entry;
};

static void conn_process(struct conn *c);
static void conn_close(struct conn *c);
static void on_read_timeout(uv_timer_t *t);

static struct conn *
conn_of(struct sock *s)
{
	return (struct conn *)(void *)s; /* sock is its first member */
}

static void
conn_set_state(struct conn *c, enum conn_state to)
{
	(void)allowed; /* read by the asserts only (none with NDEBUG) */
	assert(c->state < C_NSTATES && to < C_NSTATES);
	assert(c->state == to || (allowed[c->state] & (1u << to)) != 0);
	/* a request being read or served has its exchange, and only then */
	assert(to != C_BODY || c->x != NULL);
	assert(to != C_IDLE || c->x == NULL);
	c->state = to;
}

static void
timer_start(struct conn *c, uv_timer_cb cb, int ms)
{
	(void)uv_timer_start(&c->timer, cb, (uint64_t)ms, 0);
}

/* Reading follows the reader's room, unless output or the peer stop it. */
static void
conn_read_more(struct conn *c)
{
	size_t room = 0;

	if (c->state != C_CLOSED && c->state != C_ENDING && !c->out_paused &&
	    !c->rd_eof)
		room = fcgi_reader_room(c->rd);
	if (c->state != C_CLOSED)
		sock_read(&c->sock, room);
}

/* --- one request ----------------------------------------------------------- */

/* Frees x: its slot of max_inflight and its body's bytes go back. */
static void
conn_exchange_free(struct conn_host *h, struct exchange *x)
{
	conn_work_free(x);
	h->nexchanges--;
	if (h->on_idle != NULL)
		h->on_idle(h);
}

/* The request in progress ends without an answer (never executed). */
static void
conn_drop_request(struct conn *c)
{
	if (c->x == NULL)
		return;
	if (c->state == C_SERVING)
		c->x->transport = NULL; /* the use case finishes it */
	else
		conn_exchange_free(c->h, c->x);
	c->x = NULL;
}

/*
 * No more requests on c: the output goes out (then a lingering close on
 * TCP, so that a peer still sending never meets a reset), then c closes.
 */
static void
conn_end(struct conn *c)
{
	if (c->state == C_CLOSED || c->state == C_ENDING)
		return;
	conn_drop_request(c);
	(void)uv_timer_stop(&c->timer);
	conn_set_state(c, C_ENDING);
	sock_end(&c->sock, c->linger && !c->rd_eof); /* reading stops */
}

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
 * FCGI_KEEP_CONN, within keepalive_idle_timeout_ms), or the end. A request
 * read past the last answer is never begun: nothing could answer it.
 */
static void
conn_request_complete(struct conn *c)
{
	(void)uv_timer_stop(&c->timer);
	fcgi_reader_request_done(c->rd);
	conn_set_state(c, C_IDLE);
	c->req_id = 0;
	c->stdin_ended = c->aborted = c->refusing = 0;
	c->discarded = 0;
	if (!c->keep_conn || c->h->stopping || c->rd_eof) {
		conn_end(c);
		return;
	}
	c->idle_wait = 1;
	timer_start(c, on_idle_timeout,
	    c->h->w->cfg->keepalive_idle_timeout_ms);
	sock_flush(&c->sock);
	if (c->state == C_IDLE && !c->processing)
		conn_process(c);
}

static void
on_drain_timeout(uv_timer_t *t)
{
	/* answered, but the web server never ended its input: give up */
	conn_close(t->data);
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
	assert(c->state == C_SERVING && c->x == x);
	c->x = NULL;
	if (!c->aborted &&
	    conn_frame_response(&c->sock, &c->h->frame, c->req_id, x) != 0)
		log_warn(x->req.request_id, "cannot frame the response");
	else if (c->aborted &&
	    conn_frame_end(&c->sock, c->req_id, FCGI_REQUEST_COMPLETE))
		log_warn(x->req.request_id, "cannot frame END_REQUEST");
	conn_exchange_free(c->h, x);
	if (c->stdin_ended || c->rd_eof) {
		conn_request_complete(c);
		return;
	}
	conn_set_state(c, C_DRAINING);
	fcgi_reader_answered(c->rd);
	timer_start(c, on_drain_timeout, c->h->w->cfg->request_timeout_ms);
	sock_flush(&c->sock);
	if (c->state == C_DRAINING && !c->processing)
		conn_process(c);
}

/* Hands the request to the use case, or answers it here. */
static void
dispatch(struct conn *c)
{
	struct exchange *x = c->x;
	char detail[160];

	(void)uv_timer_stop(&c->timer);
	conn_set_state(c, C_SERVING);
	/*
	 * A body refused before it was read (413, 408, 503...) may still be
	 * on its way: after the answer the connection is shut down for
	 * writing and read until the web server closes it, so that the sender
	 * never meets a reset. So is every TCP connection (a close with unread
	 * input would reset it and could destroy the answer in flight).
	 */
	if (x->req.body_status != BODY_OK || c->refusing)
		c->linger = 1;
	if (x->req.nul_param) {
		(void)snprintf(detail, sizeof(detail),
		    "The web server passed a parameter with a NUL byte (%s).",
		    x->req.nul_name);
		response_problem(&x->resp, PROB_INVALID_REQUEST, detail, NULL);
		exchange_finish(x);
		return;
	}
	if (c->refusing) {
		metrics_inc(c->refused == REFUSAL_OVERLOADED
		        ? MC_OVERLOADED
		        : MC_BODY_MEMORY_FULL);
		response_refusal(&x->resp, c->refused);
		exchange_finish(x);
		return;
	}
	app_handle(x);
}

static void
refuse(struct conn *c, enum refusal why)
{
	c->refusing = 1;
	c->refused = why;
}

/* Params complete: the exchange is made and its body plan known. */
static int
params_done(struct conn *c, const struct fcgi_event *ev)
{
	const struct config *cfg = c->h->w->cfg;
	struct exchange *x;

	if ((x = conn_work_new(&c->h->bounds)) == NULL)
		return -1;
	x->w = c->h->w;
	x->done = on_exchange_done;
	x->transport = c;
	x->transport_host = c->h;
	c->x = x;
	c->h->nexchanges++;
	if (request_from_params(&x->req, ev->params, ev->nparams,
	        (size_t)cfg->max_request_bytes, &c->want) != 0)
		return -1;
	/* the slot is held until the work ends (exchange_free) */
	if (!conn_work_admit(x, cfg->max_inflight))
		refuse(c, REFUSAL_OVERLOADED);
	if (x->req.body_status != BODY_OK || c->want == 0 || c->refusing ||
	    x->req.nul_param) {
		dispatch(c);
		return 0;
	}
	conn_set_state(c, C_BODY);
	return 0;
}

/*
 * STDIN while the body is read. Memory follows the bytes that arrived, and
 * the bodies in flight hold at most body_memory_max_bytes in the process
 * (beyond it 503: nothing executed). 0, or -1 on ENOMEM.
 */
static int
body_data(struct conn *c, const char *p, size_t n)
{
	struct request *r = &c->x->req;
	size_t take = c->want - r->body_len;

	if (take > n)
		take = n; /* bytes past CONTENT_LENGTH are not the body */
	c->discarded += n - take;
	switch (conn_work_append(c->x, p, take, c->want,
	    c->h->w->cfg->body_memory_max_bytes)) {
	case CONN_BODY_NOMEM: return -1;
	case CONN_BODY_FULL:
		c->discarded += take;
		refuse(c, REFUSAL_BODY_MEMORY);
		dispatch(c);
		return 0;
	case CONN_BODY_OK: break;
	}
	if (r->body_len == c->want)
		dispatch(c);
	return 0;
}

/* The params or the body did not come within request_timeout_ms. */
static void
on_read_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;

	if (c->state == C_BODY) {
		c->x->req.body_status = BODY_TIMEOUT;
		dispatch(c);
		return;
	}
	log_warn(NULL, "FastCGI params did not arrive within %d ms",
	    c->h->w->cfg->request_timeout_ms);
	conn_close(c);
}

/* --- records ----------------------------------------------------------------- */

static void
on_begin(struct conn *c, const struct fcgi_event *ev)
{
	c->served++;
	c->idle_wait = 0;
	/*
	 * Draining: the web server gave up the rest of the answered request's
	 * input and sends the next one (Apache mod_proxy_fcgi after an early
	 * answer): that one begins.
	 */
	c->stdin_ended = c->aborted = c->refusing = 0;
	c->discarded = 0;
	c->keep_conn = ev->keep_conn;
	if (ev->role != FCGI_RESPONDER) {
		if (conn_frame_end(&c->sock, ev->request_id,
		        FCGI_UNKNOWN_ROLE) != 0) {
			conn_close(c);
			return;
		}
		fcgi_reader_request_done(c->rd);
		if (c->state == C_DRAINING)
			conn_set_state(c, C_IDLE);
		if (!c->keep_conn)
			conn_end(c);
		return;
	}
	conn_set_state(c, C_PARAMS);
	c->req_id = ev->request_id;
	timer_start(c, on_read_timeout, c->h->w->cfg->request_timeout_ms);
}

static void
on_stdin(struct conn *c, const struct fcgi_event *ev)
{
	size_t max = (size_t)c->h->w->cfg->max_request_bytes;

	if (c->state == C_BODY) {
		if (body_data(c, ev->data, ev->len) != 0) {
			log_error(NULL, "FastCGI request: out of memory");
			conn_close(c);
		}
	} else if ((c->discarded += ev->len) > DISCARD_FACTOR * max)
		conn_close(c); /* bounded, as CGI drains */
}

static void
on_stdin_end(struct conn *c)
{
	c->stdin_ended = 1;
	if (c->state == C_BODY) {
		c->x->req.body_status = BODY_SHORT;
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
	if (conn_frame_end(&c->sock, c->req_id, FCGI_REQUEST_COMPLETE) != 0)
		conn_close(c);
	else
		conn_request_complete(c);
}

static void
on_event(struct conn *c, const struct fcgi_event *ev)
{
	switch (ev->type) {
	case FCGI_EV_NONE: break;
	case FCGI_EV_BEGIN: on_begin(c, ev); break;
	case FCGI_EV_PARAMS:
		if (params_done(c, ev) != 0) {
			log_error(NULL, "FastCGI request: out of memory");
			conn_close(c);
		}
		break;
	case FCGI_EV_STDIN: on_stdin(c, ev); break;
	case FCGI_EV_STDIN_END: on_stdin_end(c); break;
	case FCGI_EV_ABORT: on_abort(c); break;
	case FCGI_EV_GET_VALUES:
	case FCGI_EV_UNKNOWN:
		conn_frame_management(&c->sock, ev,
		    (unsigned)c->h->w->cfg->max_inflight);
		break;
	case FCGI_EV_REFUSE_MPX:
		if (conn_frame_end(&c->sock, ev->request_id,
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

/*
 * Acts on every complete event the reader holds, while the output has room:
 * for a peer that does not read, what it sends waits in the reader (and
 * then in its socket) until the output is sent.
 */
static void
conn_process(struct conn *c)
{
	struct fcgi_event ev;

	c->processing = 1;
	while (c->state != C_CLOSED && c->state != C_ENDING) {
		/*
		 * The request in progress has all its input: what follows (the
		 * next request on a kept connection, pipelined) waits in the
		 * reader until it has been answered.
		 */
		if (c->state == C_SERVING && c->stdin_ended)
			break;
		if (sock_out_full(&c->sock)) {
			sock_flush(&c->sock);
			if (c->state == C_CLOSED || !sock_out_full(&c->sock))
				continue;
			if (!c->out_paused)
				metrics_inc(MC_CONN_OUTPUT_FULL);
			c->out_paused = 1;
			break;
		}
		fcgi_reader_next(c->rd, &ev);
		if (ev.type == FCGI_EV_NONE)
			break;
		on_event(c, &ev);
	}
	c->processing = 0;
	if (c->state != C_CLOSED && sock_out_pending(&c->sock) > 0)
		sock_flush(&c->sock);
	conn_read_more(c);
}

/* --- the socket's events ------------------------------------------------------ */

/*
 * The peer shut its side. A request that has its input (it was dispatched)
 * or was answered still gets its answer, as libfcgi does (lighttpd's
 * tcp-fin-propagate half-closes like this); then the connection closes.
 * Anything else ends here.
 */
static void
on_eof(struct conn *c)
{
	c->rd_eof = 1;
	if (c->state == C_SERVING)
		return;
	if (c->state == C_DRAINING) {
		conn_request_complete(c);
		return;
	}
	conn_end(c);
}

static void
on_data(struct conn *c, const char *p, size_t n)
{
	if (c->idle_wait) {
		/* a kept connection's next request begins to arrive */
		c->idle_wait = 0;
		timer_start(c, on_read_timeout,
		    c->h->w->cfg->request_timeout_ms);
	}
	if (fcgi_reader_feed(c->rd, p, n) != 0) {
		log_warn(NULL, "FastCGI connection: input too large");
		conn_close(c);
		return;
	}
	conn_process(c);
}

static void
on_handle_closed(struct conn *c)
{
	struct conn_host *h = c->h;

	if (--c->handles > 0)
		return;
	fcgi_reader_free(c->rd);
	free(c);
	if (h->on_idle != NULL)
		h->on_idle(h);
}

static void
on_timer_closed(uv_handle_t *hd)
{
	on_handle_closed(hd->data);
}

/* Everything the socket says comes here. */
static void
on_sock(struct sock *s, enum sock_event ev, const char *data, size_t len)
{
	struct conn *c = conn_of(s);

	switch (ev) {
	case SOCK_EV_DATA: on_data(c, data, len); break;
	case SOCK_EV_EOF: on_eof(c); break;
	case SOCK_EV_WRITABLE:
		if (c->out_paused) {
			c->out_paused = 0;
			if (!c->processing)
				conn_process(c);
		}
		break;
	case SOCK_EV_STALLED:
		metrics_inc(MC_CONN_STALLED);
		log_warn(NULL,
		    "FastCGI connection: the web server read no output for %d ms: closed",
		    c->h->w->cfg->request_timeout_ms);
		conn_close(c);
		break;
	case SOCK_EV_CLOSE: conn_close(c); break;
	case SOCK_EV_CLOSED: on_handle_closed(c); break;
	}
}

/* --- open and close -------------------------------------------------------------- */

static void
conn_close(struct conn *c)
{
	struct conn_host *h = c->h;

	if (c->state == C_CLOSED)
		return;
	/* a request served finishes without its connection */
	conn_drop_request(c);
	conn_set_state(c, C_CLOSED);
	TAILQ_REMOVE(&h->conns, c, entry);
	h->nconns--;
	sock_close(&c->sock);
	uv_close((uv_handle_t *)&c->timer, on_timer_closed);
}

int
conn_open(struct conn_host *h, int fd)
{
	const struct config *cfg = h->w->cfg;
	struct conn *c;

	if ((c = calloc(1, sizeof(*c))) == NULL ||
	    (c->rd = fcgi_reader_new()) == NULL ||
	    sock_open(&c->sock, &h->socks, fd, on_sock,
	        (size_t)cfg->conn_output_max_bytes,
	        (uint64_t)cfg->request_timeout_ms) != 0) {
		if (c != NULL)
			fcgi_reader_free(c->rd);
		free(c);
		(void)close(fd);
		return -1;
	}
	c->h = h;
	c->linger = !h->listen_unix;
	c->handles = 2;
	(void)uv_timer_init(h->w->loop, &c->timer);
	c->timer.data = c;
	TAILQ_INSERT_HEAD(&h->conns, c, entry);
	h->nconns++;
	timer_start(c, on_read_timeout, cfg->request_timeout_ms);
	conn_read_more(c);
	sock_read_now(&c->sock); /* c may be gone after this */
	return 0;
}

int
conn_host_init(struct conn_host *h, uv_loop_t *loop)
{
	TAILQ_INIT(&h->conns);
	return sock_set_init(&h->socks, loop);
}

void
conn_host_close(struct conn_host *h)
{
	conn_frame_free(&h->frame);
	memset(&h->frame, 0, sizeof(h->frame));
	sock_set_close(&h->socks);
}

void
conn_stop_idle(struct conn_host *h)
{
	struct conn *c, *next;

	h->stopping = 1;
	for (c = TAILQ_FIRST(&h->conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		/* a new connection carries a request on its way: serve it */
		if (c->state == C_IDLE && c->served > 0)
			conn_end(c);
	}
}

void
conn_expire_all(struct conn_host *h)
{
	struct conn *c, *next;
	struct exchange tmp;

	for (c = TAILQ_FIRST(&h->conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (c->state == C_PARAMS || c->state == C_BODY ||
		    c->state == C_SERVING) {
			/*
			 * The use case keeps a request it serves and finishes
			 * it later (nothing is sent then); this answer is made
			 * from a copy. One still arriving never ran.
			 */
			memset(&tmp, 0, sizeof(tmp));
			response_init(&tmp.resp);
			if (c->x != NULL) {
				tmp.req.method = c->x->req.method;
				memcpy(tmp.req.request_id, c->x->req.request_id,
				    sizeof(tmp.req.request_id));
			}
			response_refusal(&tmp.resp, REFUSAL_STOPPING);
			(void)conn_frame_response(&c->sock, &c->h->frame,
			    c->req_id, &tmp);
			response_free(&tmp.resp);
			conn_drop_request(c);
		}
		sock_flush(&c->sock);
		conn_close(c);
	}
}
