/*
 * redis_uv.c - hiredis's events on the libuv loop: hiredis 0.14's
 * adapters/libuv.h, with two fixes. Its poll callback ignores an error
 * status (libuv reports POLLERR, e.g. a refused connect, as UV_EBADF and
 * stops the poll), so a refused connection would hang until the command's
 * timeout; and it leaks its struct when uv_poll_init fails. Here an error
 * status lets hiredis look at the socket (the connect check or a read),
 * which reports the real error.
 */
#include <stdlib.h>

#include <async.h>
#include <uv.h>

#include "redis_int.h"

struct uv_events {
	redisAsyncContext *ac;
	uv_poll_t handle;
	int events;
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

static void
uv_events_set(struct uv_events *p, int events)
{
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

static void
uv_events_add_write(void *d)
{
	struct uv_events *p = d;

	uv_events_set(p, p->events | UV_WRITABLE);
}

static void
uv_events_del_write(void *d)
{
	struct uv_events *p = d;

	uv_events_set(p, p->events & ~UV_WRITABLE);
}

static void
uv_events_closed(uv_handle_t *h)
{
	free(h->data);
}

static void
uv_events_cleanup(void *d)
{
	struct uv_events *p = d;

	p->ac = NULL; /* the context is going away */
	uv_close((uv_handle_t *)&p->handle, uv_events_closed);
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
	p->handle.data = p;
	p->ac = ac;
	ac->ev.addRead = uv_events_add_read;
	ac->ev.delRead = uv_events_del_read;
	ac->ev.addWrite = uv_events_add_write;
	ac->ev.delWrite = uv_events_del_write;
	ac->ev.cleanup = uv_events_cleanup;
	ac->ev.data = p;
	return REDIS_OK;
}
