/*
 * conn.c - one FastCGI connection's socket, in the manner of Redis's networking.c:
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "conn_int.h"
#include "log.h"
#include "util.h"

#define READ_CHUNK 16384   /* bytes read at a time */
#define READS_PER_EVENT 16 /* reads before other connections' turn */
#define OUT_FIRST 1024     /* bytes: first allocation of an output buffer */

static void conn_linger(struct conn *c);

/* --- output -------------------------------------------------------------- */

int
conn_out_reserve(struct conn *c, size_t n)
{
	if (c->out_off > 0 && c->out_off == c->out_len)
		c->out_off = c->out_len = 0;
	if (n > SIZE_MAX - c->out_len)
		return -1;
	return util_grow(&c->out, &c->out_cap, c->out_len + n, OUT_FIRST,
	    SIZE_MAX);
}

int
conn_poll(struct conn *c, unsigned events)
{
	struct epoll_event ev;

	if (events == c->poll_events)
		return 0;
	memset(&ev, 0, sizeof(ev));
	ev.events = events;
	ev.data.ptr = c;
	if (epoll_ctl(c->h->epfd, EPOLL_CTL_MOD, c->fd, &ev) != 0)
		return -1;
	c->poll_events = events;
	return 0;
}

/* Writes what is pending; the rest waits for the socket to be writable. */
void
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
			if (conn_poll(c, c->poll_events | EPOLLOUT) != 0)
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
	if (conn_poll(c, c->poll_events & ~EPOLLOUT) != 0)
		conn_close(c);
}

/* Appends END_REQUEST (and nothing else) for id. 0 or -1. */
int
conn_out_end(struct conn *c, unsigned id, int protocol_status)
{
	if (conn_out_reserve(c, FCGI_END_REQUEST_SIZE) != 0)
		return -1;
	c->out_len +=
	    fcgi_write_end(c->out + c->out_len, id, 0, protocol_status);
	return 0;
}

/*
 * The response_sink of conn_out_response: the answer is rendered into the
 * connection's scratch buffer, kept from one request to the next, then
 * framed into the output.
 */
static int
scratch_write(void *ctx, const char *p, size_t n)
{
	struct conn *c = ctx;

	if (n > SIZE_MAX - c->scratch_len ||
	    util_grow(&c->scratch, &c->scratch_cap, c->scratch_len + n,
	        OUT_FIRST, SIZE_MAX) != 0)
		return -1;
	memcpy(c->scratch + c->scratch_len, p, n);
	c->scratch_len += n;
	return 0;
}

/* The response as STDOUT records, the empty one, END_REQUEST. 0 or -1. */
int
conn_out_response(struct conn *c, const struct exchange *x)
{
	struct response_sink sink = { scratch_write, c };

	c->scratch_len = 0;
	if (response_send(&x->resp, x->req.request_id, &sink,
	        x->req.method != NULL && strcmp(x->req.method, "HEAD") == 0) !=
	        0 ||
	    conn_out_reserve(c,
	        fcgi_stream_size(c->scratch_len) + fcgi_stream_size(0) +
	            FCGI_END_REQUEST_SIZE) != 0)
		return -1;
	c->out_len += fcgi_write_stream(c->out + c->out_len, FCGI_STDOUT,
	    c->req_id, c->scratch, c->scratch_len);
	c->out_len += fcgi_write_stream(c->out + c->out_len, FCGI_STDOUT,
	    c->req_id, NULL, 0);
	c->out_len += fcgi_write_end(c->out + c->out_len, c->req_id, 0,
	    FCGI_REQUEST_COMPLETE);
	return 0;
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
			/*
			 * Requests pipelined behind one in progress fill the
			 * reader: read again once it has been served.
			 */
			if (conn_poll(c, c->poll_events & ~EPOLLIN) != 0)
				conn_close(c);
			return;
		}
		if (room > sizeof(buf))
			room = sizeof(buf);
		n = read(c->fd, buf, room);
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
		/*
		 * A short read took what the socket held: the poll says when
		 * more comes (a read that would only answer EAGAIN is saved).
		 */
		if ((size_t)n < room)
			return;
	}
}

#define EPOLL_BATCH 64 /* events taken from the set at a time */

/* The host's epoll set is readable: one batch of its events. */
static void
on_epoll(uv_poll_t *p, int status, int events)
{
	struct conn_host *h = p->data;
	struct epoll_event evs[EPOLL_BATCH];
	struct conn *c;
	int n, i;

	(void)events;
	if (status < 0)
		return;
	do
		n = epoll_wait(h->epfd, evs, EPOLL_BATCH, 0);
	while (n < 0 && errno == EINTR);
	/*
	 * A connection closed in this batch is freed by its timer's close
	 * callback, after the batch: its later events find it closed.
	 */
	for (i = 0; i < n; i++) {
		c = evs[i].data.ptr;
		if (c->closed)
			continue;
		/* not reading (the reader is full): a hang-up ends it here */
		if ((evs[i].events & (EPOLLHUP | EPOLLERR)) &&
		    !(c->poll_events & EPOLLIN)) {
			conn_close(c);
			continue;
		}
		if (evs[i].events & EPOLLOUT)
			conn_flush(c);
		if (!c->closed &&
		    (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
			conn_read(c);
	}
}

int
conn_host_init(struct conn_host *h, uv_loop_t *loop)
{
	if ((h->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return -1;
	if (uv_poll_init(loop, &h->epoll_watch, h->epfd) != 0 ||
	    uv_poll_start(&h->epoll_watch, UV_READABLE, on_epoll) != 0) {
		(void)close(h->epfd);
		h->epfd = -1;
		return -1;
	}
	h->epoll_watch.data = h;
	return 0;
}

static void
on_epoll_closed(uv_handle_t *hd)
{
	struct conn_host *h = hd->data;

	(void)close(h->epfd);
	h->epfd = -1;
}

void
conn_host_close(struct conn_host *h)
{
	if (h->epfd >= 0)
		uv_close((uv_handle_t *)&h->epoll_watch, on_epoll_closed);
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

	fcgi_reader_free(c->rd);
	free(c->out);
	free(c->scratch);
	free(c);
	if (h->on_idle != NULL)
		h->on_idle(h);
}

void
conn_close(struct conn *c)
{
	struct conn_host *h = c->h;

	if (c->closed)
		return;
	c->closed = 1;
	if (c->x != NULL) {
		/* a request in progress finishes without its connection */
		conn_inflight_release(c);
		if (c->state == C_SERVING)
			c->x->transport = NULL;
		else
			conn_exchange_free(h, c->x);
		c->x = NULL;
	}
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		h->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	h->nconns--;
	(void)close(c->fd); /* it leaves the epoll set with it */
	uv_close((uv_handle_t *)&c->timer, on_handle_closed);
}

int
conn_open(struct conn_host *h, int fd)
{
	struct epoll_event ev;
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
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.ptr = c;
	if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		fcgi_reader_free(c->rd);
		free(c);
		(void)close(fd);
		return -1;
	}
	c->poll_events = EPOLLIN;
	(void)uv_timer_init(h->w->loop, &c->timer);
	c->timer.data = c;
	c->next = h->conns;
	if (h->conns != NULL)
		h->conns->prev = c;
	h->conns = c;
	h->nconns++;
	(void)uv_timer_start(&c->timer, conn_on_read_timeout,
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
			(void)conn_out_response(c, &tmp);
			response_free(&tmp.resp);
			x->transport = NULL;
			c->x = NULL;
			conn_inflight_release(c);
		}
		c->closing = 1;
		conn_flush(c);
		if (!c->closed)
			conn_close(c);
	}
}
