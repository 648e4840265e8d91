/*
 * http1.c - the HTTP/1.1 client of http1.h: connections on libuv streams
 * (uv_tcp_t, uv_pipe_t), TLS through OpenSSL memory BIOs, answers parsed
 * with llhttp.
 *
 * A connection is in one state (h1c_state): resolving its host,
 * connecting, asking a proxy for a tunnel, in the TLS handshake, busy with one request, idle in the
 * pool, or closing. It reads all its life: an idle connection that gets
 * bytes or an end is closed at once, so a kept connection the peer closed
 * is rarely taken. One timer per connection: the connect timeout, then
 * the request's total timeout.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <openssl/ssl.h>

#include "http1.h"
#include "tls.h"
#include "util.h"

#define READ_BUF 16384 /* one read, shared by the connections of a pool */
/* each side of the TLS BIO pair: a partial record and one read */
#define TLS_BIO_BUF (2 * READ_BUF + 8192)
#define TUNNEL_MAX 4096 /* bytes of a proxy's answer to CONNECT */

enum h1c_state {
	CS_RESOLVING,
	CS_CONNECTING,
	CS_TUNNEL,
	CS_HANDSHAKE,
	CS_BUSY,
	CS_IDLE,
	CS_CLOSING,
	CS_NSTATES
};

#define B(s) (1u << (s))
/* h1c_set_state's map: h1c_allowed[from] has bit `to`. */
static const unsigned h1c_allowed[CS_NSTATES] = {
	[CS_RESOLVING] = B(CS_CONNECTING) | B(CS_CLOSING),
	[CS_CONNECTING] =
	    B(CS_TUNNEL) | B(CS_HANDSHAKE) | B(CS_BUSY) | B(CS_CLOSING),
	[CS_TUNNEL] = B(CS_HANDSHAKE) | B(CS_CLOSING),
	[CS_HANDSHAKE] = B(CS_BUSY) | B(CS_CLOSING),
	[CS_BUSY] = B(CS_IDLE) | B(CS_CLOSING),
	[CS_IDLE] = B(CS_BUSY) | B(CS_CLOSING),
	[CS_CLOSING] = 0,
};
#undef B

struct h1_conn;

struct h1_req {
	struct h1_pool *pool;
	struct h1_conn *conn; /* NULL while waiting to fail (deferred) */
	char *out;            /* the request, head and body */
	size_t outlen;
	long long deadline_ms; /* uv_now */
	h1_header_fn *header;
	h1_body_fn *bodyfn;
	h1_done_fn *done;
	void *arg;
	struct h1_result res;
	int status; /* the answer's, once complete */
	LIST_ENTRY(h1_req) deferred;
};

struct h1_conn {
	struct h1_pool *pool;
	enum h1c_state state; /* only h1c_set_state changes it */
	union {
		uv_handle_t h;
		uv_stream_t s;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} u;
	uv_connect_t creq;
	uv_getaddrinfo_t gai;
	struct addrinfo *ai, *ai_next; /* resolved addresses, the next to try */
	int gai_pending;
	int timer_open, handle_open, handle_closing;
	uv_timer_t timer;
	SSL *ssl;
	BIO *net;            /* the network side of the BIO pair */
	struct h1_reader rd; /* the answer */
	char *tun; /* the proxy's answer to CONNECT so far (TUNNEL_MAX) */
	size_t tun_len;
	struct h1_req *req;        /* while busy */
	int reused;                /* it served a request before */
	int written;               /* a byte of req went to the socket */
	uint64_t idle_since;       /* uv_now */
	LIST_ENTRY(h1_conn) entry; /* idle or all */
};

struct h1_pool {
	uv_loop_t *loop;
	struct h1_target t;
	char host[256], unix_path[256], hosthdr[300];
	SSL_CTX *ctx;
	int ca_bad; /* the CA file cannot be loaded */
	struct h1_proxy px;
	const char *chost; /* where connections go: host, or the proxy's */
	int cport, proxied;
	struct sockaddr_storage
	    addr; /* chost a literal address: no resolving */
	int addr_literal;
	LIST_HEAD(, h1_conn) idle; /* most recent first */
	LIST_HEAD(, h1_conn) busy; /* every other connection not closing */
	int idle_n;
	int open;        /* connections not yet freed */
	int freeing;     /* h1_pool_free was called */
	uv_idle_t defer; /* fails requests after h1_request returned */
	int defer_open;
	LIST_HEAD(, h1_req) deferred;
	char rbuf[READ_BUF];
	char plain[READ_BUF];
};

static const char *const err_text[] = {
	[H1_OK] = "ok",
	[H1_RESOLVE] = "could not resolve the provider's host",
	[H1_CONNECT] = "could not connect to the provider",
	[H1_TLS_VERIFY] = "the provider's certificate was not verified",
	[H1_TLS_CA] = "the CA file cannot be read",
	[H1_TLS] = "the TLS handshake failed",
	[H1_PROXY] = "the proxy refused the tunnel to the provider",
	[H1_TIMEOUT] = "timed out",
	[H1_CLOSED] = "the connection closed before a complete answer",
	[H1_BAD_RESPONSE] = "not an HTTP/1.1 answer",
	[H1_ABORTED] = "the answer was refused (too large)",
	[H1_NOMEM] = "out of memory",
};

static void conn_close(struct h1_conn *c);
static void conn_send(struct h1_conn *c);
static void pool_maybe_free(struct h1_pool *p);

/* --- ending a request ---------------------------------------------------- */

static void
req_free(struct h1_req *r)
{
	free(r->out);
	free(r);
}

/* The request is over: its caller learns it, then it is freed. */
static void
req_finish(struct h1_req *r, enum h1_err err)
{
	r->res.err = err;
	r->res.status = err == H1_OK ? r->status : 0;
	r->res.why = err_text[err];
	r->done(r->arg, &r->res);
	req_free(r);
}

static void
on_defer(uv_idle_t *h)
{
	struct h1_pool *p = h->data;
	struct h1_req *r;

	while ((r = LIST_FIRST(&p->deferred)) != NULL) {
		LIST_REMOVE(r, deferred);
		req_finish(r, r->res.err);
	}
	(void)uv_idle_stop(&p->defer);
}

/* Fails r after the current callback (h1_request has not returned yet). */
static void
req_fail_later(struct h1_req *r, enum h1_err err)
{
	r->conn = NULL;
	r->res.err = err;
	LIST_INSERT_HEAD(&r->pool->deferred, r, deferred);
	(void)uv_idle_start(&r->pool->defer, on_defer);
}

/* --- connections ----------------------------------------------------------- */

static void
h1c_set_state(struct h1_conn *c, enum h1c_state to)
{
	(void)h1c_allowed; /* read by the asserts only */
	assert(c->state < CS_NSTATES && to < CS_NSTATES);
	assert((h1c_allowed[c->state] & (1u << to)) != 0);
	c->state = to;
}

/* Frees c once it is closing and nothing of it is open any more. */
static void
conn_maybe_free(struct h1_conn *c)
{
	struct h1_pool *p = c->pool;

	if (c->state != CS_CLOSING || c->handle_open || c->timer_open ||
	    c->gai_pending)
		return;
	if (c->ai != NULL)
		uv_freeaddrinfo(c->ai);
	free(c->tun);
	SSL_free(c->ssl); /* frees its side of the BIO pair too */
	BIO_free(c->net);
	free(c);
	p->open--;
	pool_maybe_free(p);
}

static int conn_connect_addr(struct h1_conn *c, const struct sockaddr *addr);
static void conn_fail(struct h1_conn *c, enum h1_err err);

/*
 * The timer or the stream of c closed; a stream closed while connecting
 * failed to one address of the name: the next one.
 */
static void
on_closed(uv_handle_t *h)
{
	struct h1_conn *c = h->data;
	struct addrinfo *a = c->ai_next;

	if (h == (uv_handle_t *)&c->timer)
		c->timer_open = 0;
	else
		c->handle_open = c->handle_closing = 0;
	if (c->state != CS_CONNECTING || h == (uv_handle_t *)&c->timer) {
		conn_maybe_free(c);
		return;
	}
	c->ai_next = a->ai_next;
	if (conn_connect_addr(c, a->ai_addr) != 0)
		conn_fail(c, H1_CONNECT);
}

/* Closes c; its request (if any) was finished or moved before. */
static void
conn_close(struct h1_conn *c)
{
	if (c->state == CS_CLOSING)
		return;
	if (c->state == CS_IDLE)
		c->pool->idle_n--;
	LIST_REMOVE(c, entry);
	h1c_set_state(c, CS_CLOSING);
	c->req = NULL;
	if (c->gai_pending)
		(void)uv_cancel((uv_req_t *)&c->gai);
	if (c->timer_open && !uv_is_closing((uv_handle_t *)&c->timer))
		uv_close((uv_handle_t *)&c->timer, on_closed);
	if (c->handle_open && !c->handle_closing) {
		c->handle_closing = 1;
		uv_close(&c->u.h, on_closed);
	}
}

/* c's request ends with err; c is closed. */
static void
conn_fail(struct h1_conn *c, enum h1_err err)
{
	struct h1_req *r = c->req;

	conn_close(c);
	if (r != NULL)
		req_finish(r, err);
}

/* c served its request: kept idle (first in line), or closed. */
static void
conn_release(struct h1_conn *c, int keep)
{
	struct h1_pool *p = c->pool;

	c->req = NULL;
	(void)uv_timer_stop(&c->timer);
	if (!keep || p->freeing || p->idle_n >= p->t.idle_max) {
		conn_close(c);
		return;
	}
	LIST_REMOVE(c, entry);
	h1c_set_state(c, CS_IDLE);
	c->reused = 1;
	c->idle_since = uv_now(p->loop);
	LIST_INSERT_HEAD(&p->idle, c, entry);
	p->idle_n++;
}

static void
on_timer(uv_timer_t *t)
{
	struct h1_conn *c = t->data;

	conn_fail(c, H1_TIMEOUT);
}

/* Arms c's timer for r's deadline, or the sooner connect timeout. */
static void
conn_arm(struct h1_conn *c, int connecting)
{
	struct h1_pool *p = c->pool;
	long long now = (long long)uv_now(p->loop);
	long long left = c->req->deadline_ms - now;

	if (connecting && left > p->t.connect_timeout_ms)
		left = p->t.connect_timeout_ms;
	if (left < 0)
		left = 0;
	(void)uv_timer_start(&c->timer, on_timer, (uint64_t)left, 0);
}

/* --- writing ----------------------------------------------------------------- */

struct wreq {
	uv_write_t w;
	char buf[]; /* what the socket did not take at once */
};

static void
on_written(uv_write_t *w, int status)
{
	struct h1_conn *c = w->data;

	free(w);
	if (status < 0 && status != UV_ECANCELED && c->state != CS_CLOSING)
		conn_fail(c,
		    c->state == CS_HANDSHAKE    ? H1_TLS
		        : c->state == CS_TUNNEL ? H1_PROXY
		                                : H1_CLOSED);
}

/*
 * Writes buf[0..len) to c: now as far as the socket takes it, the rest
 * copied and queued. 1 when a byte went (or is queued to go) out, 0 when
 * the socket refused it at once, -1 on ENOMEM before any byte went.
 */
static int
conn_write(struct h1_conn *c, const char *buf, size_t len)
{
	uv_buf_t b = uv_buf_init((char *)buf, (unsigned)len);
	struct wreq *wr;
	int n = uv_try_write(&c->u.s, &b, 1);

	if (n == (int)len)
		return 1;
	if (n < 0 && n != UV_EAGAIN)
		return 0;
	if (n < 0)
		n = 0;
	if ((wr = malloc(sizeof(*wr) + len - (size_t)n)) == NULL)
		return n > 0 ? 1 : -1;
	memcpy(wr->buf, buf + n, len - (size_t)n);
	wr->w.data = c;
	b = uv_buf_init(wr->buf, (unsigned)(len - (size_t)n));
	if (uv_write(&wr->w, &c->u.s, &b, 1, on_written) != 0) {
		free(wr);
		return n > 0 ? 1 : 0;
	}
	return 1;
}

/* The TLS records OpenSSL wrote to the BIO pair, to the socket. As conn_write. */
static int
conn_flush_tls(struct h1_conn *c)
{
	int n, w = 1, any = 0;

	while ((n = BIO_read(c->net, c->pool->plain, sizeof(c->pool->plain))) >
	    0) {
		if ((w = conn_write(c, c->pool->plain, (size_t)n)) != 1)
			break;
		any = 1;
	}
	return any ? 1 : w;
}

/* --- reading the answer -------------------------------------------------------- */

/* Bytes of the answer: parsed; the request ends when the answer did. */
static void
conn_parse(struct h1_conn *c, const char *p, size_t n)
{
	struct h1_req *r = c->req;
	llhttp_errno_t e;

	if (c->state != CS_BUSY || r == NULL || !c->written) {
		/* an idle connection spoke, or the peer answered early */
		if (c->state == CS_BUSY && r != NULL)
			conn_fail(c, H1_BAD_RESPONSE);
		else
			conn_close(c);
		return;
	}
	e = h1_read(&c->rd, p, n);
	if (c->rd.complete) {
		int keep = e == HPE_OK && c->rd.keep;

		r->status = c->rd.status;
		conn_release(c, keep);
		req_finish(r, H1_OK);
		return;
	}
	if (e != HPE_OK)
		conn_fail(c, e == HPE_USER ? H1_ABORTED : H1_BAD_RESPONSE);
}

/* The peer closed (or reset) c. An answer that ends with the connection ends. */
static void
conn_eof(struct h1_conn *c, int status)
{
	struct h1_req *r = c->req;

	if (c->state == CS_HANDSHAKE || c->state == CS_TUNNEL) {
		conn_fail(c, c->state == CS_TUNNEL ? H1_PROXY : H1_TLS);
		return;
	}
	if (c->state != CS_BUSY || r == NULL) {
		conn_close(c);
		return;
	}
	if (status == UV_EOF && c->written && h1_read_eof(&c->rd)) {
		r->status = c->rd.status;
		conn_release(c, 0);
		req_finish(r, H1_OK);
		return;
	}
	conn_fail(c, H1_CLOSED);
}

static void
on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	struct h1_conn *c = h->data;

	(void)hint;
	*buf = uv_buf_init(c->pool->rbuf, sizeof(c->pool->rbuf));
}

/* The handshake went on: finished (verified or not), or waiting. */
static void
conn_handshake(struct h1_conn *c)
{
	char why[TLS_WHY_MAX];
	enum tls_step st;
	int w;

	st = tls_handshake(c->ssl, why, sizeof(why));
	if ((w = conn_flush_tls(c)) != 1) {
		conn_fail(c, w < 0 ? H1_NOMEM : H1_TLS);
		return;
	}
	if (st == TLS_OK) {
		h1c_set_state(c, CS_BUSY);
		conn_arm(c, 0);
		conn_send(c);
		return;
	}
	if (st == TLS_WANT_READ || st == TLS_WANT_WRITE)
		return;
	conn_fail(c,
	    SSL_get_verify_result(c->ssl) != X509_V_OK ? H1_TLS_VERIFY
	                                               : H1_TLS);
}

/* The proxy answered CONNECT (a part of it): the tunnel is up, or refused. */
static void
conn_tunnel_read(struct h1_conn *c, const char *p, size_t n)
{
	int status = 0, hl;

	if (n > TUNNEL_MAX - c->tun_len) {
		conn_fail(c, H1_PROXY);
		return;
	}
	memcpy(c->tun + c->tun_len, p, n);
	c->tun_len += n;
	if ((hl = h1_proxy_answer(c->tun, c->tun_len, &status)) == 0)
		return;
	/* the provider speaks after our ClientHello: nothing may follow */
	if (hl < 0 || status / 100 != 2 || (size_t)hl != c->tun_len) {
		conn_fail(c, H1_PROXY);
		return;
	}
	free(c->tun);
	c->tun = NULL;
	h1c_set_state(c, CS_HANDSHAKE);
	conn_handshake(c);
}

/*
 * The records in the BIO pair, read: the answer's bytes parsed. A key
 * update or a renegotiation read here leaves its answer in the BIO pair: it
 * goes out now, not with the next request.
 */
static void
conn_read_tls(struct h1_conn *c)
{
	struct h1_pool *p = c->pool;
	char why[TLS_WHY_MAX];
	enum tls_step st;
	size_t got;
	int w;

	for (;;) {
		st = tls_read(c->ssl, p->plain, sizeof(p->plain), &got, why,
		    sizeof(why));
		if (st == TLS_OK) {
			struct h1_req *r = c->req;

			conn_parse(c, p->plain, got);
			if (c->state != CS_BUSY || c->req != r)
				return; /* the answer ended, or the connection */
			continue;
		}
		if (st == TLS_WANT_READ || st == TLS_WANT_WRITE) {
			if ((w = conn_flush_tls(c)) < 0)
				conn_fail(c, H1_NOMEM);
			else if (st == TLS_WANT_WRITE && w == 1)
				continue; /* the pair has room again */
			return;
		}
		conn_eof(c, st == TLS_CLOSED ? UV_EOF : UV_ECONNRESET);
		return;
	}
}

static void
on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct h1_conn *c = s->data;

	if (nread == 0 || c->state == CS_CLOSING)
		return;
	if (nread < 0) {
		conn_eof(c, (int)nread);
		return;
	}
	if (c->state == CS_TUNNEL) {
		conn_tunnel_read(c, buf->base, (size_t)nread);
		return;
	}
	if (c->ssl == NULL) {
		conn_parse(c, buf->base, (size_t)nread);
		return;
	}
	if (BIO_write(c->net, buf->base, (int)nread) != (int)nread) {
		conn_fail(c, H1_NOMEM);
		return;
	}
	if (c->state == CS_HANDSHAKE) {
		conn_handshake(c);
		return;
	}
	conn_read_tls(c);
}

/* --- sending -------------------------------------------------------------------- */

static void req_start(struct h1_pool *p, struct h1_req *r);

/* c is connected (and its TLS up): the request goes out in one write. */
static void
conn_send(struct h1_conn *c)
{
	struct h1_req *r = c->req;
	int w;

	h1_read_start(&c->rd, r->header, r->bodyfn, r->arg);
	c->written = 0;
	if (c->ssl != NULL) {
		char why[TLS_WHY_MAX];
		size_t put;

		/* the request fits the BIO pair: one write, whole, or none */
		if (tls_write(c->ssl, r->out, r->outlen, &put, why,
		        sizeof(why)) != TLS_OK ||
		    put != r->outlen) {
			conn_fail(c, H1_TLS);
			return;
		}
		w = conn_flush_tls(c);
	} else {
		w = conn_write(c, r->out, r->outlen);
	}
	if (w == 1) {
		c->written = 1;
		r->res.sends++;
		return;
	}
	if (w < 0) {
		conn_fail(c, H1_NOMEM);
		return;
	}
	/*
	 * Not a byte of the request went out: a kept connection the peer had
	 * closed. The request goes out on another one, uncounted.
	 */
	if (c->reused) {
		c->req = NULL;
		conn_close(c);
		req_start(c->pool, r);
		return;
	}
	conn_fail(c, H1_CLOSED);
}

/* c reached the proxy: CONNECT to the provider, read by conn_tunnel_read. */
static void
conn_tunnel(struct h1_conn *c)
{
	struct h1_pool *p = c->pool;
	int n;

	h1c_set_state(c, CS_TUNNEL);
	if ((c->tun = malloc(TUNNEL_MAX)) == NULL ||
	    (n = h1_proxy_connect(&p->px, p->hosthdr, p->plain,
	         sizeof(p->plain))) < 0) {
		conn_fail(c, H1_NOMEM);
		return;
	}
	if (conn_write(c, p->plain, (size_t)n) != 1)
		conn_fail(c, H1_CONNECT);
}

static void
on_connected(uv_connect_t *creq, int status)
{
	struct h1_conn *c = creq->data;

	if (status == UV_ECANCELED || c->state == CS_CLOSING)
		return;
	if (status < 0) {
		/* the next address of the name, once this handle closed */
		if (c->ai_next != NULL && status != UV_ETIMEDOUT) {
			c->handle_closing = 1;
			uv_close(&c->u.h, on_closed);
			return;
		}
		conn_fail(c, H1_CONNECT);
		return;
	}
	if (uv_read_start(&c->u.s, on_alloc, on_read) != 0) {
		conn_fail(c, H1_CONNECT);
		return;
	}
	if (c->ssl != NULL && c->pool->proxied) {
		conn_tunnel(c);
		return;
	}
	if (c->ssl != NULL) {
		h1c_set_state(c, CS_HANDSHAKE);
		conn_handshake(c);
		return;
	}
	h1c_set_state(c, CS_BUSY);
	conn_arm(c, 0);
	conn_send(c);
}

/* Connects c to addr; 0 or a libuv error. */
static int
conn_connect_addr(struct h1_conn *c, const struct sockaddr *addr)
{
	struct h1_pool *p = c->pool;
	int rc;

	if ((rc = uv_tcp_init(p->loop, &c->u.tcp)) != 0)
		return rc;
	c->handle_open = 1;
	c->u.h.data = c;
	(void)uv_tcp_nodelay(&c->u.tcp, 1);
	if (c->state != CS_CONNECTING) /* the next address: still connecting */
		h1c_set_state(c, CS_CONNECTING);
	return uv_tcp_connect(&c->creq, &c->u.tcp, addr, on_connected);
}

static void
on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
	struct h1_conn *c = g->data;

	c->gai_pending = 0;
	c->ai = res;
	if (c->state == CS_CLOSING) {
		conn_maybe_free(c);
		return;
	}
	if (status < 0 || res == NULL) {
		conn_fail(c, H1_RESOLVE);
		return;
	}
	c->ai_next = res->ai_next;
	if (conn_connect_addr(c, res->ai_addr) != 0)
		conn_fail(c, H1_CONNECT);
}

/*
 * A new connection for r (r->conn set), resolving or connecting; r fails
 * later when it cannot even start. The connection, or NULL.
 */
static struct h1_conn *
conn_new(struct h1_pool *p, struct h1_req *r)
{
	struct h1_conn *c;
	int rc;

	if ((c = calloc(1, sizeof(*c))) == NULL) {
		req_fail_later(r, H1_NOMEM);
		return NULL;
	}
	c->pool = p;
	c->req = r;
	r->conn = c;
	p->open++;
	LIST_INSERT_HEAD(&p->busy, c, entry);
	(void)uv_timer_init(p->loop, &c->timer);
	c->timer.data = c;
	c->timer_open = 1;
	c->creq.data = c;
	c->gai.data = c;
	if (p->t.tls &&
	    (c->ssl = tls_new(p->ctx, p->host, p->t.verify, TLS_BIO_BUF,
	         &c->net)) == NULL)
		goto nomem;
	conn_arm(c, 1);
	if (p->unix_path[0] != '\0') {
		if ((rc = uv_pipe_init(p->loop, &c->u.pipe, 0)) != 0)
			goto nomem;
		c->handle_open = 1;
		c->u.h.data = c;
		h1c_set_state(c, CS_CONNECTING);
		uv_pipe_connect(&c->creq, &c->u.pipe, p->unix_path,
		    on_connected);
		return c;
	}
	if (p->addr_literal) {
		if (conn_connect_addr(c, (struct sockaddr *)&p->addr) != 0)
			goto fail;
		return c;
	}
	{
		struct addrinfo hints;
		char port[16];

		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		(void)snprintf(port, sizeof(port), "%d", p->cport);
		if (uv_getaddrinfo(p->loop, &c->gai, on_resolved, p->chost,
		        port, &hints) != 0)
			goto fail;
		c->gai_pending = 1;
	}
	return c;
nomem:
	c->req = NULL;
	conn_close(c);
	req_fail_later(r, H1_NOMEM);
	return NULL;
fail:
	c->req = NULL;
	conn_close(c);
	req_fail_later(r, H1_CONNECT);
	return NULL;
}

/* r on the most recently used idle connection, or a new one. */
static void
req_start(struct h1_pool *p, struct h1_req *r)
{
	uint64_t now = uv_now(p->loop);
	struct h1_conn *c;

	while ((c = LIST_FIRST(&p->idle)) != NULL) {
		if (now - c->idle_since > (uint64_t)p->t.max_idle_s * 1000) {
			conn_close(c); /* idle too long: closed, not reused */
			continue;
		}
		LIST_REMOVE(c, entry);
		p->idle_n--;
		h1c_set_state(c, CS_BUSY);
		LIST_INSERT_HEAD(&p->busy, c, entry);
		c->req = r;
		r->conn = c;
		conn_arm(c, 0);
		conn_send(c);
		return;
	}
	(void)conn_new(p, r);
}

struct h1_req *
h1_request(struct h1_pool *p, const char *method, const char *target,
    const char *const *hdrs, const char *body, size_t bodylen, long timeout_ms,
    h1_header_fn *header, h1_body_fn *bodyfn, h1_done_fn *done, void *arg)
{
	/* through a proxy, plain HTTP: the target in absolute form */
	int abs = p->proxied && !p->t.tls;
	const char *pauth = abs ? p->px.auth : "";
	struct util_buf b;
	struct h1_req *r;
	size_t cap, i;
	long n;

	if ((r = calloc(1, sizeof(*r))) == NULL)
		return NULL;
	cap = strlen(method) + strlen(target) + 2 * strlen(p->hosthdr) +
	    strlen(pauth) + bodylen + 80;
	for (i = 0; hdrs[i] != NULL; i++)
		cap += strlen(hdrs[i]);
	if ((r->out = malloc(cap)) == NULL) {
		free(r);
		return NULL;
	}
	/* the head and the body in one buffer: one write */
	util_buf_init(&b, r->out, cap);
	util_buf_str(&b, method);
	util_buf_put(&b, " ", 1);
	if (abs) {
		util_buf_str(&b, "http://");
		util_buf_str(&b, p->hosthdr);
	}
	util_buf_str(&b, target);
	util_buf_str(&b, " HTTP/1.1\r\nHost: ");
	util_buf_str(&b, p->hosthdr);
	util_buf_str(&b, "\r\n");
	util_buf_str(&b, pauth);
	for (i = 0; hdrs[i] != NULL; i++)
		util_buf_str(&b, hdrs[i]);
	if (body != NULL) {
		util_buf_str(&b, "Content-Length: ");
		util_buf_ull(&b, bodylen);
		util_buf_str(&b, "\r\n");
	}
	util_buf_str(&b, "\r\n");
	if (body != NULL)
		util_buf_put(&b, body, bodylen);
	if ((n = util_buf_len(&b)) < 0) {
		req_free(r);
		return NULL;
	}
	r->outlen = (size_t)n;
	r->pool = p;
	r->header = header;
	r->bodyfn = bodyfn;
	r->done = done;
	r->arg = arg;
	r->deadline_ms = (long long)uv_now(p->loop) + timeout_ms;
	if (p->ca_bad) {
		req_fail_later(r, H1_TLS_CA);
		return r;
	}
	req_start(p, r);
	return r;
}

void
h1_cancel(struct h1_req *r)
{
	if (r->conn != NULL) {
		r->conn->req = NULL;
		conn_close(r->conn);
	} else {
		LIST_REMOVE(r, deferred);
	}
	req_free(r);
}

/* --- the pool ----------------------------------------------------------------- */

static void
on_defer_closed(uv_handle_t *h)
{
	struct h1_pool *p = h->data;

	p->defer_open = 0;
	pool_maybe_free(p);
}

static void
pool_maybe_free(struct h1_pool *p)
{
	if (!p->freeing || p->open > 0 || p->defer_open)
		return;
	SSL_CTX_free(p->ctx);
	free(p);
}

/* 1 when host is an address literal (then *ss is it with port), else 0. */
static int
addr_of(const char *host, int port, struct sockaddr_storage *ss)
{
	return uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0 ||
	    uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0;
}

struct h1_pool *
h1_pool_new(uv_loop_t *loop, const struct h1_target *t, char *errstr,
    size_t errlen)
{
	struct h1_pool *p;

	if ((p = calloc(1, sizeof(*p))) == NULL) {
		util_err(errstr, errlen, "provider: out of memory");
		return NULL;
	}
	p->loop = loop;
	p->t = *t;
	if ((size_t)snprintf(p->host, sizeof(p->host), "%s", t->host) >=
	        sizeof(p->host) ||
	    (size_t)snprintf(p->unix_path, sizeof(p->unix_path), "%s",
	        t->unix_path != NULL ? t->unix_path : "") >=
	        sizeof(p->unix_path)) {
		util_err(errstr, errlen, "provider_url: too long");
		free(p);
		return NULL;
	}
	p->t.host = p->host;
	p->t.unix_path = p->unix_path;
	p->t.ca_file = NULL; /* read once, by tls_ctx_new */
	p->t.proxy = NULL;   /* copied into px */
	if (p->unix_path[0] != '\0')
		(void)snprintf(p->hosthdr, sizeof(p->hosthdr), "localhost");
	else if (strchr(p->host, ':') != NULL)
		(void)snprintf(p->hosthdr, sizeof(p->hosthdr), "[%s]:%d",
		    p->host, t->port);
	else
		(void)snprintf(p->hosthdr, sizeof(p->hosthdr), "%s:%d", p->host,
		    t->port);
	(void)addr_of(p->host, t->port, &p->addr);
	p->chost = p->host;
	p->cport = t->port;
	if (t->proxy != NULL && p->unix_path[0] == '\0') {
		p->px = *t->proxy;
		p->proxied = 1;
		p->chost = p->px.host;
		p->cport = p->px.port;
	}
	p->addr_literal =
	    p->unix_path[0] == '\0' && addr_of(p->chost, p->cport, &p->addr);
	LIST_INIT(&p->idle);
	LIST_INIT(&p->busy);
	LIST_INIT(&p->deferred);
	if (t->tls &&
	    (p->ctx = tls_ctx_new(&(struct tls_opts){ .verify = t->verify,
	                              .ca_file = t->ca_file },
	         &p->ca_bad, errstr, errlen)) == NULL) {
		free(p);
		return NULL;
	}
	(void)uv_idle_init(loop, &p->defer);
	p->defer.data = p;
	p->defer_open = 1;
	return p;
}

void
h1_pool_free(struct h1_pool *p)
{
	struct h1_conn *c;
	struct h1_req *r;

	if (p == NULL)
		return;
	p->freeing = 1;
	while ((r = LIST_FIRST(&p->deferred)) != NULL) {
		LIST_REMOVE(r, deferred);
		req_free(r);
	}
	while ((c = LIST_FIRST(&p->idle)) != NULL)
		conn_close(c);
	while ((c = LIST_FIRST(&p->busy)) != NULL)
		conn_close(c);
	uv_close((uv_handle_t *)&p->defer, on_defer_closed);
}
