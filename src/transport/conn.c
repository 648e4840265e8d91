/*
 * conn.c - one FastCGI connection, in the manner of Redis's networking.c:
 * the connection owns its reader (the codec), the request it serves and the
 * one state machine of both; its socket (conn_sock.c) hands up bytes and
 * events through one callback and knows nothing of requests.
 *
 * A request's life on a connection (conn_set_state asserts every step
 * against conn_allowed):
 *
 *   IDLE ─▶ PARAMS ─▶ BODY ─▶ SERVING ─▶ (answer sent) ─▶ DRAINING ─▶ KEPT
 *     ▲                                             └──────────────▶ KEPT
 *     └── KEPT (kept alive: the next request's first bytes) ◀─────────┘
 *   any ─▶ ENDING (the output goes out, then close) ─▶ CLOSED
 *
 * (a request that ends without FCGI_KEEP_CONN goes to IDLE, then ENDING).
 * The request's own fields are one struct conn_req, reset in one place
 * (conn_req_reset).
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
#include "conn_admit.h"
#include "exchange.h"
#include "fcgi_codec.h"
#include "log.h"
#include "metrics.h"

#define DISCARD_FACTOR 4 /* STDIN past the body: up to 4 x max_request_bytes */
/*
 * ms a stopping process keeps a kept connection open after handing it back
 * (or, for a web server that checks a pooled connection before reusing it,
 * before closing it idle): a request sent on it meanwhile is served.
 */
#define HANDBACK_GRACE_MS 1000
#define NGINX_SOFTWARE "nginx/" /* SERVER_SOFTWARE of nginx's fastcgi_params */

enum conn_state {
	C_IDLE,     /* between requests: the next one's params are awaited */
	C_KEPT,     /* kept alive after a request: the idle timer runs */
	C_PARAMS,   /* BEGIN seen, params coming */
	C_BODY,     /* params done, body coming */
	C_SERVING,  /* dispatched: the use case has it */
	C_DRAINING, /* answered; reading to the end of STDIN */
	C_ENDING,   /* no more requests: the output goes out, then close */
	C_CLOSED,   /* the socket closed; the memory goes with the handles */
	C_NSTATES
};

/* conn_set_state's map: conn_allowed[from] has bit `to`. */
#define B(s) (1u << (s))
static const unsigned conn_allowed[C_NSTATES] = {
	[C_IDLE] = B(C_PARAMS) | B(C_ENDING) | B(C_CLOSED),
	[C_KEPT] = B(C_IDLE) | B(C_ENDING) | B(C_CLOSED),
	[C_PARAMS] = B(C_BODY) | B(C_SERVING) | B(C_IDLE) | B(C_KEPT) |
	    B(C_ENDING) | B(C_CLOSED),
	[C_BODY] =
	    B(C_SERVING) | B(C_IDLE) | B(C_KEPT) | B(C_ENDING) | B(C_CLOSED),
	[C_SERVING] = B(C_DRAINING) | B(C_IDLE) | B(C_KEPT) | B(C_CLOSED),
	[C_DRAINING] = B(C_IDLE) | B(C_KEPT) | B(C_PARAMS) | B(C_CLOSED),
	[C_ENDING] = B(C_CLOSED),
	[C_CLOSED] = 0,
};
#undef B

/* The request a connection reads or serves: reset between requests. */
struct conn_req {
	struct exchange *x;       /* from its params on, until it is answered */
	unsigned id;              /* the FastCGI request id */
	size_t want;              /* body bytes announced (CONTENT_LENGTH) */
	size_t discarded;         /* bytes of STDIN read past the body */
	enum refusal refused;     /* with refusing: answered 503 at dispatch */
	unsigned keep_conn : 1;   /* FCGI_KEEP_CONN: another may follow */
	unsigned stdin_ended : 1; /* the empty STDIN record came */
	unsigned aborted : 1;     /* ABORT_REQUEST while serving: no stdout */
	unsigned refusing : 1;    /* answered with refused at dispatch */
};

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
	enum conn_state state; /* only conn_set_state changes it */
	struct conn_req req;
	int served;              /* requests begun on this connection */
	unsigned last_id;        /* the FastCGI id of the last request begun */
	unsigned processing : 1; /* inside conn_process (re-entry guard) */
	/* the web server is nginx: a stop hands a kept connection back with an
	 * empty STDERR record after END_REQUEST (conn_frame_handback) */
	unsigned handback_stderr : 1;
	unsigned handed : 1;     /* that record was sent: nginx closes it */
	unsigned linger : 1;     /* end by shutdown, then wait for the peer */
	unsigned rd_eof : 1;     /* the peer shut its side: no more input */
	unsigned out_paused : 1; /* not reading: too much output unsent */
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

/* The one place a connection's state changes: only along conn_allowed. */
static void
conn_set_state(struct conn *c, enum conn_state to)
{
	(void)conn_allowed; /* read by the asserts only (none with NDEBUG) */
	assert(c->state < C_NSTATES && to < C_NSTATES);
	assert((conn_allowed[c->state] & (1u << to)) != 0);
	/* a request being read or served has its exchange, and only then */
	assert(to != C_BODY || c->req.x != NULL);
	assert((to != C_IDLE && to != C_KEPT) || c->req.x == NULL);
	c->state = to;
}

/* The next request starts from nothing (its exchange is gone). */
static void
conn_req_reset(struct conn *c)
{
	assert(c->req.x == NULL);
	memset(&c->req, 0, sizeof(c->req));
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
	conn_admit_free(x);
	h->nexchanges--;
	if (h->on_idle != NULL)
		h->on_idle(h);
}

/* The request in progress ends without an answer (never executed). */
static void
conn_drop_request(struct conn *c)
{
	if (c->req.x == NULL)
		return;
	if (c->state == C_SERVING)
		c->req.x->transport = NULL; /* the use case finishes it */
	else
		conn_exchange_free(c->h, c->req.x);
	c->req.x = NULL;
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
	int keep =
	    c->req.keep_conn && !c->rd_eof && (!c->h->stopping || c->handed);

	(void)uv_timer_stop(&c->timer);
	fcgi_reader_request_done(c->rd);
	conn_req_reset(c);
	if (!keep) {
		conn_set_state(c, C_IDLE);
		conn_end(c);
		return;
	}
	conn_set_state(c, C_KEPT);
	timer_start(c, on_idle_timeout,
	    c->h->stopping ? HANDBACK_GRACE_MS
	                   : c->h->w->cfg->keepalive_idle_timeout_ms);
	sock_flush(&c->sock);
	if (c->state == C_KEPT && !c->processing)
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
	int ending, handback;

	metrics_request(x->resp.outcome, dur);
	log_info(x->req.request_id, "%s %s %d %s %.1fms",
	    x->req.method != NULL ? x->req.method : "-", x->req.path,
	    x->resp.status, x->resp.outcome != NULL ? x->resp.outcome : "-",
	    (double)dur / 1000.0);
	if (c == NULL) { /* the connection went away (or was expired) */
		conn_exchange_free(x->transport_host, x);
		return;
	}
	assert(c->state == C_SERVING && c->req.x == x);
	c->req.x = NULL;
	/*
	 * stopping: the answer ends a kept connection (conn_stop_idle): hands
	 * it back, or closes it right behind, on TCP with its FIN
	 */
	ending = c->h->stopping && c->req.keep_conn;
	handback = ending && c->handback_stderr;
	if (ending && !handback && !c->h->listen_unix)
		sock_cork(&c->sock);
	if (!c->req.aborted &&
	    conn_frame_response(&c->sock, &c->h->frame, c->req.id, x,
	        handback) != 0)
		log_warn(x->req.request_id, "cannot frame the response");
	else if (c->req.aborted &&
	    (conn_frame_end(&c->sock, c->req.id, FCGI_REQUEST_COMPLETE) != 0 ||
	        (handback && conn_frame_handback(&c->sock, c->req.id) != 0)))
		log_warn(x->req.request_id, "cannot frame END_REQUEST");
	else if (handback)
		c->handed = 1;
	conn_exchange_free(c->h, x);
	if (c->req.stdin_ended || c->rd_eof) {
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
	struct exchange *x = c->req.x;
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
	if (x->req.body_status != BODY_OK || c->req.refusing)
		c->linger = 1;
	if (x->req.nul_param) {
		(void)snprintf(detail, sizeof(detail),
		    "The web server passed a parameter with a NUL byte (%s).",
		    x->req.nul_name);
		response_problem(&x->resp, PROB_INVALID_REQUEST, detail, NULL);
		exchange_finish(x);
		return;
	}
	if (c->req.refusing) {
		metrics_inc(c->req.refused == REFUSAL_OVERLOADED
		        ? MC_OVERLOADED
		        : MC_BODY_MEMORY_FULL);
		response_refusal(&x->resp, c->req.refused);
		exchange_finish(x);
		return;
	}
	app_handle(x);
}

static void
refuse(struct conn *c, enum refusal why)
{
	c->req.refusing = 1;
	c->req.refused = why;
}

/* 1 when the params say the web server is nginx (SERVER_SOFTWARE). */
static int
params_from_nginx(const struct fcgi_event *ev)
{
	size_t i, n = strlen(NGINX_SOFTWARE);

	for (i = 0; i < ev->nparams; i++)
		if (ev->params[i].namelen == strlen("SERVER_SOFTWARE") &&
		    memcmp(ev->params[i].name, "SERVER_SOFTWARE",
		        ev->params[i].namelen) == 0)
			return ev->params[i].valuelen >= n &&
			    memcmp(ev->params[i].value, NGINX_SOFTWARE, n) == 0;
	return 0;
}

/* Params complete: the exchange is made and its body plan known. */
static int
params_done(struct conn *c, const struct fcgi_event *ev)
{
	const struct config *cfg = c->h->w->cfg;
	struct exchange *x;

	if ((x = conn_admit_new(&c->h->bounds)) == NULL)
		return -1;
	x->w = c->h->w;
	x->done = on_exchange_done;
	x->transport = c;
	x->transport_host = c->h;
	c->req.x = x;
	c->h->nexchanges++;
	if (request_from_params(&x->req, ev->params, ev->nparams,
	        (size_t)cfg->max_request_bytes, &c->req.want) != 0)
		return -1;
	c->handback_stderr = params_from_nginx(ev);
	/* the slot is held until the work ends (exchange_free) */
	if (!conn_admit_slot(x, cfg->max_inflight))
		refuse(c, REFUSAL_OVERLOADED);
	if (x->req.body_status != BODY_OK || c->req.want == 0 ||
	    c->req.refusing || x->req.nul_param) {
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
	struct request *r = &c->req.x->req;
	size_t take = c->req.want - r->body_len;

	if (take > n)
		take = n; /* bytes past CONTENT_LENGTH are not the body */
	c->req.discarded += n - take;
	switch (conn_admit_body(c->req.x, p, take, c->req.want,
	    c->h->w->cfg->body_memory_max_bytes)) {
	case CONN_BODY_NOMEM: return -1;
	case CONN_BODY_FULL:
		c->req.discarded += take;
		refuse(c, REFUSAL_BODY_MEMORY);
		dispatch(c);
		return 0;
	case CONN_BODY_OK: break;
	}
	if (r->body_len == c->req.want)
		dispatch(c);
	return 0;
}

/* The params or the body did not come within request_timeout_ms. */
static void
on_read_timeout(uv_timer_t *t)
{
	struct conn *c = t->data;

	if (c->state == C_BODY) {
		c->req.x->req.body_status = BODY_TIMEOUT;
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
	if (c->state == C_KEPT)
		conn_set_state(c, C_IDLE); /* its idle timer still runs */
	/*
	 * Draining: the web server gave up the rest of the answered request's
	 * input and sends the next one (Apache mod_proxy_fcgi after an early
	 * answer): that one begins.
	 */
	conn_req_reset(c);
	c->req.keep_conn = ev->keep_conn != 0;
	if (ev->role != FCGI_RESPONDER) {
		if (conn_frame_end(&c->sock, ev->request_id,
		        FCGI_UNKNOWN_ROLE) != 0) {
			conn_close(c);
			return;
		}
		fcgi_reader_request_done(c->rd);
		if (c->state == C_DRAINING)
			conn_set_state(c, C_IDLE);
		if (!c->req.keep_conn)
			conn_end(c);
		return;
	}
	conn_set_state(c, C_PARAMS);
	c->req.id = c->last_id = ev->request_id;
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
	} else if ((c->req.discarded += ev->len) > DISCARD_FACTOR * max)
		conn_close(c); /* bounded, as CGI drains */
}

static void
on_stdin_end(struct conn *c)
{
	c->req.stdin_ended = 1;
	if (c->state == C_BODY) {
		c->req.x->req.body_status = BODY_SHORT;
		dispatch(c);
	} else if (c->state == C_DRAINING)
		conn_request_complete(c);
}

static void
on_abort(struct conn *c)
{
	if (c->state == C_SERVING) {
		c->req.aborted = 1; /* the use case goes on; no stdout */
		return;
	}
	if (c->state == C_DRAINING) {
		conn_request_complete(c);
		return;
	}
	if (c->req.x != NULL) {
		conn_exchange_free(c->h, c->req.x);
		c->req.x = NULL;
	}
	if (conn_frame_end(&c->sock, c->req.id, FCGI_REQUEST_COMPLETE) != 0)
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
		if (c->state == C_SERVING && c->req.stdin_ended)
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
	if (c->state == C_KEPT) {
		/* a kept connection's next request begins to arrive */
		conn_set_state(c, C_IDLE);
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

/*
 * A kept connection between requests, at a stop. Closing it could fail a
 * request the web server is sending on it at that moment, so it is handed
 * back: to nginx with an empty STDERR record (nginx closes the connection;
 * a request it sent meanwhile reads the record as an empty stderr stream
 * and is served); to any other web server by waiting, as what that server
 * sends meanwhile is served and answered with a close right behind it
 * (Apache checks a pooled connection for EOF before reusing it). An idle
 * one closes after HANDBACK_GRACE_MS.
 */
static void
conn_hand_back(struct conn *c)
{
	if (c->handback_stderr && !c->handed) {
		if (conn_frame_handback(&c->sock, c->last_id) != 0) {
			conn_close(c);
			return;
		}
		c->handed = 1;
		sock_flush(&c->sock);
		if (c->state != C_KEPT)
			return; /* the write failed: closed */
	}
	timer_start(c, on_idle_timeout, HANDBACK_GRACE_MS);
}

void
conn_stop_idle(struct conn_host *h)
{
	struct conn *c, *next;

	h->stopping = 1;
	for (c = TAILQ_FIRST(&h->conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		/*
		 * A connection with a request arriving (new, or the next on a
		 * kept one) or in hand is served; a kept one is handed back.
		 */
		if (c->state == C_KEPT)
			conn_hand_back(c);
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
			if (c->req.x != NULL) {
				tmp.req.method = c->req.x->req.method;
				memcpy(tmp.req.request_id,
				    c->req.x->req.request_id,
				    sizeof(tmp.req.request_id));
			}
			response_refusal(&tmp.resp, REFUSAL_STOPPING);
			(void)conn_frame_response(&c->sock, &c->h->frame,
			    c->req.id, &tmp, 0);
			response_free(&tmp.resp);
			conn_drop_request(c);
		}
		sock_flush(&c->sock);
		conn_close(c);
	}
}
