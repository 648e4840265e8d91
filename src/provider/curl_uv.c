/*
 * curl_uv.c - libcurl's multi-socket interface on libuv (as redis_uv.c is
 * hiredis's events on libuv). libcurl is never called from inside one of
 * its own callbacks: its socket callback only starts and stops uv_poll
 * handles, its timer callback only arms loop handles, and the transfers
 * are driven from those handles' callbacks.
 *
 * - Timeouts. A timeout of 0 ("act now": a transfer just added, a
 *   connection that can go on) runs in the same loop turn: a uv_check
 *   handle runs it after the turn's I/O callbacks (where a transfer is
 *   usually added, from a Redis reply), and a uv_idle handle keeps the
 *   loop from blocking in between when it was asked for elsewhere (a
 *   timer's callback). A timeout > 0 is a uv timer, not re-armed for the
 *   same deadline.
 * - Sockets. A socket's poll handle outlives the transfers of its kept
 *   connection: left armed for reading between them (libcurl's next
 *   transfer on it usually wants the same, which then costs no system
 *   call), stopped when it becomes readable while idle (the peer closed),
 *   freed when libcurl closes the socket through on_curl_close_socket
 *   (CURLOPT_CLOSESOCKETFUNCTION: we close it, after stopping the poll).
 * - Errors. libuv stops a poll handle itself on POLLERR (a reset, a
 *   refused connect) and reports a negative status: the handle is then
 *   marked stopped, so the next interest in the socket arms it again, and
 *   libcurl is told CURL_CSELECT_ERR.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "curl_uv.h"
#include "util.h"

#define SOCKS_MAX 65536   /* descriptors the poll table can hold */
#define CURL_UV_HANDLES 3 /* timer, check, idle */

/* A socket's poll handle: from libcurl's first interest until it closes. */
struct sock_ctx {
	uv_poll_t poll;
	curl_socket_t fd;
	int events; /* UV_READABLE | UV_WRITABLE polled now; 0: stopped */
	int conn; /* a connection's socket: closed through on_curl_close_socket */
	int idle; /* no transfer wants it: readiness stops the poll */
	struct curl_uv *cu;
};

struct curl_uv {
	uv_loop_t *loop;
	CURLM *multi;
	curl_uv_done_fn *done;
	void *done_arg;
	uv_timer_t timer;   /* libcurl's timeout, when > 0 */
	uv_check_t now;     /* libcurl's timeout 0: after this turn's I/O */
	uv_idle_t now_idle; /* ... the loop does not block before it */
	uint64_t timer_due; /* uv_now of the armed deadline */
	struct sock_ctx **socks; /* by descriptor */
	size_t socks_cap;
	int open; /* loop handles not yet closed, once freed */
};

/* Hands every finished transfer to the owner (outside libcurl). */
static void
check_multi_info(struct curl_uv *cu)
{
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(cu->multi, &left)) != NULL)
		if (msg->msg == CURLMSG_DONE)
			cu->done(msg->easy_handle, msg->data.result,
			    cu->done_arg);
}

/* --- sockets ---------------------------------------------------------- */

static void
on_sock_closed(uv_handle_t *h)
{
	free(h->data);
}

static struct sock_ctx *
sock_find(struct curl_uv *cu, curl_socket_t fd)
{
	if (fd < 0 || (size_t)fd >= cu->socks_cap)
		return NULL;
	return cu->socks[fd];
}

/* Stops and forgets fd's poll handle (before the descriptor closes). */
static void
sock_forget(struct curl_uv *cu, curl_socket_t fd)
{
	struct sock_ctx *sc;

	if ((sc = sock_find(cu, fd)) == NULL)
		return;
	cu->socks[fd] = NULL;
	(void)uv_poll_stop(&sc->poll);
	uv_close((uv_handle_t *)&sc->poll, on_sock_closed);
}

static void
on_sock_ready(uv_poll_t *p, int status, int events)
{
	struct sock_ctx *sc = p->data;
	struct curl_uv *cu = sc->cu;
	int flags = 0, running;

	/* POLLERR: libuv has stopped the handle itself */
	if (status < 0)
		sc->events = 0;
	/* a kept connection between transfers: libcurl checks it on reuse */
	if (sc->idle) {
		(void)uv_poll_stop(&sc->poll);
		sc->events = 0;
		sc->idle = 0;
		return;
	}
	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	(void)curl_multi_socket_action(cu->multi, sc->fd, flags, &running);
	check_multi_info(cu);
}

/* fd's poll handle, made on first use; NULL on ENOMEM. */
static struct sock_ctx *
sock_get(struct curl_uv *cu, curl_socket_t s)
{
	struct sock_ctx *sc;
	size_t cap;

	if (s < 0 || s >= SOCKS_MAX)
		return NULL;
	if ((size_t)s >= cu->socks_cap) {
		cap = cu->socks_cap * sizeof(*cu->socks);
		if (util_grow((char **)&cu->socks, &cap,
		        ((size_t)s + 1) * sizeof(*cu->socks),
		        64 * sizeof(*cu->socks),
		        SOCKS_MAX * sizeof(*cu->socks)) != 0)
			return NULL;
		memset(cu->socks + cu->socks_cap, 0,
		    cap - cu->socks_cap * sizeof(*cu->socks));
		cu->socks_cap = cap / sizeof(*cu->socks);
	}
	if ((sc = cu->socks[s]) != NULL)
		return sc;
	if ((sc = calloc(1, sizeof(*sc))) == NULL)
		return NULL;
	sc->cu = cu;
	if (uv_poll_init_socket(cu->loop, &sc->poll, s) != 0) {
		free(sc);
		return NULL;
	}
	sc->fd = s;
	sc->poll.data = sc;
	cu->socks[s] = sc;
	return sc;
}

/*
 * A new connection's socket (not a resolver's): it is closed through
 * on_curl_close_socket, so its poll handle may stay armed between
 * transfers. Only marks it: never calls libcurl.
 */
static int
on_curl_sockopt(void *clientp, curl_socket_t fd, curlsocktype purpose)
{
	struct sock_ctx *sc;

	if (purpose == CURLSOCKTYPE_IPCXN &&
	    (sc = sock_get(clientp, fd)) != NULL)
		sc->conn = 1;
	return CURL_SOCKOPT_OK;
}

static int
on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp,
    void *socketp)
{
	struct curl_uv *cu = userp;
	struct sock_ctx *sc;
	int events = 0;

	(void)easy;
	(void)socketp;
	/*
	 * No transfer wants the socket now (a kept connection between
	 * requests). A connection's socket read-polled stays armed, idle;
	 * readiness while idle (the peer closed) stops it. Otherwise the poll
	 * stops. The handle stays until the socket closes
	 * (on_curl_close_socket); one of a descriptor closed without that
	 * callback (not a connection) is stopped, and libuv knows it only by
	 * the number: the next socket of that number starts it again.
	 */
	if (what == CURL_POLL_REMOVE) {
		if ((sc = sock_find(cu, s)) == NULL || sc->events == 0)
			return 0;
		if (sc->conn && sc->events == UV_READABLE) {
			sc->idle = 1;
			return 0;
		}
		(void)uv_poll_stop(&sc->poll);
		sc->events = 0;
		sc->idle = 0;
		return 0;
	}
	if ((sc = sock_get(cu, s)) == NULL)
		return -1;
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		events |= UV_READABLE;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		events |= UV_WRITABLE;
	sc->idle = 0;
	if (sc->conn && events == sc->events)
		return 0; /* armed already, on the same open socket */
	if (uv_poll_start(&sc->poll, events, on_sock_ready) != 0)
		return -1;
	sc->events = events;
	return 0;
}

/* libcurl closes a socket through us: its poll handle stops first. */
static int
on_curl_close_socket(void *clientp, curl_socket_t s)
{
	sock_forget(clientp, s);
	return close(s);
}

/* --- the timeout ------------------------------------------------------ */

static void
timeout_run(struct curl_uv *cu)
{
	int running;

	(void)curl_multi_socket_action(cu->multi, CURL_SOCKET_TIMEOUT, 0,
	    &running);
	check_multi_info(cu);
}

static void
now_stop(struct curl_uv *cu)
{
	(void)uv_check_stop(&cu->now);
	(void)uv_idle_stop(&cu->now_idle);
}

static void
on_timer_due(uv_timer_t *t)
{
	timeout_run(t->data);
}

/* The check (after this turn's I/O) or the idle handle, whichever first. */
static void
on_now_check(uv_check_t *h)
{
	now_stop(h->data);
	timeout_run(h->data);
}

static void
on_now_idle(uv_idle_t *h)
{
	now_stop(h->data);
	timeout_run(h->data);
}

/* Arms loop handles only: never calls libcurl (we are inside it). */
static int
on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct curl_uv *cu = userp;
	uint64_t ms = (uint64_t)timeout_ms;

	(void)multi;
	if (timeout_ms <= 0) {
		(void)uv_timer_stop(&cu->timer);
		if (timeout_ms < 0) {
			now_stop(cu);
			return 0;
		}
		if (uv_check_start(&cu->now, on_now_check) != 0 ||
		    uv_idle_start(&cu->now_idle, on_now_idle) != 0)
			return -1;
		return 0;
	}
	now_stop(cu);
	/* the same deadline armed already: leave it */
	if (uv_is_active((uv_handle_t *)&cu->timer) &&
	    cu->timer_due == uv_now(cu->loop) + ms)
		return 0;
	cu->timer_due = uv_now(cu->loop) + ms;
	(void)uv_timer_start(&cu->timer, on_timer_due, ms, 0);
	return 0;
}

/* --- the multi handle ------------------------------------------------- */

struct curl_uv *
curl_uv_new(uv_loop_t *loop, long conns, curl_uv_done_fn *done, void *arg)
{
	struct curl_uv *cu;

	if ((cu = calloc(1, sizeof(*cu))) == NULL)
		return NULL;
	cu->loop = loop;
	cu->done = done;
	cu->done_arg = arg;
	if ((cu->multi = curl_multi_init()) == NULL)
		goto fail;
	if (curl_multi_setopt(cu->multi, CURLMOPT_SOCKETFUNCTION,
	        on_curl_socket) != CURLM_OK ||
	    curl_multi_setopt(cu->multi, CURLMOPT_SOCKETDATA, cu) != CURLM_OK ||
	    curl_multi_setopt(cu->multi, CURLMOPT_TIMERFUNCTION,
	        on_curl_timer) != CURLM_OK ||
	    curl_multi_setopt(cu->multi, CURLMOPT_TIMERDATA, cu) != CURLM_OK ||
	    curl_multi_setopt(cu->multi, CURLMOPT_MAXCONNECTS, conns) !=
	        CURLM_OK)
		goto fail;
	(void)uv_timer_init(loop, &cu->timer);
	(void)uv_check_init(loop, &cu->now);
	(void)uv_idle_init(loop, &cu->now_idle);
	cu->timer.data = cu;
	cu->now.data = cu;
	cu->now_idle.data = cu;
	return cu;
fail:
	if (cu->multi != NULL)
		(void)curl_multi_cleanup(cu->multi);
	free(cu);
	return NULL;
}

int
curl_uv_easy_setup(struct curl_uv *cu, CURL *e)
{
	int rc = 0;

	rc |= curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION,
	    on_curl_close_socket);
	rc |= curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, cu);
	rc |= curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_curl_sockopt);
	rc |= curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, cu);
	return rc == 0 ? 0 : -1;
}

int
curl_uv_add(struct curl_uv *cu, CURL *easy)
{
	return curl_multi_add_handle(cu->multi, easy) == CURLM_OK ? 0 : -1;
}

void
curl_uv_remove(struct curl_uv *cu, CURL *easy)
{
	(void)curl_multi_remove_handle(cu->multi, easy);
}

static void
on_handle_closed(uv_handle_t *h)
{
	struct curl_uv *cu = h->data;

	if (--cu->open == 0) {
		free(cu->socks);
		free(cu);
	}
}

void
curl_uv_free(struct curl_uv *cu)
{
	curl_socket_t fd;

	if (cu == NULL)
		return;
	/* closes the kept connections: through on_curl_close_socket */
	(void)curl_multi_cleanup(cu->multi);
	cu->multi = NULL;
	/* the stopped handles of descriptors closed without our callback */
	for (fd = 0; (size_t)fd < cu->socks_cap; fd++)
		sock_forget(cu, fd);
	(void)uv_timer_stop(&cu->timer);
	now_stop(cu);
	cu->open = CURL_UV_HANDLES;
	uv_close((uv_handle_t *)&cu->timer, on_handle_closed);
	uv_close((uv_handle_t *)&cu->now, on_handle_closed);
	uv_close((uv_handle_t *)&cu->now_idle, on_handle_closed);
}
