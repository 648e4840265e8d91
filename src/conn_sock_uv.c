/*
 * conn_sock_uv.c - the transport under a FastCGI connection on libuv's own
 * streams (meson -Dtransport=uvstream; conn_sock.c is the default, one
 * epoll set per loop): the accepted descriptor opened as a uv_pipe_t or a
 * uv_tcp_t, read with uv_read_start into the loop's buffer, written at
 * once with uv_try_write and the rest with uv_write, ended with
 * uv_shutdown (the lingering close) and uv_close, as sim/server.c does.
 * The interface and its events are conn_sock.h's; docs/decisions.md has
 * the measurement of the two.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn_sock.h"
#include "log.h"
#include "util.h"

#define OUT_FIRST 1024 /* bytes: first allocation of an output buffer */
/* bytes: an output buffer larger than this is freed once empty */
#define OUT_KEEP 16384

static void
sock_emit(struct sock *s, enum sock_event ev)
{
	s->on_event(s, ev, NULL, 0);
}

static void
on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *buf)
{
	struct sock *s = hd->data;
	size_t room = s->lingering ? SOCK_READ_CHUNK : s->read_room;

	(void)suggested;
	if (room > SOCK_READ_CHUNK)
		room = SOCK_READ_CHUNK;
	*buf = uv_buf_init(s->set->rbuf, (unsigned)room);
}

static void
on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
	struct sock *s = st->data;

	if (s->closed || n == 0 || n == UV_ENOBUFS)
		return;
	if (n == UV_EOF) {
		s->rd_eof = 1;
		s->reading = 0; /* libuv stopped reading */
		sock_emit(s, s->lingering ? SOCK_EV_CLOSE : SOCK_EV_EOF);
		return;
	}
	if (n < 0) {
		log_debug(NULL, "FastCGI connection: read: %s",
		    uv_strerror((int)n));
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	if (!s->lingering) /* else discarded until the peer closes */
		s->on_event(s, SOCK_EV_DATA, buf->base, (size_t)n);
}

/* Reading while the owner takes bytes (or to the EOF, lingering). */
static void
sock_read_update(struct sock *s)
{
	int want;

	if (s->closed)
		return;
	if (s->broken) {
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	want = !s->rd_eof && (s->read_room > 0 || s->lingering);
	if (want == (int)s->reading)
		return;
	if (!want) {
		(void)uv_read_stop(&s->h.stream); /* always 0 */
		s->reading = 0;
		return;
	}
	if (uv_read_start(&s->h.stream, on_alloc, on_read) != 0) {
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	s->reading = 1;
}

void
sock_read(struct sock *s, size_t room)
{
	s->read_room = room;
	sock_read_update(s);
}

void
sock_read_now(struct sock *s)
{
	size_t room = s->read_room;
	ssize_t n;

	/* libuv has no read outside its poll: read(2) on its descriptor */
	if (s->closed || s->broken || room == 0 || s->rd_eof)
		return;
	if (room > SOCK_READ_CHUNK)
		room = SOCK_READ_CHUNK;
	do
		n = read(s->fd, s->set->rbuf, room);
	while (n < 0 && errno == EINTR);
	if (n > 0)
		s->on_event(s, SOCK_EV_DATA, s->set->rbuf, (size_t)n);
	/* EOF and errors: libuv's read finds them again */
}

size_t
sock_out_pending(const struct sock *s)
{
	size_t n = s->out_len - s->out_off;

	if (s->writing)
		n += uv_stream_get_write_queue_size(&s->h.stream);
	return n;
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
	size_t pending = sock_out_pending(s);

	if (!s->lingering && pending > 0 && pending < s->stall_mark) {
		/* libuv wrote some of it meanwhile: it moves */
		s->stall_mark = pending;
		(void)uv_timer_start(&s->timer, on_timer, s->stall_ms, 0);
		return;
	}
	/* the output did not move, or the peer never closed after the end */
	sock_emit(s, s->lingering ? SOCK_EV_CLOSE : SOCK_EV_STALLED);
}

static void
on_shutdown(uv_shutdown_t *req, int status)
{
	struct sock *s = req->data;

	if (status < 0 && !s->closed)
		sock_emit(s, SOCK_EV_CLOSE);
}

/* The output is out: shut down writing, read to the peer's close. */
static void
sock_shut(struct sock *s)
{
	s->lingering = 1;
	s->sreq.data = s;
	if (uv_shutdown(&s->sreq, &s->h.stream, on_shutdown) != 0) {
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	(void)uv_timer_start(&s->timer, on_timer, s->stall_ms, 0);
	sock_read_update(s);
}

static void
on_write(uv_write_t *req, int status)
{
	struct sock *s = req->data;

	s->writing = 0;
	if (s->out == NULL && s->wcap <= OUT_KEEP) { /* reused */
		s->out = s->wbuf;
		s->out_cap = s->wcap;
	} else {
		free(s->wbuf);
	}
	s->wbuf = NULL;
	s->wcap = 0;
	if (s->closed)
		return;
	if (status < 0) {
		log_debug(NULL, "FastCGI connection: write: %s",
		    uv_strerror(status));
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	sock_flush(s);
}

/*
 * Writes the output at once, and gives what the socket did not take to
 * libuv with its buffer (a new one collects what follows). 0, or -1.
 */
static int
sock_send(struct sock *s)
{
	uv_buf_t b;
	int n;

	b = uv_buf_init(s->out + s->out_off,
	    (unsigned)(s->out_len - s->out_off));
	n = uv_try_write(&s->h.stream, &b, 1);
	if (n < 0 && n != UV_EAGAIN) {
		log_debug(NULL, "FastCGI connection: write: %s",
		    uv_strerror(n));
		return -1;
	}
	if (n > 0)
		s->out_off += (size_t)n;
	if (s->out_off == s->out_len) {
		s->out_off = s->out_len = 0;
		return 0;
	}
	b = uv_buf_init(s->out + s->out_off,
	    (unsigned)(s->out_len - s->out_off));
	s->wbuf = s->out;
	s->wcap = s->out_cap;
	s->out = NULL;
	s->out_cap = s->out_len = s->out_off = 0;
	s->wreq.data = s;
	if (uv_write(&s->wreq, &s->h.stream, &b, 1, on_write) != 0) {
		free(s->wbuf);
		s->wbuf = NULL;
		return -1;
	}
	s->writing = 1;
	return 0;
}

void
sock_flush(struct sock *s)
{
	size_t before = sock_out_pending(s), pending;

	if (s->closed || s->lingering)
		return;
	if (!s->writing && s->out_off < s->out_len && sock_send(s) != 0) {
		sock_emit(s, SOCK_EV_CLOSE);
		return;
	}
	if ((pending = sock_out_pending(s)) > 0) {
		if (pending < before ||
		    !uv_is_active((uv_handle_t *)&s->timer)) {
			s->stall_mark = pending;
			(void)uv_timer_start(&s->timer, on_timer, s->stall_ms,
			    0);
		}
	} else {
		(void)uv_timer_stop(&s->timer);
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
	sock_read_update(s);
	if (!s->closed && s->blocked && pending <= s->out_max) {
		s->blocked = 0;
		sock_emit(s, SOCK_EV_WRITABLE);
	}
}

int
sock_write(struct sock *s, const char *p, size_t n)
{
	uv_buf_t b;
	char *room;
	int w;

	if (!s->closed && !s->broken && n > 0 && sock_out_pending(s) == 0) {
		b = uv_buf_init((char *)(uintptr_t)p, (unsigned)n);
		/* an error shows at the next flush */
		if ((w = uv_try_write(&s->h.stream, &b, 1)) > 0) {
			p += w;
			n -= (size_t)w;
		}
	}
	if (n == 0)
		return 0;
	if ((room = sock_out_room(s, n)) == NULL)
		return -1;
	memcpy(room, p, n);
	sock_out_commit(s, n);
	return 0;
}

void
sock_end(struct sock *s, int linger)
{
	/* reading stops with the flush, or the close makes it moot */
	s->read_room = 0;
	s->ending = 1;
	s->linger = linger != 0;
	sock_flush(s);
}

int
sock_set_init(struct sock_set *set, uv_loop_t *loop)
{
	set->loop = loop;
	return 0;
}

void
sock_set_close(struct sock_set *set)
{
	(void)set; /* no handle of its own */
}

int
sock_open(struct sock *s, struct sock_set *set, int fd, sock_cb on_event,
    size_t out_max, uint64_t stall_ms)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int rc;

	memset(s, 0, sizeof(*s));
	s->set = set;
	s->fd = fd;
	s->on_event = on_event;
	s->out_max = out_max;
	s->stall_ms = stall_ms;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return -1;
	if (ss.ss_family == AF_UNIX)
		rc = uv_pipe_init(set->loop, &s->h.pipe, 0);
	else
		rc = uv_tcp_init(set->loop, &s->h.tcp);
	if (rc != 0)
		return -1;
	/*
	 * From here the handle is the loop's until its close: a failed open
	 * (only a bad descriptor can fail it) closes at the first turn.
	 */
	s->h.stream.data = s;
	if (ss.ss_family == AF_UNIX)
		rc = uv_pipe_open(&s->h.pipe, fd);
	else
		rc = uv_tcp_open(&s->h.tcp, fd);
	s->broken = rc != 0;
	(void)uv_timer_init(set->loop, &s->timer);
	s->timer.data = s;
	s->handles = 2;
	return 0;
}

static void
on_handle_closed(uv_handle_t *hd)
{
	struct sock *s = hd->data;

	if (--s->handles > 0)
		return;
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
	if (s->broken) /* the stream never took the descriptor */
		(void)close(s->fd);
	uv_close((uv_handle_t *)&s->h.stream, on_handle_closed);
	uv_close((uv_handle_t *)&s->timer, on_handle_closed);
}
