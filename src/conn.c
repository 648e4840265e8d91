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
#include "metrics.h"
#include "util.h"

#define READ_CHUNK 16384   /* bytes read at a time */
#define READS_PER_EVENT 16 /* reads before other connections' turn */
#define OUT_FIRST 1024     /* bytes: first allocation of an output buffer */
/* bytes: an output or scratch buffer larger than this is freed when empty */
#define OUT_KEEP 16384

static void conn_linger(struct conn *c);
static void conn_on_eof(struct conn *c);

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
conn_out_full(const struct conn *c)
{
	return conn_out_pending(c) >
	    (size_t)c->h->w->cfg->conn_output_max_bytes;
}

int
conn_poll_update(struct conn *c)
{
	unsigned events = 0;

	if (conn_out_pending(c) > 0)
		events |= EPOLLOUT;
	if (!c->rd_eof && !c->out_paused &&
	    (c->state == C_LINGER || fcgi_reader_room(c->rd) > 0))
		events |= EPOLLIN;
	return conn_poll(c, events);
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

/* The output did not move for request_timeout_ms: the peer reads nothing. */
static void
on_out_stalled(uv_timer_t *t)
{
	struct conn *c = t->data;

	metrics_inc(MC_CONN_STALLED);
	log_warn(NULL,
	    "FastCGI connection: the web server read no output for %d ms: closed",
	    c->h->w->cfg->request_timeout_ms);
	conn_close(c);
}

/*
 * Writes what is pending; the rest waits for the socket to be writable
 * (at most request_timeout_ms without progress). Once the output is below
 * conn_output_max_bytes again, reading and processing resume.
 */
void
conn_flush(struct conn *c)
{
	size_t before = conn_out_pending(c);
	int resume = 0;
	ssize_t n;

	while (c->out_off < c->out_len) {
		n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		log_debug(NULL, "FastCGI connection: write: %s",
		    n < 0 ? strerror(errno) : "nothing written");
		conn_close(c);
		return;
	}
	if (conn_out_pending(c) > 0) {
		if (conn_out_pending(c) < before ||
		    !uv_is_active((uv_handle_t *)&c->out_timer))
			(void)uv_timer_start(&c->out_timer, on_out_stalled,
			    (uint64_t)c->h->w->cfg->request_timeout_ms, 0);
	} else {
		(void)uv_timer_stop(&c->out_timer);
		c->out_off = c->out_len = 0;
		if (c->out_cap > OUT_KEEP) { /* one large answer */
			free(c->out);
			c->out = NULL;
			c->out_cap = 0;
		}
		if (c->closing && c->linger && !c->rd_eof &&
		    c->state != C_LINGER) {
			conn_linger(c);
			return;
		}
		if (c->closing && c->state != C_LINGER) {
			conn_close(c);
			return;
		}
	}
	if (c->out_paused && !conn_out_full(c)) {
		c->out_paused = 0;
		resume = 1;
	}
	if (conn_poll_update(c) != 0) {
		conn_close(c);
		return;
	}
	if (resume && !c->processing)
		conn_process(c);
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
	if (c->scratch_cap > OUT_KEEP) { /* one large answer */
		free(c->scratch);
		c->scratch = NULL;
		c->scratch_cap = 0;
	}
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
		if (c->state != C_LINGER && !c->out_paused &&
		    conn_out_full(c)) {
			metrics_inc(MC_CONN_OUTPUT_FULL);
			c->out_paused = 1;
		}
		room = c->state == C_LINGER ? sizeof(buf)
		                            : fcgi_reader_room(c->rd);
		if (room == 0 || c->out_paused || c->rd_eof) {
			/*
			 * Requests pipelined behind one in progress fill the
			 * reader, or the peer does not read its answers: read
			 * again once they have been served or sent.
			 */
			if (conn_poll_update(c) != 0)
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
		if (n == 0) {
			conn_on_eof(c);
			return;
		}
		if (n < 0) { /* reset */
			log_debug(NULL, "FastCGI connection: read: %s",
			    strerror(errno));
			conn_close(c);
			return;
		}
		if (c->state == C_LINGER)
			continue; /* discarded until the peer closes */
		if (c->idle_wait) {
			/* a kept connection's next request begins to arrive */
			c->idle_wait = 0;
			(void)uv_timer_start(&c->timer, conn_on_read_timeout,
			    (uint64_t)c->h->w->cfg->request_timeout_ms, 0);
		}
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

/*
 * The peer shut its side (read() == 0). A request that has its input (it
 * was dispatched) or was answered still gets its answer, as libfcgi does
 * (lighttpd's tcp-fin-propagate half-closes like this); then the
 * connection closes. Anything else ends here.
 */
static void
conn_on_eof(struct conn *c)
{
	c->rd_eof = 1;
	if (c->state == C_LINGER) {
		conn_close(c);
		return;
	}
	if (c->state == C_SERVING) {
		if (conn_poll_update(c) != 0)
			conn_close(c);
		return;
	}
	if (c->state == C_DRAINING) {
		conn_request_complete(c);
		return;
	}
	c->closing = 1; /* what is pending (management answers) goes out */
	conn_flush(c);
}

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

	if (--c->handles > 0)
		return;
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
		/*
		 * A request in progress finishes without its connection (and
		 * holds its slot of max_inflight until then).
		 */
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
	uv_close((uv_handle_t *)&c->out_timer, on_handle_closed);
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
	(void)uv_timer_init(h->w->loop, &c->out_timer);
	c->timer.data = c->out_timer.data = c;
	c->handles = 2;
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

	for (c = h->conns; c != NULL; c = next) {
		next = c->next;
		if (c->state == C_PARAMS || c->state == C_BODY ||
		    c->state == C_SERVING)
			conn_answer_unavailable(c);
		c->closing = 1;
		conn_flush(c);
		if (!c->closed)
			conn_close(c);
	}
}
