/*
 * conn_sock.h - the transport under a FastCGI connection: a non-blocking
 * stream socket in an epoll set, with its pending output. It reads bytes
 * and hands them up, writes what it is given (the rest when the socket is
 * writable), and ends with or without a lingering close. It knows nothing
 * of records or requests: everything it has to say goes up through one
 * callback (in the manner of hiredis's ev hooks, the other way round), and
 * only its owner closes it.
 */
#ifndef CHARGE_CONN_SOCK_H
#define CHARGE_CONN_SOCK_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

/*
 * The sockets of one loop, in an epoll set of their own that one libuv
 * handle watches: a descriptor is added once and leaves the set with its
 * close(), where a uv_poll_t per socket cost five more system calls (libuv
 * probes a new descriptor with an epoll add and delete, sets O_NONBLOCK
 * again and deletes it at every restart) and libuv's own streams three
 * more per connection (O_NONBLOCK again, an fcntl, an epoll delete before
 * the close) for the same cost on a kept one (docs/decisions.md).
 */
struct sock_set {
	uv_loop_t *loop;
	int epfd;
	uv_poll_t watch;
};

enum sock_event {
	SOCK_EV_DATA,     /* bytes read: data, len */
	SOCK_EV_EOF,      /* the peer shut its side; reading has stopped */
	SOCK_EV_WRITABLE, /* the output is back within its bound */
	SOCK_EV_STALLED,  /* the output did not move for stall_ms */
	SOCK_EV_CLOSE,    /* reset, error, or the end is over: close it */
	SOCK_EV_CLOSED,   /* the socket's handle closed: its memory may go */
};

struct sock;
typedef void (
    *sock_cb)(struct sock *s, enum sock_event ev, const char *data, size_t len);

struct sock {
	struct sock_set *set;
	sock_cb on_event;
	int fd;
	unsigned poll_events; /* EPOLLIN, EPOLLOUT in the set */
	size_t read_room;     /* bytes the owner takes per read; 0: none */
	char *out;            /* pending output: out[out_off..out_len) */
	size_t out_len, out_off, out_cap;
	size_t out_max;      /* above it sock_out_full() */
	uint64_t stall_ms;   /* output not moving, the lingering close */
	uv_timer_t timer;    /* both of them */
	unsigned rd_eof : 1; /* read() gave 0 */
	unsigned ending : 1; /* sock_end: close once the output is out */
	unsigned linger : 1; /* ... by a shutdown, then reading to the EOF */
	unsigned lingering : 1;
	unsigned blocked : 1; /* sock_out_full was true: WRITABLE is owed */
	unsigned closed : 1;
};

/* Prepares set's epoll set on loop. 0, or -1 (errno). */
int sock_set_init(struct sock_set *set, uv_loop_t *loop);
/* After its last socket closed: the set's handle closes on the loop. */
void sock_set_close(struct sock_set *set);

/*
 * Starts s on the accepted, non-blocking fd, in the set for reading (one
 * epoll_ctl), but taking nothing until sock_read gives it room. 0, or -1
 * (fd is left to the caller).
 */
int sock_open(struct sock *s, struct sock_set *set, int fd, sock_cb on_event,
    size_t out_max, uint64_t stall_ms);
/* Reads at most room bytes at a time from now on (0: stops reading). */
void sock_read(struct sock *s, size_t room);
/*
 * Reads now, without waiting for the poll, what the socket holds: a new
 * connection's first records have usually arrived before its accept.
 * SOCK_EV_DATA may follow (and anything the owner does with it).
 */
void sock_read_now(struct sock *s);

/* Output bytes not yet written. */
size_t sock_out_pending(const struct sock *s);
/* 1 when more than out_max bytes wait (then WRITABLE follows). */
int sock_out_full(struct sock *s);
/* Room for n more bytes at the end of the output, or NULL (ENOMEM). */
char *sock_out_room(struct sock *s, size_t n);
/* The n bytes written at sock_out_room() are output. */
void sock_out_commit(struct sock *s, size_t n);
/* Writes what is pending; the rest when the socket is writable. */
void sock_flush(struct sock *s);
/*
 * Writes n bytes from p at once when no output is pending, and keeps what
 * the socket did not take (or everything, behind pending output) as
 * output: an answer that fits the socket's buffer never touches the
 * output buffer. Errors show at the next sock_flush. 0, or -1 (ENOMEM).
 */
int sock_write(struct sock *s, const char *p, size_t n);

/*
 * TCP: holds what is written from now on until the close (TCP_CORK; the
 * kernel sends it anyway after 200 ms), so the last answer leaves in one
 * segment with the FIN. A no-op (logged at debug) where it does not apply.
 */
void sock_cork(struct sock *s);

/*
 * Stops reading and ends s once its output is out: with linger (a TCP peer may still be
 * sending), shut down writing and read until the peer closes, at most
 * stall_ms; then SOCK_EV_CLOSE.
 */
void sock_end(struct sock *s, int linger);
/* Closes the descriptor now; SOCK_EV_CLOSED follows. Idempotent. */
void sock_close(struct sock *s);

#endif
