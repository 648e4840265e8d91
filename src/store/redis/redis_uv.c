/*
 * redis_uv.c - hiredis's events on the libuv loop: hiredis 0.14's
 * adapters/libuv.h, with two fixes. Its poll callback ignores an error
 * status (libuv reports POLLERR, e.g. a refused connect, as UV_EBADF and
 * stops the poll), so a refused connection would hang until the command's
 * timeout; and it leaks its struct when uv_poll_init fails. Here an error
 * status lets hiredis look at the socket (the connect check or a read),
 * which reports the real error. And writes: the adapter polls for
 * UV_WRITABLE whenever hiredis has output, and libuv's uv_poll_start takes
 * the descriptor out of epoll and puts it back each time, so a command
 * cost four epoll_ctl calls and a wake-up; here the output of a loop turn is
 * written by a uv_prepare callback just before the loop waits, and only a
 * socket that does not take it all is polled for writing.
 *
 * Over TLS (rediss schemes; hiredis 0.14 has none) hiredis never touches
 * the socket: it still frames the commands into its output buffer and
 * parses the replies with its reader, but the bytes between them and the
 * socket go through tls.h here. The TCP connect, then the handshake
 * (certificate and name verified), and only then is hiredis told it is
 * connected, so nothing of its output leaves before the peer is verified,
 * and a failure never falls back to plain text. A failure reaches hiredis
 * as its reader's error: it frees the context the way a failed read would,
 * its callbacks with no reply, its disconnect callback with the cause.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <async.h>
#include <uv.h>

#include "log.h"
#include "redis_int.h"
#include "tls.h"

#define TLS_PAIR_BYTES 65536  /* the BIO pair, each way */
#define TLS_PLAIN_BYTES 16384 /* a TLS record's plain text, at most */
#define TLS_LOG_EVERY_MS 1000 /* a loop's TLS failures: one log line at most */
#define REDIS_EOF_TEXT "Server closed the connection"

/*
 * hiredis 0.14's async.c exports it (redisAsyncHandleRead's second half:
 * the replies its reader holds to their callbacks; a reader in error frees
 * the context) but its async.h does not declare it.
 */
void redisProcessCallbacks(redisAsyncContext *ac);

struct uv_events {
	redisAsyncContext *ac;
	uv_poll_t handle;
	uv_prepare_t flush; /* writes the output before the loop waits */
	int events;
	int flushing; /* inside flush: hiredis could not write everything */
	int open;     /* handles not yet closed */
	struct {
		SSL *ssl; /* NULL: plain text, hiredis's own reads and writes */
		BIO *net; /* the BIO pair's side toward the socket */
		int tcp_up;    /* the TCP connect is done: the handshake runs */
		int up;        /* handshake done: hiredis knows it connected */
		int want_read; /* a write waits for records (renegotiation) */
		int heard;     /* plain text came: the server took us */
		uint64_t
		    *log_at; /* the loop's: when a failure is logged next */
		char why[TLS_WHY_MAX];
	} tls;
};

static void uv_events_set(struct uv_events *p, int events);
static void tls_on_poll(struct uv_events *p, int status, int events);

static void
uv_events_poll(uv_poll_t *h, int status, int events)
{
	struct uv_events *p = h->data;

	if (p->ac == NULL)
		return;
	if (p->tls.ssl != NULL) {
		tls_on_poll(p, status, events);
		return;
	}
	if (status != 0) {
		if (!(p->ac->c.flags & REDIS_CONNECTED))
			redisAsyncHandleWrite(p->ac); /* the connect's error */
		else
			redisAsyncHandleRead(p->ac); /* EOF or the error */
		return;
	}
	if (events & UV_READABLE)
		redisAsyncHandleRead(p->ac);
	if (p->ac != NULL && (events & UV_WRITABLE))
		redisAsyncHandleWrite(p->ac);
}

/*
 * libuv's uv_poll_start removes the descriptor from epoll and adds it back:
 * a call that changes nothing is skipped.
 */
static void
uv_events_set(struct uv_events *p, int events)
{
	if (events == p->events)
		return;
	p->events = events;
	if (events != 0)
		(void)uv_poll_start(&p->handle, events, uv_events_poll);
	else
		(void)uv_poll_stop(&p->handle);
}

/* --- TLS: hiredis's bytes through tls.h ---------------------------------- */

/*
 * p's connection failed with why: hiredis frees it as after a failed read
 * (callbacks with no reply; the disconnect callback with why when it had
 * connected, else the connect callback with REDIS_ERR first).
 */
static void
tls_fail(struct uv_events *p, int code, const char *why)
{
	redisAsyncContext *ac = p->ac;
	redisContext *c = &ac->c;

	if (code == REDIS_ERR_OTHER &&
	    uv_now(p->handle.loop) >= *p->tls.log_at) {
		log_error(NULL, "Redis %s:%d: %s", c->tcp.host, c->tcp.port,
		    why);
		*p->tls.log_at = uv_now(p->handle.loop) + TLS_LOG_EVERY_MS;
	}
	c->reader->err = code;
	(void)snprintf(c->reader->errstr, sizeof(c->reader->errstr), "%s", why);
	if (!(c->flags & REDIS_CONNECTED)) {
		c->err = code;
		(void)snprintf(c->errstr, sizeof(c->errstr), "%s", why);
		ac->err = code;
		ac->errstr = c->errstr;
		if (ac->onConnect != NULL)
			ac->onConnect(ac, REDIS_ERR);
	}
	if (p->ac != NULL)
		redisProcessCallbacks(ac); /* sees the reader's error: frees */
}

/*
 * The socket failed with errno e. Right after the handshake, before a
 * byte of a reply, that is how a server that refuses the client's
 * certificate often looks (its alert lost to the reset that follows it).
 */
static void
tls_fail_errno(struct uv_events *p, int e)
{
	char why[TLS_WHY_MAX];

	if (!p->tls.up || p->tls.heard) {
		tls_fail(p, REDIS_ERR_IO, strerror(e));
		return;
	}
	(void)snprintf(why, sizeof(why),
	    "TLS: %s right after the handshake (did the server refuse the client certificate?)",
	    strerror(e));
	tls_fail(p, REDIS_ERR_OTHER, why);
}

/* The BIO pair's records to the socket: 1 all sent, 0 it is full, -1 errno. */
static int
tls_push(struct uv_events *p)
{
	char *q;
	size_t n;
	ssize_t w;

	while ((n = tls_net_out(p->tls.net, &q)) > 0) {
		w = send(p->ac->c.fd, q, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		tls_net_out_done(p->tls.net, (size_t)w);
	}
	return 1;
}

/*
 * hiredis's output (once the handshake is done) into records, and the
 * records to the socket; what the socket does not take waits for
 * UV_WRITABLE, a write a renegotiation holds up for the next read. 0, or
 * -1 when the connection failed (p->ac may be gone).
 */
static int
tls_send(struct uv_events *p)
{
	redisContext *c = &p->ac->c;
	enum tls_step st;
	size_t put;
	int r;

	for (;;) {
		st = TLS_OK;
		while (p->tls.up && !p->tls.want_read && sdslen(c->obuf) > 0) {
			st = tls_write(p->tls.ssl, c->obuf, sdslen(c->obuf),
			    &put, p->tls.why, sizeof(p->tls.why));
			if (st != TLS_OK)
				break;
			sdsrange(c->obuf, (int)put, -1);
		}
		if (st == TLS_WANT_READ)
			p->tls.want_read = 1;
		if ((r = tls_push(p)) < 0) {
			tls_fail_errno(p, errno);
			return -1;
		}
		if (st == TLS_FAIL || st == TLS_CLOSED) {
			tls_fail(p, REDIS_ERR_OTHER, p->tls.why);
			return -1;
		}
		if (r == 0) {
			uv_events_set(p, UV_READABLE | UV_WRITABLE);
			return 0;
		}
		if (st != TLS_WANT_WRITE)
			break;
	}
	uv_events_set(p, UV_READABLE);
	return 0;
}

/*
 * Records from the socket into the BIO pair (one read: the poll is level
 * triggered). 1 bytes came (or the pair is full), 0 none yet, -1 EOF, -2
 * an error (*err).
 */
static int
tls_pull(struct uv_events *p, int *err)
{
	char *q;
	size_t room;
	ssize_t n;

	*err = 0;
	if ((room = tls_net_in(p->tls.net, &q)) == 0)
		return 1;
	do
		n = read(p->ac->c.fd, q, room);
	while (n < 0 && errno == EINTR);
	if (n > 0) {
		tls_net_in_done(p->tls.net, (size_t)n);
		return 1;
	}
	if (n == 0)
		return -1;
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return 0;
	*err = errno;
	return -2;
}

/* The handshake, a step; done: hiredis is told it connected, its output goes. */
static void
tls_step_handshake(struct uv_events *p)
{
	redisAsyncContext *ac = p->ac;
	enum tls_step st;

	st = tls_handshake(p->tls.ssl, p->tls.why, sizeof(p->tls.why));
	if (st == TLS_FAIL || st == TLS_CLOSED) {
		(void)tls_push(p); /* the alert, if the socket takes it */
		tls_fail(p, REDIS_ERR_OTHER, p->tls.why);
		return;
	}
	if (tls_send(p) != 0 || st != TLS_OK)
		return;
	p->tls.up = 1;
	ac->c.flags |= REDIS_CONNECTED;
	if (ac->onConnect != NULL)
		ac->onConnect(ac, REDIS_OK);
	if (p->ac != NULL)
		(void)tls_send(p); /* the set-up and the commands that waited */
}

/* The TCP connect ended: failed, or the handshake starts. */
static void
tls_on_tcp(struct uv_events *p)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(int), sslen = sizeof(ss);
	int e = 0;

	if (getsockopt(p->ac->c.fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
		e = errno;
	if (e == 0 &&
	    getpeername(p->ac->c.fd, (struct sockaddr *)&ss, &sslen) != 0)
		e = errno == ENOTCONN ? ECONNREFUSED : errno;
	if (e != 0) {
		tls_fail_errno(p, e);
		return;
	}
	p->tls.tcp_up = 1;
	uv_events_set(p, UV_READABLE);
	tls_step_handshake(p);
}

/*
 * The records that came: the handshake's, or replies for hiredis's reader
 * (then its callbacks run). A record may carry a key update or a
 * renegotiation: its answer, and a write it held up, go out after.
 */
static void
tls_on_readable(struct uv_events *p)
{
	redisAsyncContext *ac = p->ac;
	char buf[TLS_PLAIN_BYTES];
	enum tls_step st;
	size_t got;
	int r, err, fed = 0;

	r = tls_pull(p, &err);
	if (!p->tls.up) {
		if (r == -1)
			tls_fail(p, REDIS_ERR_OTHER,
			    "TLS: the server closed the connection in the handshake (does it speak TLS on this port?)");
		else if (r == -2)
			tls_fail_errno(p, err);
		else
			tls_step_handshake(p);
		return;
	}
	while ((st = tls_read(p->tls.ssl, buf, sizeof(buf), &got, p->tls.why,
	            sizeof(p->tls.why))) == TLS_OK) {
		if (redisReaderFeed(ac->c.reader, buf, got) != REDIS_OK) {
			st = TLS_FAIL;
			(void)snprintf(p->tls.why, sizeof(p->tls.why),
			    "out of memory");
			break;
		}
		fed = 1;
		p->tls.heard = 1;
		if (!tls_read_more(p->tls.ssl)) {
			st = TLS_WANT_READ; /* not one more call to learn it */
			break;
		}
	}
	p->tls.want_read = 0;
	if ((st == TLS_WANT_READ || st == TLS_WANT_WRITE) && tls_send(p) != 0)
		return;
	if (fed) {
		redisProcessCallbacks(ac);
		if (p->ac == NULL)
			return;
	}
	if ((st == TLS_CLOSED || r == -1) && !p->tls.heard)
		tls_fail_errno(p, ECONNRESET);
	else if (st == TLS_CLOSED || r == -1)
		tls_fail(p, REDIS_ERR_EOF, REDIS_EOF_TEXT);
	else if (st == TLS_FAIL)
		tls_fail(p, REDIS_ERR_OTHER, p->tls.why);
	else if (r == -2)
		tls_fail_errno(p, err);
}

static void
tls_on_poll(struct uv_events *p, int status, int events)
{
	if (status != 0)
		p->events = 0; /* libuv stopped the poll */
	if (!p->tls.tcp_up) {
		tls_on_tcp(p);
		return;
	}
	if (status != 0 || (events & UV_READABLE)) {
		tls_on_readable(p);
		if (p->ac == NULL)
			return;
	}
	if (events & UV_WRITABLE)
		(void)tls_send(p);
}

/* Over TLS the reads are tls_on_poll's: always watched once connected. */
static void
uv_events_add_read(void *d)
{
	struct uv_events *p = d;

	if (p->tls.ssl == NULL)
		uv_events_set(p, p->events | UV_READABLE);
}

static void
uv_events_del_read(void *d)
{
	struct uv_events *p = d;

	if (p->tls.ssl == NULL)
		uv_events_set(p, p->events & ~UV_READABLE);
}

/*
 * Before the loop waits for events: the commands queued in this turn leave
 * in one write, without waiting for the socket to be writable (which would
 * cost two epoll_ctl calls and a wake-up per turn). Only what the socket
 * does not take waits for UV_WRITABLE.
 */
static void
uv_events_flush(uv_prepare_t *h)
{
	struct uv_events *p = h->data;

	(void)uv_prepare_stop(&p->flush);
	if (p->ac == NULL)
		return;
	if (p->tls.ssl != NULL) {
		if (p->tls.up)
			(void)tls_send(p); /* may free the context */
		return;
	}
	p->flushing = 1;
	redisAsyncHandleWrite(p->ac); /* may free the context (cleanup) */
	p->flushing = 0;
}

static void
uv_events_add_write(void *d)
{
	struct uv_events *p = d;

	/* TLS: the connect watched, the handshake's output is its own */
	if (p->tls.ssl != NULL) {
		if (!p->tls.tcp_up)
			uv_events_set(p, p->events | UV_WRITABLE);
		else if (p->tls.up)
			(void)uv_prepare_start(&p->flush, uv_events_flush);
		return;
	}
	/* connecting, or the socket did not take it all: wait for it */
	if (p->flushing || !(p->ac->c.flags & REDIS_CONNECTED)) {
		uv_events_set(p, p->events | UV_WRITABLE);
		return;
	}
	(void)uv_prepare_start(&p->flush, uv_events_flush);
}

static void
uv_events_del_write(void *d)
{
	struct uv_events *p = d;

	(void)uv_prepare_stop(&p->flush);
	if (p->tls.ssl == NULL)
		uv_events_set(p, p->events & ~UV_WRITABLE);
}

static void
uv_events_closed(uv_handle_t *h)
{
	struct uv_events *p = h->data;

	if (--p->open == 0)
		free(p);
}

static void
uv_events_cleanup(void *d)
{
	struct uv_events *p = d;

	p->ac = NULL;         /* the context is going away */
	SSL_free(p->tls.ssl); /* its side of the BIO pair too */
	BIO_free(p->tls.net);
	p->tls.ssl = NULL;
	p->tls.net = NULL;
	uv_close((uv_handle_t *)&p->handle, uv_events_closed);
	uv_close((uv_handle_t *)&p->flush, uv_events_closed);
}

int
redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop, SSL_CTX *tls,
    const char *name, int verify, uint64_t *log_at)
{
	struct uv_events *p;

	if (ac->ev.data != NULL || (p = calloc(1, sizeof(*p))) == NULL)
		return REDIS_ERR;
	if (tls != NULL) {
		p->tls.ssl =
		    tls_new(tls, name, verify, TLS_PAIR_BYTES, &p->tls.net);
		if (p->tls.ssl == NULL) {
			free(p);
			return REDIS_ERR;
		}
		p->tls.log_at = log_at;
		/*
		 * A Redis connection is busy and long-lived: its record buffers
		 * stay (released when idle, OpenSSL would free, zero and
		 * allocate 16 KiB twice a round trip).
		 */
		(void)SSL_clear_mode(p->tls.ssl, SSL_MODE_RELEASE_BUFFERS);
		(void)SSL_set_mode(p->tls.ssl,
		    SSL_MODE_ENABLE_PARTIAL_WRITE |
		        SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	}
	if (uv_poll_init(loop, &p->handle, ac->c.fd) != 0) {
		SSL_free(p->tls.ssl);
		BIO_free(p->tls.net);
		free(p);
		return REDIS_ERR;
	}
	(void)uv_prepare_init(loop, &p->flush);
	p->open = 2;
	p->handle.data = p;
	p->flush.data = p;
	p->ac = ac;
	ac->ev.addRead = uv_events_add_read;
	ac->ev.delRead = uv_events_del_read;
	ac->ev.addWrite = uv_events_add_write;
	ac->ev.delWrite = uv_events_del_write;
	ac->ev.cleanup = uv_events_cleanup;
	ac->ev.data = p;
	return REDIS_OK;
}

int
redis_uv_in_handshake(const redisAsyncContext *ac)
{
	const struct uv_events *p = ac->ev.data;

	return p != NULL && p->tls.ssl != NULL && p->tls.tcp_up && !p->tls.up;
}
