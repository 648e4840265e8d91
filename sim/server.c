/*
 * server.c - connections, llhttp, the commit per loop turn, the faults.
 */
#include "server.h"

#include <errno.h>
#include <llhttp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "buf.h"
#include "defaults.h"
#include "reqlog.h"

#define SERVER_BACKLOG 1024
#define SERVER_FIELD_MAX 32 /* longer header names are none we read */

enum header_kind {
	HDR_OTHER,
	HDR_AUTH,
	HDR_IDEM,
	HDR_EXPECT,
	HDR_XRID,
	HDR_TRACE
};

struct sim_server;
struct sim_conn;

/* One request and its answer; a connection keeps one for its life. */
struct sim_exchange {
	struct sim_server *srv;
	struct sim_conn *conn; /* NULL once detached (connection gone) */
	uv_timer_t timer;      /* latency, late answer, trickle */
	struct sim_exchange_data d;
	struct sim_buf url;
	struct sim_buf body;
	char auth[SIM_MAX_HEADER_VALUE];
	char idem[SIM_MAX_HEADER_VALUE];
	char xrid[SIM_REQLOG_VALUE_MAX], trace[SIM_REQLOG_VALUE_MAX];
	size_t xrid_len, trace_len; /* X-Request-Id, traceparent: the log's */
	char field[SERVER_FIELD_MAX];
	size_t field_len;
	bool field_long;
	enum header_kind hdr;
	size_t header_bytes;
	int error_status;     /* 413, 414, 431 found while parsing */
	bool expect_continue; /* Expect: 100-continue */
	struct sim_buf out;
	size_t out_off;
	bool queued;  /* on the server's ready list */
	bool waiting; /* its timer runs (WAIT, LATE or TRICKLE) */
	TAILQ_ENTRY(sim_exchange) entry;
};

struct sim_conn {
	union {
		uv_handle_t handle;
		uv_stream_t stream;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} h;
	struct sim_server *srv;
	llhttp_t parser;
	struct sim_exchange *ex;
	struct sim_buf stash; /* bytes read while a request is answered */
	uv_write_t wreq;
	uint64_t last_active;
	bool busy;    /* a complete request is not answered yet */
	bool writing; /* wreq in flight */
	bool closing;
	bool keep_alive;
	bool read_stopped;
	TAILQ_ENTRY(sim_conn) entry;
};

TAILQ_HEAD(exchange_list, sim_exchange);

struct sim_server {
	const struct sim_server_config *cfg;
	uv_loop_t *loop;
	union {
		uv_handle_t handle;
		uv_stream_t stream;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} listener;
	bool is_unix;
	uv_prepare_t commit;
	uv_timer_t sweep;
	uv_timer_t prune;
	uv_signal_t sigterm;
	uv_signal_t sigint;
	struct sim_api *api;
	struct sim_store *store;
	llhttp_settings_t settings;
	char readbuf[SIM_READ_BUF_BYTES];
	TAILQ_HEAD(, sim_conn) conns;
	size_t n_conns;
	struct exchange_list ready;    /* answers waiting for the commit */
	struct exchange_list pool;     /* free exchanges */
	struct exchange_list detached; /* still charging, connection gone */
	size_t n_exchanges;
	bool stopping;
};

static void conn_close(struct sim_conn *c);
static void conn_process(struct sim_conn *c);
static void exchange_done(struct sim_exchange *ex);

/* --- exchanges ---------------------------------------------------------- */

static void
exchange_timer_closed(uv_handle_t *h)
{
	struct sim_exchange *ex = h->data;

	sim_exchange_data_free(&ex->d);
	sim_buf_free(&ex->url);
	sim_buf_free(&ex->body);
	sim_buf_free(&ex->out);
	free(ex);
}

static struct sim_exchange *
exchange_get(struct sim_server *srv)
{
	struct sim_exchange *ex = TAILQ_FIRST(&srv->pool);

	if (ex != NULL) {
		TAILQ_REMOVE(&srv->pool, ex, entry);
		return ex;
	}
	ex = sim_xmalloc(sizeof(*ex));
	memset(ex, 0, sizeof(*ex));
	ex->srv = srv;
	if (uv_timer_init(srv->loop, &ex->timer) != 0)
		sim_fatal("uv_timer_init failed");
	ex->timer.data = ex;
	srv->n_exchanges++;
	return ex;
}

/* Back to the pool; its key is released. */
static void
exchange_put(struct sim_exchange *ex)
{
	struct sim_server *srv = ex->srv;

	sim_api_release(srv->api, &ex->d);
	uv_timer_stop(&ex->timer);
	ex->waiting = false;
	ex->conn = NULL;
	TAILQ_INSERT_HEAD(&srv->pool, ex, entry);
}

static void
exchange_reset_request(struct sim_exchange *ex)
{
	ex->url.len = 0;
	ex->body.len = 0;
	ex->field_len = 0;
	ex->field_long = false;
	ex->hdr = HDR_OTHER;
	ex->header_bytes = 0;
	ex->error_status = 0;
	ex->expect_continue = false;
	ex->d.has_auth = false;
	ex->d.auth_len = 0;
	ex->d.has_idem = false;
	ex->d.idem_len = 0;
	ex->d.idem_long = false;
	ex->xrid_len = ex->trace_len = 0;
}

/* --- llhttp callbacks ----------------------------------------------------- */

static struct sim_exchange *
parser_ex(llhttp_t *p)
{
	return ((struct sim_conn *)p->data)->ex;
}

static int
on_message_begin(llhttp_t *p)
{
	exchange_reset_request(parser_ex(p));
	return 0;
}

static int
on_url(llhttp_t *p, const char *at, size_t n)
{
	struct sim_exchange *ex = parser_ex(p);

	if (ex->url.len + n > SIM_MAX_URL_BYTES) {
		ex->error_status = 414;
		return -1;
	}
	sim_buf_add(&ex->url, at, n);
	return 0;
}

static int
count_header_bytes(struct sim_exchange *ex, size_t n)
{
	ex->header_bytes += n;
	if (ex->header_bytes > SIM_MAX_HEADER_BYTES) {
		ex->error_status = 431;
		return -1;
	}
	return 0;
}

static int
on_header_field(llhttp_t *p, const char *at, size_t n)
{
	struct sim_exchange *ex = parser_ex(p);

	if (count_header_bytes(ex, n) != 0)
		return -1;
	if (ex->field_len + n > sizeof(ex->field))
		ex->field_long = true;
	else
		memcpy(ex->field + ex->field_len, at, n);
	ex->field_len += n;
	return 0;
}

static int
on_header_field_complete(llhttp_t *p)
{
	struct sim_exchange *ex = parser_ex(p);

	ex->hdr = HDR_OTHER;
	if (!ex->field_long && ex->field_len == 13 &&
	    strncasecmp(ex->field, "authorization", 13) == 0) {
		ex->hdr = HDR_AUTH;
		ex->d.has_auth = true;
		ex->d.auth_len = 0;
	} else if (!ex->field_long && ex->field_len == 15 &&
	    strncasecmp(ex->field, "idempotency-key", 15) == 0) {
		ex->hdr = HDR_IDEM;
		ex->d.has_idem = true;
		ex->d.idem_len = 0;
		ex->d.idem_long = false;
	} else if (!ex->field_long && ex->field_len == 6 &&
	    strncasecmp(ex->field, "expect", 6) == 0) {
		ex->hdr = HDR_EXPECT;
	} else if (!ex->field_long && ex->field_len == 12 &&
	    strncasecmp(ex->field, "x-request-id", 12) == 0)
		ex->hdr = HDR_XRID;
	else if (!ex->field_long && ex->field_len == 11 &&
	    strncasecmp(ex->field, "traceparent", 11) == 0)
		ex->hdr = HDR_TRACE;
	ex->field_len = 0;
	ex->field_long = false;
	return 0;
}

static int
on_header_value(llhttp_t *p, const char *at, size_t n)
{
	struct sim_exchange *ex = parser_ex(p);

	if (count_header_bytes(ex, n) != 0)
		return -1;
	if (ex->hdr == HDR_AUTH) {
		if (ex->d.auth_len + n > sizeof(ex->auth))
			n = sizeof(ex->auth) - ex->d.auth_len;
		memcpy(ex->auth + ex->d.auth_len, at, n);
		ex->d.auth_len += n;
	} else if (ex->hdr == HDR_IDEM) {
		if (ex->d.idem_len + n > sizeof(ex->idem)) {
			ex->d.idem_long = true;
			n = sizeof(ex->idem) - ex->d.idem_len;
		}
		memcpy(ex->idem + ex->d.idem_len, at, n);
		ex->d.idem_len += n;
	} else if (ex->hdr == HDR_EXPECT && n >= 3 &&
	    strncasecmp(at, "100", 3) == 0) {
		ex->expect_continue = true;
	} else if (ex->hdr == HDR_XRID || ex->hdr == HDR_TRACE) {
		char *v = ex->hdr == HDR_XRID ? ex->xrid : ex->trace;
		size_t *len =
		    ex->hdr == HDR_XRID ? &ex->xrid_len : &ex->trace_len;

		n = n < SIM_REQLOG_VALUE_MAX - *len
		    ? n
		    : SIM_REQLOG_VALUE_MAX - *len;
		memcpy(v + *len, at, n);
		*len += n;
	}
	return 0;
}

static int
on_headers_complete(llhttp_t *p)
{
	struct sim_exchange *ex = parser_ex(p);

	if ((p->flags & F_CONTENT_LENGTH) &&
	    p->content_length > SIM_MAX_BODY_BYTES) {
		ex->error_status = 413;
		return -1;
	}
	if (ex->expect_continue) {
		static char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		uv_buf_t b = uv_buf_init(cont, sizeof(cont) - 1);

		/* a short write here only makes the client wait for its timer */
		(void)uv_try_write(&ex->conn->h.stream, &b, 1);
	}
	return 0;
}

static int
on_body(llhttp_t *p, const char *at, size_t n)
{
	struct sim_exchange *ex = parser_ex(p);

	if (ex->body.len + n > SIM_MAX_BODY_BYTES) {
		ex->error_status = 413;
		return -1;
	}
	sim_buf_add(&ex->body, at, n);
	return 0;
}

static int
on_message_complete(llhttp_t *p)
{
	(void)p;
	return HPE_PAUSED; /* one request at a time: conn_process resumes */
}

/* --- answers --------------------------------------------------------------- */

/* The whole answer (head and body) into ex->out. */
static void
render_answer(struct sim_exchange *ex)
{
	struct sim_exchange_data *d = &ex->d;
	struct sim_buf *o = &ex->out;
	struct sim_conn *c = ex->conn;
	char rid[4 + SIM_ID_HEX + 1], date[64];

	sim_api_request_id(ex->srv->api, rid);
	if (sim_api_date(ex->srv->api, date, sizeof(date)) == 0)
		date[0] = '\0';
	if (ex->srv->cfg->request_log_fd >= 0) {
		struct sim_reqlog_entry e = { rid,
			llhttp_method_name(d->method),
			ex->url.p ? ex->url.p : "", ex->url.len, d->status,
			ex->idem, d->has_idem ? d->idem_len : 0, ex->xrid,
			ex->xrid_len, ex->trace, ex->trace_len };

		sim_reqlog_write(ex->srv->cfg->request_log_fd, &e);
	}
	o->len = 0;
	ex->out_off = 0;
	sim_buf_addf(o,
	    "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nRequest-Id: %s\r\n",
	    d->status, sim_api_reason(d->status), date, d->body_out.len, rid);
	if (d->echo_idem) {
		sim_buf_adds(o, "Idempotency-Key: ");
		sim_buf_add(o, d->idem, d->idem_len);
		sim_buf_adds(o,
		    d->replayed ? "\r\nIdempotent-Replayed: true\r\n"
		                : "\r\nIdempotent-Replayed: false\r\n");
	}
	if (d->status == 409 || d->status == 429 || d->status == 500 ||
	    d->status == 503)
		sim_buf_adds(o, "Stripe-Should-Retry: true\r\n");
	else if (d->status >= 400)
		sim_buf_adds(o, "Stripe-Should-Retry: false\r\n");
	if (c != NULL && !c->keep_alive)
		sim_buf_adds(o, "Connection: close\r\n");
	else if (c != NULL && c->parser.http_minor == 0)
		sim_buf_adds(o, "Connection: keep-alive\r\n");
	sim_buf_adds(o, "\r\n");
	sim_buf_add(o, d->body_out.p, d->body_out.len);
}

/* Queues ex for the next commit: nothing leaves before the store is
 * written (and fsynced, unless --fsync never). */
static void
exchange_ready(struct sim_exchange *ex)
{
	if (ex->d.action == SIM_ACT_ANSWER || ex->d.action == SIM_ACT_LATE ||
	    ex->d.action == SIM_ACT_TRICKLE)
		render_answer(ex);
	ex->queued = true;
	TAILQ_INSERT_TAIL(&ex->srv->ready, ex, entry);
}

static void
on_write(uv_write_t *req, int status)
{
	struct sim_conn *c = req->data;

	c->writing = false;
	if (c->closing)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	exchange_done(c->ex);
}

/* Sends the rest of ex->out; exchange_done when all is out. */
static void
conn_write(struct sim_conn *c)
{
	struct sim_exchange *ex = c->ex;
	uv_buf_t b = uv_buf_init(ex->out.p + ex->out_off,
	    (unsigned)(ex->out.len - ex->out_off));
	int r = uv_try_write(&c->h.stream, &b, 1);

	if (r == (int)b.len) {
		exchange_done(ex);
		return;
	}
	if (r < 0 && r != UV_EAGAIN) {
		conn_close(c);
		return;
	}
	if (r > 0) {
		b.base += r;
		b.len -= (size_t)r;
	}
	c->wreq.data = c;
	if (uv_write(&c->wreq, &c->h.stream, &b, 1, on_write) != 0) {
		conn_close(c);
		return;
	}
	c->writing = true;
}

/* A detached exchange whose timeline is over: back to the pool. */
static void
exchange_detached_done(struct sim_exchange *ex)
{
	TAILQ_REMOVE(&ex->srv->detached, ex, entry);
	exchange_put(ex);
}

static void
on_late(uv_timer_t *t)
{
	struct sim_exchange *ex = t->data;

	ex->waiting = false;
	if (ex->conn == NULL) {
		exchange_detached_done(ex);
		return;
	}
	conn_write(ex->conn);
}

static void
on_trickle(uv_timer_t *t)
{
	struct sim_exchange *ex = t->data;
	struct sim_conn *c = ex->conn;
	uv_buf_t b = uv_buf_init(ex->out.p + ex->out_off, 1);
	int r;

	if (c == NULL) {
		/* the client is gone: the trickle runs its course unseen */
		if (++ex->out_off >= ex->out.len)
			exchange_detached_done(ex);
		return;
	}
	r = uv_try_write(&c->h.stream, &b, 1);
	if (r == UV_EAGAIN)
		return;
	if (r < 0) {
		conn_close(c);
		return;
	}
	ex->out_off += (size_t)r;
	if (ex->out_off == ex->out.len) {
		uv_timer_stop(&ex->timer);
		ex->waiting = false;
		exchange_done(ex);
	}
}

/* RST instead of FIN: SO_LINGER with a zero timeout, then close. */
static void
conn_reset(struct sim_conn *c)
{
	struct linger lg = { 1, 0 };
	uv_os_fd_t fd;

	if (!c->srv->is_unix && uv_fileno(&c->h.handle, &fd) == 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	conn_close(c);
}

/* Runs the wire action of an answer whose records are on disk. */
static void
exchange_perform(struct sim_exchange *ex)
{
	struct sim_conn *c = ex->conn;
	struct sim_server *srv = ex->srv;

	switch (ex->d.action) {
	case SIM_ACT_ANSWER: conn_write(c); break;
	case SIM_ACT_CLOSE: conn_close(c); break;
	case SIM_ACT_RESET: conn_reset(c); break;
	case SIM_ACT_LATE:
		ex->waiting = true;
		uv_timer_start(&ex->timer, on_late, srv->cfg->late_ms, 0);
		break;
	case SIM_ACT_TRICKLE:
		ex->waiting = true;
		uv_timer_start(&ex->timer, on_trickle, srv->cfg->trickle_ms,
		    srv->cfg->trickle_ms ? srv->cfg->trickle_ms : 1);
		break;
	case SIM_ACT_WAIT: break; /* never queued */
	}
}

/* The group commit: once per loop turn, before the loop blocks. */
static void
on_prepare(uv_prepare_t *h)
{
	struct sim_server *srv = h->data;
	struct sim_exchange *ex;

	while ((ex = TAILQ_FIRST(&srv->ready)) != NULL) {
		sim_store_commit(srv->store);
		TAILQ_REMOVE(&srv->ready, ex, entry);
		ex->queued = false;
		exchange_perform(ex);
	}
	if (sim_store_dirty(srv->store))
		sim_store_commit(srv->store); /* deliveries of detached ones */
	/* every charge of the turn is on disk: its webhook may go */
	sim_webhooks_committed(srv->api->webhooks);
}

/* After the latency: charge now; answer if the connection is still there. */
static void
on_wait(uv_timer_t *t)
{
	struct sim_exchange *ex = t->data;

	ex->waiting = false;
	sim_api_execute(ex->srv->api, &ex->d);
	if (ex->conn == NULL) {
		if (ex->d.action == SIM_ACT_LATE ||
		    ex->d.action == SIM_ACT_TRICKLE) {
			render_answer(ex); /* its timeline runs, unseen */
			exchange_perform(ex);
			return;
		}
		exchange_detached_done(ex);
		return;
	}
	exchange_ready(ex);
}

/* --- connections ----------------------------------------------------------- */

static void
answer_parse_error(struct sim_conn *c)
{
	struct sim_exchange *ex = c->ex;

	sim_api_malformed(&ex->d, ex->error_status ? ex->error_status : 400);
	c->keep_alive = false;
	c->busy = true;
	exchange_ready(ex);
}

static void
dispatch(struct sim_conn *c)
{
	struct sim_exchange *ex = c->ex;
	struct sim_exchange_data *d = &ex->d;

	c->busy = true;
	c->keep_alive =
	    llhttp_should_keep_alive(&c->parser) && !c->srv->stopping;
	d->method = llhttp_get_method(&c->parser);
	d->url = ex->url.p ? ex->url.p : "";
	d->url_len = ex->url.len;
	d->auth = ex->auth;
	d->idem = ex->idem;
	d->body = ex->body.p ? ex->body.p : "";
	d->body_len = ex->body.len;
	sim_api_handle(c->srv->api, d);
	if (d->action == SIM_ACT_WAIT) {
		ex->waiting = true;
		uv_timer_start(&ex->timer, on_wait, d->wait_ms, 0);
		return;
	}
	exchange_ready(ex);
}

/* Parses the stash until a request is complete (then dispatches it) or the
 * stash is used up. */
static void
conn_process(struct sim_conn *c)
{
	const char *start = c->stash.p;
	llhttp_errno_t e;
	size_t used;

	if (c->busy || c->closing || c->stash.len == 0)
		return;
	e = llhttp_execute(&c->parser, start, c->stash.len);
	if (e == HPE_OK) {
		c->stash.len = 0;
		return;
	}
	if (e == HPE_PAUSED) {
		used = (size_t)(llhttp_get_error_pos(&c->parser) - start);
		memmove(c->stash.p, c->stash.p + used, c->stash.len - used);
		c->stash.len -= used;
		llhttp_resume(&c->parser);
		dispatch(c);
		return;
	}
	c->stash.len = 0;
	answer_parse_error(c);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct sim_conn *c = h->data;

	(void)suggested;
	buf->base = c->srv->readbuf;
	buf->len = sizeof(c->srv->readbuf);
}

static void
on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct sim_conn *c = s->data;

	if (n == UV_EOF && c->busy) {
		/* a half-closed client still gets its answer, then the close */
		c->keep_alive = false;
		uv_read_stop(s);
		return;
	}
	if (n < 0) {
		conn_close(c);
		return;
	}
	if (n == 0)
		return;
	c->last_active = uv_now(c->srv->loop);
	sim_buf_add(&c->stash, buf->base, (size_t)n);
	if (c->busy) {
		if (c->stash.len > SIM_MAX_STASH_BYTES) {
			uv_read_stop(s);
			c->read_stopped = true;
		}
		return;
	}
	conn_process(c);
}

static void
on_conn_closed(uv_handle_t *h)
{
	struct sim_conn *c = h->data;
	struct sim_server *srv = c->srv;

	if (c->ex != NULL)
		exchange_put(c->ex);
	sim_buf_free(&c->stash);
	TAILQ_REMOVE(&srv->conns, c, entry);
	srv->n_conns--;
	free(c);
}

static void
conn_close(struct sim_conn *c)
{
	struct sim_exchange *ex = c->ex;

	if (c->closing)
		return;
	c->closing = true;
	if (ex != NULL) {
		if (ex->queued) {
			TAILQ_REMOVE(&c->srv->ready, ex, entry);
			ex->queued = false;
		}
		if (ex->waiting && !c->srv->stopping) {
			/* the provider's timeline does not depend on the client:
			 * the charge still happens when its latency is over, and
			 * the key stays in flight until a late or trickled answer
			 * would have been complete */
			ex->conn = NULL;
			c->ex = NULL;
			TAILQ_INSERT_TAIL(&c->srv->detached, ex, entry);
		} else {
			uv_timer_stop(&ex->timer);
			ex->waiting = false;
			sim_api_release(c->srv->api, &ex->d);
		}
	}
	uv_close(&c->h.handle, on_conn_closed);
}

/* The answer is out (or the action done): the next request may start. */
static void
exchange_done(struct sim_exchange *ex)
{
	struct sim_conn *c = ex->conn;

	sim_api_release(ex->srv->api, &ex->d);
	c->busy = false;
	c->last_active = uv_now(c->srv->loop);
	if (!c->keep_alive) {
		conn_close(c);
		return;
	}
	if (c->read_stopped) {
		c->read_stopped = false;
		uv_read_start(&c->h.stream, on_alloc, on_read);
	}
	conn_process(c);
}

static void
on_connection(uv_stream_t *l, int status)
{
	struct sim_server *srv = l->data;
	struct sim_conn *c;
	int r;

	if (status < 0)
		return;
	c = sim_xmalloc(sizeof(*c));
	memset(c, 0, sizeof(*c));
	c->srv = srv;
	r = srv->is_unix ? uv_pipe_init(srv->loop, &c->h.pipe, 0)
	                 : uv_tcp_init(srv->loop, &c->h.tcp);
	if (r != 0) {
		free(c);
		return;
	}
	c->h.handle.data = c;
	TAILQ_INSERT_TAIL(&srv->conns, c, entry);
	srv->n_conns++;
	if (uv_accept(l, &c->h.stream) != 0) {
		conn_close(c);
		return;
	}
	if (srv->stopping || srv->n_conns > srv->cfg->max_connections) {
		conn_close(c);
		return;
	}
	if (sim_api_refuse(srv->api)) {
		conn_reset(c);
		return;
	}
	if (!srv->is_unix)
		(void)uv_tcp_nodelay(&c->h.tcp, 1);
	c->ex = exchange_get(srv);
	c->ex->conn = c;
	llhttp_init(&c->parser, HTTP_REQUEST, &srv->settings);
	c->parser.data = c;
	c->last_active = uv_now(srv->loop);
	if (uv_read_start(&c->h.stream, on_alloc, on_read) != 0)
		conn_close(c);
}

/* --- timers, signals, start and stop ------------------------------------- */

static void
on_sweep(uv_timer_t *t)
{
	struct sim_server *srv = t->data;
	uint64_t now = uv_now(srv->loop),
	         idle = (uint64_t)srv->cfg->idle_timeout_s * 1000;
	struct sim_conn *c, *next;

	for (c = TAILQ_FIRST(&srv->conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		if (!c->busy && !c->closing && now - c->last_active >= idle)
			conn_close(c);
	}
}

static void
on_prune(uv_timer_t *t)
{
	struct sim_server *srv = t->data;

	sim_store_prune(srv->store, (int64_t)time(NULL));
}

static void
close_if_open(uv_handle_t *h, uv_close_cb cb)
{
	if (!uv_is_closing(h))
		uv_close(h, cb);
}

static void
on_signal(uv_signal_t *s, int signum)
{
	struct sim_server *srv = s->data;
	struct sim_conn *c, *next;
	struct sim_exchange *ex;

	(void)signum;
	if (srv->stopping)
		return;
	srv->stopping = true;
	close_if_open(&srv->listener.handle, NULL);
	for (c = TAILQ_FIRST(&srv->conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, entry);
		conn_close(c);
	}
	while ((ex = TAILQ_FIRST(&srv->detached)) != NULL) {
		TAILQ_REMOVE(&srv->detached, ex, entry);
		exchange_put(ex);
	}
	sim_store_commit(srv->store);
	sim_webhooks_stop(srv->api->webhooks);
	uv_close((uv_handle_t *)&srv->commit, NULL);
	uv_close((uv_handle_t *)&srv->sweep, NULL);
	uv_close((uv_handle_t *)&srv->prune, NULL);
	sim_api_busy_stop(srv->api);
	uv_close((uv_handle_t *)&srv->sigterm, NULL);
	uv_close((uv_handle_t *)&srv->sigint, NULL);
}

/* Binds cfg->listen; the address actually bound into shown. 0 or -1. */
static int
server_listen(struct sim_server *srv, char *shown, size_t shown_len)
{
	const char *a = srv->cfg->listen, *colon;
	char host[256];
	struct sockaddr_storage ss;
	int namelen = sizeof(ss), r, port;
	struct stat sb;

	if (strncmp(a, "unix:", 5) == 0) {
		srv->is_unix = true;
		if (stat(a + 5, &sb) == 0 && S_ISSOCK(sb.st_mode))
			(void)unlink(a + 5);
		r = uv_pipe_init(srv->loop, &srv->listener.pipe, 0);
		if (r == 0)
			r = uv_pipe_bind(&srv->listener.pipe, a + 5);
		snprintf(shown, shown_len, "%s", a);
	} else {
		colon = strrchr(a, ':');
		if (colon == NULL || (size_t)(colon - a) >= sizeof(host)) {
			fprintf(stderr,
			    "charge-provider-sim: --listen %s: not HOST:PORT or unix:PATH\n",
			    a);
			return -1;
		}
		memcpy(host, a, (size_t)(colon - a));
		host[colon - a] = '\0';
		port = atoi(colon + 1);
		if (host[0] == '[' && host[strlen(host) - 1] == ']') {
			memmove(host, host + 1, strlen(host) - 2);
			host[strlen(host) - 2] = '\0';
			r = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss);
		} else {
			r = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
		}
		if (r == 0)
			r = uv_tcp_init(srv->loop, &srv->listener.tcp);
		if (r == 0)
			r = uv_tcp_bind(&srv->listener.tcp,
			    (struct sockaddr *)&ss, 0);
		if (r == 0)
			r = uv_tcp_getsockname(&srv->listener.tcp,
			    (struct sockaddr *)&ss, &namelen);
		if (r == 0) {
			port = ntohs(ss.ss_family == AF_INET6
			        ? ((struct sockaddr_in6 *)&ss)->sin6_port
			        : ((struct sockaddr_in *)&ss)->sin_port);
			snprintf(shown, shown_len, "%s%s%s:%d",
			    ss.ss_family == AF_INET6 ? "[" : "", host,
			    ss.ss_family == AF_INET6 ? "]" : "", port);
		}
	}
	srv->listener.handle.data = srv;
	if (r == 0)
		r = uv_listen(&srv->listener.stream, SERVER_BACKLOG,
		    on_connection);
	if (r != 0) {
		fprintf(stderr, "charge-provider-sim: --listen %s: %s\n", a,
		    uv_strerror(r));
		if (srv->listener.handle.type != UV_UNKNOWN_HANDLE)
			uv_close(&srv->listener.handle, NULL);
		return -1;
	}
	return 0;
}

static void
walk_close(uv_handle_t *h, void *arg)
{
	(void)arg;
	close_if_open(h, NULL);
}

int
sim_server_run(const struct sim_server_config *cfg, struct sim_api *api,
    struct sim_store *store)
{
	struct sim_server *srv = sim_xmalloc(sizeof(*srv));
	uv_loop_t loop;
	char shown[300];
	struct sim_exchange *ex;
	int rc = -1;

	memset(srv, 0, sizeof(*srv));
	if (uv_loop_init(&loop) != 0)
		sim_fatal("uv_loop_init failed");
	srv->cfg = cfg;
	srv->loop = &loop;
	srv->api = api;
	srv->store = store;
	TAILQ_INIT(&srv->conns);
	TAILQ_INIT(&srv->ready);
	TAILQ_INIT(&srv->pool);
	TAILQ_INIT(&srv->detached);
	llhttp_settings_init(&srv->settings);
	srv->settings.on_message_begin = on_message_begin;
	srv->settings.on_url = on_url;
	srv->settings.on_header_field = on_header_field;
	srv->settings.on_header_field_complete = on_header_field_complete;
	srv->settings.on_header_value = on_header_value;
	srv->settings.on_headers_complete = on_headers_complete;
	srv->settings.on_body = on_body;
	srv->settings.on_message_complete = on_message_complete;
	if (server_listen(srv, shown, sizeof(shown)) != 0)
		goto done;
	if (uv_prepare_init(&loop, &srv->commit) != 0 ||
	    uv_timer_init(&loop, &srv->sweep) != 0 ||
	    uv_timer_init(&loop, &srv->prune) != 0 ||
	    uv_signal_init(&loop, &srv->sigterm) != 0 ||
	    uv_signal_init(&loop, &srv->sigint) != 0)
		sim_fatal("libuv handle initialisation failed");
	srv->commit.data = srv->sweep.data = srv->prune.data = srv;
	srv->sigterm.data = srv->sigint.data = srv;
	if (uv_prepare_start(&srv->commit, on_prepare) != 0 ||
	    uv_timer_start(&srv->sweep, on_sweep, SIM_SWEEP_MS, SIM_SWEEP_MS) !=
	        0 ||
	    uv_timer_start(&srv->prune, on_prune, SIM_PRUNE_MS, SIM_PRUNE_MS) !=
	        0 ||
	    uv_signal_start(&srv->sigterm, on_signal, SIGTERM) != 0 ||
	    uv_signal_start(&srv->sigint, on_signal, SIGINT) != 0)
		sim_fatal("libuv handle start failed");
	if (cfg->webhooks != NULL)
		api->webhooks = sim_webhooks_new(&loop, cfg->webhooks);
	sim_api_busy_start(api, &loop);
	fprintf(stderr, "charge-provider-sim: listening on %s\n", shown);
	uv_run(&loop, UV_RUN_DEFAULT);
	sim_store_commit(store);
	rc = 0;
done:
	/* the pool's timers: closed here, freed in their close callbacks */
	while ((ex = TAILQ_FIRST(&srv->pool)) != NULL) {
		TAILQ_REMOVE(&srv->pool, ex, entry);
		uv_close((uv_handle_t *)&ex->timer, exchange_timer_closed);
	}
	sim_webhooks_stop(api->webhooks);
	uv_walk(&loop, walk_close, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	sim_webhooks_free(api->webhooks);
	api->webhooks = NULL;
	if (uv_loop_close(&loop) != 0)
		fprintf(stderr,
		    "charge-provider-sim: the loop did not close cleanly\n");
	free(srv);
	return rc;
}
