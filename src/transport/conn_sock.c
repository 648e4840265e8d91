/*
 * conn_sock.c - a non-blocking stream socket in an epoll set, with its
 * pending output (see conn_sock.h). One read handler hands bytes up; writes
 * are tried at once and the rest is flushed when the socket is writable;
 * output that does not move for stall_ms is reported; the end is a close,
 * or a shutdown for writing and a read to the peer's close (as libfcgi's
 * close does, so that a peer still sending never meets a reset).
 */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn_sock.h"
#include "log.h"
#include "util.h"

#define READ_CHUNK 16384   /* bytes read at a time */
#define READS_PER_EVENT 16 /* reads before other sockets' turn */
#define OUT_FIRST 1024     /* bytes: first allocation of an output buffer */
/* bytes: an output buffer larger than this is freed once empty */
#define OUT_KEEP 16384
#define EPOLL_BATCH 64 /* events taken from the set at a time */

static void
sock_emit(struct sock *s, enum sock_event ev)
{
	s->on_event(s, ev, NULL, 0);
}

/* The set's poll for s: reading while the owner takes bytes, writing while
 * output waits. */
static void
sock_poll_update(struct sock *s)
{
	struct epoll_event ev;
	unsigned events = 0;

	if (s->closed)
		return;
	if (sock_out_pending(s) > 0)
		events |= EPOLLOUT;
	if (!s->rd_eof && (s->read_room > 0 || s->lingering))
		events |= EPOLLIN;
	if (events == s->poll_events)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.events = events;
	ev.data.ptr = s;
	if (epoll_ctl(s->set->epfd, EPOLL_CTL_MOD, s->fd, &ev) != 0) {
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	s->poll_events = events;
}

void
sock_read(struct sock *s, size_t room)
{
	s->read_room = room;
	sock_poll_update(s);
}

size_t
sock_out_pending(const struct sock *s)
{
	return s->out_len - s->out_off;
}

int
sock_out_full(struct sock *s)
{
	if (sock_out_pending(s) <= s->out_max)
		return 0;
	s->blocked = 1;
	return 1;
}

char *
sock_out_room(struct sock *s, size_t n)
{
	if (s->out_off > 0 && s->out_off == s->out_len)
		s->out_off = s->out_len = 0;
	if (n > SIZE_MAX - s->out_len ||
	    util_grow(&s->out, &s->out_cap, s->out_len + n, OUT_FIRST,
	        SIZE_MAX) != 0)
		return NULL;
	return s->out + s->out_len;
}

void
sock_out_commit(struct sock *s, size_t n)
{
	assert(n <= s->out_cap - s->out_len);
	s->out_len += n;
}

static void
on_timer(uv_timer_t *t)
{
	struct sock *s = t->data;

	/* the output did not move, or the peer never closed after the end */
	sock_emit(s, s->lingering ? SOCK_EV_CLOSE : SOCK_EV_STALLED);
}

/* The output is out: shut down writing, read to the peer's close. */
static void
sock_shut(struct sock *s)
{
	s->lingering = 1;
	if (shutdown(s->fd, SHUT_WR) != 0) {
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	(void)uv_timer_start(&s->timer, on_timer, s->stall_ms, 0);
	sock_poll_update(s);
}

void
sock_flush(struct sock *s)
{
	size_t before = sock_out_pending(s);
	ssize_t n;

	while (!s->closed && s->out_off < s->out_len) {
		n = write(s->fd, s->out + s->out_off, s->out_len - s->out_off);
		if (n > 0) {
			s->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		log_debug(NULL, "FastCGI connection: write: %s",
		    n < 0 ? strerror(errno) : "nothing written");
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	if (s->closed || s->lingering)
		return;
	if (sock_out_pending(s) > 0) {
		if (sock_out_pending(s) < before ||
		    !uv_is_active((uv_handle_t *)&s->timer))
			(void)uv_timer_start(&s->timer, on_timer, s->stall_ms,
			    0);
	} else {
		(void)uv_timer_stop(&s->timer);
		s->out_off = s->out_len = 0;
		if (s->out_cap > OUT_KEEP) { /* after one large answer */
			free(s->out);
			s->out = NULL;
			s->out_cap = 0;
		}
		if (s->ending && s->linger && !s->rd_eof) {
			sock_shut(s);
			return;
		}
		if (s->ending) {
			sock_emit(s, SOCK_EV_CLOSE);
			return;
		}
	}
	sock_poll_update(s);
	if (!s->closed && s->blocked && sock_out_pending(s) <= s->out_max) {
		s->blocked = 0;
		sock_emit(s, SOCK_EV_WRITABLE);
	}
}

int
sock_write(struct sock *s, const char *p, size_t n)
{
	ssize_t w = -1;
	char *room;

	while (!s->closed && n > 0 && sock_out_pending(s) == 0) {
		w = write(s->fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* EAGAIN; an error shows at the next flush */
		p += w;
		n -= (size_t)w;
	}
	if (n == 0)
		return 0;
	if ((room = sock_out_room(s, n)) == NULL)
		return -1;
	memcpy(room, p, n);
	sock_out_commit(s, n);
	return 0;
}

/*
 * TCP only: what is written from now on leaves with the close, in one
 * segment with the FIN (TCP_CORK; the shutdown or close pushes it out, the
 * kernel after 200 ms at the latest), so the peer never reads the last
 * answer on a connection it may still reuse.
 */
void
sock_cork(struct sock *s)
{
	int on = 1;

	if (setsockopt(s->fd, IPPROTO_TCP, TCP_CORK, &on, sizeof(on)) != 0)
		log_debug(NULL, "FastCGI connection: TCP_CORK: %s",
		    strerror(errno));
}

void
sock_end(struct sock *s, int linger)
{
	/* the poll follows with the flush, or the close makes it moot */
	s->read_room = 0;
	s->ending = 1;
	s->linger = linger != 0;
	sock_flush(s);
}

/* The socket is readable (or hung up): hands up what it reads. */
static void
sock_on_readable(struct sock *s)
{
	char buf[READ_CHUNK];
	size_t room;
	ssize_t n;
	int i;

	for (i = 0; i < READS_PER_EVENT && !s->closed; i++) {
		room = s->lingering ? sizeof(buf) : s->read_room;
		if (room == 0 || s->rd_eof) {
			sock_poll_update(s);
			return;
		}
		if (room > sizeof(buf))
			room = sizeof(buf);
		n = read(s->fd, buf, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0) {
			log_debug(NULL, "FastCGI connection: read: %s",
			    strerror(errno));
			sock_emit(s, SOCK_EV_CLOSE);
			return;
		}
		if (n == 0) {
			s->rd_eof = 1;
			sock_poll_update(s);
			sock_emit(s,
			    s->lingering ? SOCK_EV_CLOSE : SOCK_EV_EOF);
			return;
		}
		if (s->lingering)
			continue; /* discarded until the peer closes */
		s->on_event(s, SOCK_EV_DATA, buf, (size_t)n);
		/*
		 * A short read took what the socket held: the poll says when
		 * more comes (a read that would only answer EAGAIN is saved).
		 */
		if ((size_t)n < room)
			return;
	}
}

void
sock_read_now(struct sock *s)
{
	if (!s->closed && s->read_room > 0 && !s->rd_eof)
		sock_on_readable(s);
}

/* The set is readable: one batch of its events. */
static void
on_epoll(uv_poll_t *p, int status, int events)
{
	struct sock_set *set = p->data;
	struct epoll_event evs[EPOLL_BATCH];
	struct sock *s;
	int n, i;

	(void)events;
	if (status < 0)
		return;
	do
		n = epoll_wait(set->epfd, evs, EPOLL_BATCH, 0);
	while (n < 0 && errno == EINTR);
	/*
	 * A socket closed in this batch is freed by its handle's close
	 * callback, after the batch: its later events find it closed.
	 */
	for (i = 0; i < n; i++) {
		s = evs[i].data.ptr;
		if (s->closed)
			continue;
		/* not reading: a hang-up ends it here */
		if ((evs[i].events & (EPOLLHUP | EPOLLERR)) &&
		    !(s->poll_events & EPOLLIN)) {
			sock_emit(s, SOCK_EV_CLOSE);
			continue;
		}
		if (evs[i].events & EPOLLOUT)
			sock_flush(s);
		if (!s->closed &&
		    (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
			sock_on_readable(s);
	}
}

int
sock_set_init(struct sock_set *set, uv_loop_t *loop)
{
	set->loop = loop;
	if ((set->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return -1;
	if (uv_poll_init(loop, &set->watch, set->epfd) != 0 ||
	    uv_poll_start(&set->watch, UV_READABLE, on_epoll) != 0) {
		(void)close(set->epfd);
		set->epfd = -1;
		return -1;
	}
	set->watch.data = set;
	return 0;
}

static void
on_set_closed(uv_handle_t *hd)
{
	struct sock_set *set = hd->data;

	(void)close(set->epfd);
	set->epfd = -1;
}

void
sock_set_close(struct sock_set *set)
{
	if (set->epfd >= 0)
		uv_close((uv_handle_t *)&set->watch, on_set_closed);
}

int
sock_open(struct sock *s, struct sock_set *set, int fd, sock_cb on_event,
    size_t out_max, uint64_t stall_ms)
{
	struct epoll_event ev;

	memset(s, 0, sizeof(*s));
	s->set = set;
	s->fd = fd;
	s->on_event = on_event;
	s->out_max = out_max;
	s->stall_ms = stall_ms;
	/* polled for reading from the start: a connection's first need */
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.ptr = s;
	if (epoll_ctl(set->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
		return -1;
	s->poll_events = EPOLLIN;
	(void)uv_timer_init(set->loop, &s->timer);
	s->timer.data = s;
	return 0;
}

static void
on_timer_closed(uv_handle_t *hd)
{
	struct sock *s = hd->data;

	free(s->out);
	s->out = NULL;
	sock_emit(s, SOCK_EV_CLOSED);
}

void
sock_close(struct sock *s)
{
	if (s->closed)
		return;
	s->closed = 1;
	(void)close(s->fd); /* it leaves the epoll set with it */
	uv_close((uv_handle_t *)&s->timer, on_timer_closed);
}
