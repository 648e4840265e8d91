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
 */
#include <stdlib.h>

#include <async.h>
#include <uv.h>

#include "redis_int.h"

struct uv_events {
	redisAsyncContext *ac;
	uv_poll_t handle;
	uv_prepare_t flush; /* writes the output before the loop waits */
	int events;
	int flushing; /* inside flush: hiredis could not write everything */
	int open;     /* handles not yet closed */
};

static void
uv_events_poll(uv_poll_t *h, int status, int events)
{
	struct uv_events *p = h->data;

	if (p->ac == NULL)
		return;
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

static void
uv_events_add_read(void *d)
{
	struct uv_events *p = d;

	uv_events_set(p, p->events | UV_READABLE);
}

static void
uv_events_del_read(void *d)
{
	struct uv_events *p = d;

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
	p->flushing = 1;
	redisAsyncHandleWrite(p->ac); /* may free the context (cleanup) */
	p->flushing = 0;
}

static void
uv_events_add_write(void *d)
{
	struct uv_events *p = d;

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

	p->ac = NULL; /* the context is going away */
	uv_close((uv_handle_t *)&p->handle, uv_events_closed);
	uv_close((uv_handle_t *)&p->flush, uv_events_closed);
}

int
redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
	struct uv_events *p;

	if (ac->ev.data != NULL || (p = calloc(1, sizeof(*p))) == NULL)
		return REDIS_ERR;
	if (uv_poll_init(loop, &p->handle, ac->c.fd) != 0) {
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
