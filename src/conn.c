/*
 * conn.c - one FastCGI connection, in the manner of Redis's networking.c:
 * the connection owns its reader (the codec), its pending output and the
 * request it serves; one read handler feeds bytes to the codec and acts on
 * complete events; writes are tried at once and the rest is flushed when
 * the socket is writable.
 *
 * A request's life on a connection:
 *
 *   BEGIN ─▶ PARAMS ─▶ BODY ─▶ SERVING ─▶ (answer sent) ─▶ DRAINING ─▶ done
 *
 * It is dispatched once its body is complete (or refused early: 413, 400,
 * 503 for max_inflight). After the answer the rest of the input is read and
 * discarded up to the end of STDIN, so a web server still sending a body
 * never meets a closed socket; then the connection closes, or with
 * FCGI_KEEP_CONN serves the next request. A connection that goes away
 * while a charge runs detaches from it: the charge still records.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "app.h"
#include "clock.h"
#include "conn.h"
#include "fcgi_codec.h"
#include "log.h"
#include "metrics.h"

#define READ_CHUNK 16384     /* bytes read at a time */
#define READS_PER_EVENT 16   /* reads before other connections' turn */
#define FCGI_MAX_CONNS_SAID 1024 /* GET_VALUES: what web servers are told */

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
	uv_poll_t poll;
	uv_timer_t timer; /* the request's read deadline, or the drain's */
	int fd;
	int handles_open; /* poll and timer, until their close callbacks */
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
	int poll_events;
	int closing;    /* close once the output is flushed */
	int closed;     /* handles closing: nothing more happens */
	int processing; /* inside conn_process (re-entry guard) */
	int served;     /* requests begun on this connection */
	int linger;     /* close by shutdown, then wait for the peer */
	struct conn *prev, *next;
};

static void conn_process(struct conn *c);
static void conn_close(struct conn *c);
static void conn_linger(struct conn *c);

/* --- output -------------------------------------------------------------- */

static int
out_reserve(struct conn *c, size_t n)
{
	size_t cap;
	char *p;

	if (c->out_off > 0 && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (c->out_cap - c->out_len >= n)
		return 0;
	cap = c->out_cap ? c->out_cap : 4096;
	while (cap - c->out_len < n)
		cap *= 2;
	if ((p = realloc(c->out, cap)) == NULL)
		return -1;
	c->out = p;
	c->out_cap = cap;
	return 0;
}

static void on_poll(uv_poll_t *p, int status, int events);

/* Writes what is pending; the rest waits for the socket to be writable. */
static void
conn_flush(struct conn *c)
{
	ssize_t n;

	while (c->out_off < c->out_len) {
		n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			c->poll_events = UV_READABLE | UV_WRITABLE;
			if (uv_poll_start(&c->poll, c->poll_events, on_poll) !=
			    0)
				conn_close(c);
			return;
		}
		log_debug(NULL, "FastCGI connection: write: %s",
		    n < 0 ? strerror(errno) : "nothing written");
		conn_close(c);
		return;
	}
	c->out_off = c->out_len = 0;
	if (c->closing && c->linger && c->state != C_LINGER) {
		conn_linger(c);
		return;
	}
	if (c->closing && c->state != C_LINGER) {
		conn_close(c);
		return;
	}
	if (c->poll_events != UV_READABLE) {
		c->poll_events = UV_READABLE;
		if (uv_poll_start(&c->poll, UV_READABLE, on_poll) != 0)
			conn_close(c);
	}
}

/* Appends END_REQUEST (and nothing else) for id. 0 or -1. */
static int
out_end(struct conn *c, unsigned id, int protocol_status)
{
	if (out_reserve(c, FCGI_END_REQUEST_SIZE) != 0)
		return -1;
	c->out_len += fcgi_write_end(c->out + c->out_len, id, 0,
	    protocol_status);
	return 0;
}

/* A growing buffer behind a response_sink. */
struct body_buf {
	char *p;
	size_t len, cap;
};

static int
body_buf_write(void *ctx, const char *p, size_t n)
{
	struct body_buf *b = ctx;
	size_t cap;
	char *q;

	if (b->cap - b->len < n) {
		cap = b->cap ? b->cap : 1024;
		while (cap - b->len < n)
			cap *= 2;
		if ((q = realloc(b->p, cap)) == NULL)
			return -1;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

/* The response as STDOUT records, the empty one, END_REQUEST. 0 or -1. */
static int
out_response(struct conn *c, const struct exchange *x)
{
	struct body_buf b = { NULL, 0, 0 };
	struct response_sink sink = { body_buf_write, &b };
	int rc = -1;

	if (response_send(&x->resp, x->req.request_id, &sink,
	        x->req.method != NULL &&
	            strcmp(x->req.method, "HEAD") == 0) != 0 ||
	    out_reserve(c, fcgi_stream_size(b.len) + fcgi_stream_size(0) +
	            FCGI_END_REQUEST_SIZE) != 0)
		goto done;
	c->out_len += fcgi_write_stream(c->out + c->out_len, FCGI_STDOUT,
	    c->req_id, b.p, b.len);
	c->out_len += fcgi_write_stream(c->out + c->out_len, FCGI_STDOUT,
	    c->req_id, NULL, 0);
	c->out_len += fcgi_write_end(c->out + c->out_len, c->req_id, 0,
	    FCGI_REQUEST_COMPLETE);
	rc = 0;
done:
	free(b.p);
	return rc;
}

/* --- one request ----------------------------------------------------------- */

static void
exchange_free(struct conn_host *h, struct exchange *x)
{
	request_free(&x->req);
	response_free(&x->resp);
	free(x);
	h->nexchanges--;
	if (h->on_idle != NULL)
		h->on_idle(h);
}

static void
inflight_release(struct conn *c)
{
	if (c->counted)
		__atomic_sub_fetch(c->h->inflight, 1, __ATOMIC_RELAXED);
	c->counted = 0;
}

/* The request is over on this connection: next one, or close. */
static void
request_complete(struct conn *c)
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
		exchange_free(x->transport_host, x);
		return;
	}
	c->x = NULL;
	inflight_release(c);
	if (!c->aborted && out_response(c, x) != 0)
		log_warn(x->req.request_id, "cannot frame the response");
	else if (c->aborted && out_end(c, c->req_id, FCGI_REQUEST_COMPLETE))
		log_warn(x->req.request_id, "cannot frame END_REQUEST");
	exchange_free(c->h, x);
	if (c->stdin_ended) {
		request_complete(c);
		return;
	}
	c->state = C_DRAINING;
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
		inflight_release(c); /* dispatch answers 503 */
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
static void
on_read_timeout(uv_timer_t *t)
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
	if (ev->role != FCGI_RESPONDER) {
		if (out_end(c, ev->request_id, FCGI_UNKNOWN_ROLE) != 0)
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
	(void)uv_timer_start(&c->timer, on_read_timeout,
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
		request_complete(c);
}

static void
on_abort(struct conn *c)
{
	if (c->state == C_SERVING) {
		c->aborted = 1; /* the use case goes on; no stdout */
		return;
	}
	if (c->state == C_DRAINING) {
		request_complete(c);
		return;
	}
	if (c->x != NULL) {
		inflight_release(c);
		exchange_free(c->h, c->x);
		c->x = NULL;
	}
	if (out_end(c, c->req_id, FCGI_REQUEST_COMPLETE) != 0)
		conn_close(c);
	else
		request_complete(c);
}

/* Acts on every complete event the reader holds. */
static void
conn_process(struct conn *c)
{
	const struct config *cfg = c->h->w->cfg;
	struct fcgi_event ev;
	char tmp[256];
	size_t n;

	c->processing = 1;
	while (!c->closed) {
		fcgi_reader_next(c->rd, &ev);
		switch (ev.type) {
		case FCGI_EV_NONE: goto out;
		case FCGI_EV_BEGIN: on_begin(c, &ev); break;
		case FCGI_EV_PARAMS:
			if (params_done(c, &ev) != 0) {
				log_error(NULL, "FastCGI request: out of memory");
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
			n = fcgi_write_values(tmp, sizeof(tmp), ev.params,
			    ev.nparams, FCGI_MAX_CONNS_SAID,
			    (unsigned)cfg->max_inflight, 0);
			if (n == 0 || out_reserve(c, n) != 0)
				break;
			memcpy(c->out + c->out_len, tmp, n);
			c->out_len += n;
			break;
		case FCGI_EV_UNKNOWN:
			if (out_reserve(c, 16) == 0)
				c->out_len += fcgi_write_unknown_type(
				    c->out + c->out_len, ev.unknown_type);
			break;
		case FCGI_EV_REFUSE_MPX:
			if (out_end(c, ev.request_id, FCGI_CANT_MPX_CONN) != 0)
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

static void
conn_read(struct conn *c)
{
	char buf[READ_CHUNK];
	size_t room;
	ssize_t n;
	int i;

	for (i = 0; i < READS_PER_EVENT && !c->closed; i++) {
		room = c->state == C_LINGER ? sizeof(buf)
		                            : fcgi_reader_room(c->rd);
		if (room == 0) {
			/* cannot happen: conn_process takes every event */
			conn_close(c);
			return;
		}
		n = read(c->fd, buf, room < sizeof(buf) ? room : sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			/* the web server closed or reset the connection */
			if (n < 0)
				log_debug(NULL, "FastCGI connection: read: %s",
				    strerror(errno));
			conn_close(c);
			return;
		}
		if (c->state == C_LINGER)
			continue; /* discarded until the peer closes */
		if (fcgi_reader_feed(c->rd, buf, (size_t)n) != 0) {
			log_warn(NULL, "FastCGI connection: input too large");
			conn_close(c);
			return;
		}
		conn_process(c);
	}
}

static void
on_poll(uv_poll_t *p, int status, int events)
{
	struct conn *c = p->data;

	if (status < 0) {
		conn_close(c);
		return;
	}
	if (events & UV_WRITABLE)
		conn_flush(c);
	if (!c->closed && (events & UV_READABLE))
		conn_read(c);
}

/* --- open and close ---------------------------------------------------- */

static void
on_linger_timeout(uv_timer_t *t)
{
	conn_close(t->data);
}

/*
 * The last answer is out: shut the connection down for writing and read
 * (discarding) until the web server closes it, at most
 * request_timeout_ms, as libfcgi's close does.
 */
static void
conn_linger(struct conn *c)
{
	c->state = C_LINGER;
	if (shutdown(c->fd, SHUT_WR) != 0) {
		conn_close(c);
		return;
	}
	(void)uv_timer_start(&c->timer, on_linger_timeout,
	    (uint64_t)c->h->w->cfg->request_timeout_ms, 0);
}

static void
on_handle_closed(uv_handle_t *hd)
{
	struct conn *c = hd->data;
	struct conn_host *h = c->h;

	if (--c->handles_open > 0)
		return;
	(void)close(c->fd);
	fcgi_reader_free(c->rd);
	free(c->out);
	free(c);
	if (h->on_idle != NULL)
		h->on_idle(h);
}

static void
conn_close(struct conn *c)
{
	struct conn_host *h = c->h;

	if (c->closed)
		return;
	c->closed = 1;
	if (c->x != NULL) {
		/* a request in progress finishes without its connection */
		inflight_release(c);
		if (c->state == C_SERVING)
			c->x->transport = NULL;
		else
			exchange_free(h, c->x);
		c->x = NULL;
	}
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		h->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	h->nconns--;
	uv_close((uv_handle_t *)&c->poll, on_handle_closed);
	uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

int
conn_open(struct conn_host *h, int fd)
{
	struct conn *c;

	if ((c = calloc(1, sizeof(*c))) == NULL ||
	    (c->rd = fcgi_reader_new()) == NULL) {
		free(c);
		(void)close(fd);
		return -1;
	}
	c->h = h;
	c->fd = fd;
	c->linger = !h->listen_unix;
	if (uv_poll_init_socket(h->w->loop, &c->poll, fd) != 0) {
		fcgi_reader_free(c->rd);
		free(c);
		(void)close(fd);
		return -1;
	}
	(void)uv_timer_init(h->w->loop, &c->timer);
	c->poll.data = c;
	c->timer.data = c;
	c->handles_open = 2;
	c->next = h->conns;
	if (h->conns != NULL)
		h->conns->prev = c;
	h->conns = c;
	h->nconns++;
	c->poll_events = UV_READABLE;
	if (uv_poll_start(&c->poll, UV_READABLE, on_poll) != 0) {
		conn_close(c);
		return -1;
	}
	(void)uv_timer_start(&c->timer, on_read_timeout,
	    (uint64_t)h->w->cfg->request_timeout_ms, 0);
	return 0;
}

void
conn_stop_idle(struct conn_host *h)
{
	struct conn *c, *next;

	h->stopping = 1;
	for (c = h->conns; c != NULL; c = next) {
		next = c->next;
		/* a new connection carries a request on its way: serve it */
		if (c->state != C_IDLE || c->served == 0)
			continue;
		c->closing = 1;
		conn_flush(c);
	}
}

void
conn_expire_all(struct conn_host *h)
{
	struct conn *c, *next;
	struct exchange *x;

	for (c = h->conns; c != NULL; c = next) {
		next = c->next;
		x = c->x;
		if (c->state == C_SERVING && x != NULL) {
			/*
			 * The use case keeps x and finishes it later (nothing
			 * is sent then); this answer is made from a copy.
			 */
			struct exchange tmp;

			memset(&tmp, 0, sizeof(tmp));
			response_init(&tmp.resp);
			tmp.req.method = x->req.method;
			memcpy(tmp.req.request_id, x->req.request_id,
			    sizeof(tmp.req.request_id));
			response_problem(&tmp.resp, PROB_UNAVAILABLE,
			    "The responder is shutting down. Retry with the "
			    "same key.",
			    NULL);
			(void)response_header(&tmp.resp, "Retry-After", "%d",
			    RETRY_AFTER_UNAVAILABLE_S);
			(void)out_response(c, &tmp);
			response_free(&tmp.resp);
			x->transport = NULL;
			c->x = NULL;
			inflight_release(c);
		}
		c->closing = 1;
		conn_flush(c);
		if (!c->closed)
			conn_close(c);
	}
}
