/*
 * loop.c - the event loops of one FastCGI process. Each loop is a thread
 * with a libuv loop, its own Redis client and ledger descriptor, and every
 * connection it accepted from the shared listening socket; a request
 * waiting on Redis, the provider or a timer holds no thread. The main
 * thread only waits for the stop signals and tells the loops.
 *
 * A stop: each loop stops accepting, closes its idle connections, lets the
 * requests in flight finish (at most drain_timeout_ms; then what is left is
 * answered 503 and its connection closed, while its use case still records
 * its outcome), then frees its Redis client and ends.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "digest.h"
#include "log.h"
#include "loop.h"
#include "notify.h"
#include "spill.h"

#define ACCEPTS_PER_EVENT 1 /* then the other loops get their turn */
#define ACCEPT_RETRY_MS 100 /* pause after accept failed for resources */
#define SIGNAL_POLL_MS 200  /* the main thread checks the loops this often */
#define RELOAD_WAIT_MS 1000 /* a reload waits this long for every loop */
#define RELOAD_POLL_MS 5

struct loop_ctx {
	uv_loop_t loop;
	struct worker w;
	struct conn_host host;
	uv_poll_t listen_poll;
	uv_async_t stop_async;
	uv_async_t reload_async;
	/* a reload: set by the main thread, taken by the loop (atomic) */
	const struct loop_conf *pending;
	const struct loop_conf *applied; /* the loop's answer (atomic) */
	uv_timer_t retry_timer; /* accept paused after EMFILE and the like */
	uv_timer_t drain_timer;
	uv_timer_t finish_timer; /* loop_finish, outside any other callback */
	uv_timer_t gc_timer;     /* loop 0 */
	uv_work_t gc_work;
	int gc_busy;
	int listen_fd;
	int transient; /* failed accepts in a row */
	int stopping, finished;
	pthread_t tid;
	int done; /* atomic: the thread's loop ended */
};

/* The process-wide count of requests in flight (max_inflight). */
static int inflight;
/* The bytes their bodies hold in the process (body_memory_max_bytes). */
static long body_bytes;

/*
 * FCGI_WEB_SERVER_ADDRS, as libfcgi honours it: on a TCP listener only
 * these addresses (comma-separated) may connect. NULL or "": any. Set once
 * before the loops start.
 */
static const char *web_server_addrs;

/* 1 when the peer of the TCP connection fd may connect. */
static int
peer_allowed(int fd)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	char ip[INET6_ADDRSTRLEN];
	const char *p, *q;
	size_t n;

	if (web_server_addrs == NULL || web_server_addrs[0] == '\0')
		return 1;
	if (getpeername(fd, (struct sockaddr *)&sa, &len) != 0)
		return 0;
	if (sa.ss_family == AF_INET)
		p = inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr,
		    ip, sizeof(ip));
	else if (sa.ss_family == AF_INET6)
		p = inet_ntop(AF_INET6,
		    &((struct sockaddr_in6 *)&sa)->sin6_addr, ip, sizeof(ip));
	else
		return 1; /* a unix socket: the file's permissions decide */
	if (p == NULL)
		return 0;
	if (strncmp(ip, "::ffff:", 7) == 0 && strchr(ip + 7, '.') != NULL)
		memmove(ip, ip + 7, strlen(ip + 7) + 1); /* IPv4-mapped */
	n = strlen(ip);
	for (p = web_server_addrs; *p != '\0'; p = *q ? q + 1 : q) {
		while (*p == ' ')
			p++;
		q = strchr(p, ',');
		if (q == NULL)
			q = p + strlen(p);
		if ((size_t)(q - p) == n && strncmp(p, ip, n) == 0)
			return 1;
	}
	return 0;
}

/* --- spill garbage collection, on the worker pool -------------------- */

static void
gc_work(uv_work_t *req)
{
	struct loop_ctx *l = req->data;

	loop_spill_gc(l->w.cfg);
}

static void
on_gc_done(uv_work_t *req, int status)
{
	struct loop_ctx *l = req->data;

	(void)status;
	l->gc_busy = 0;
}

static void
on_gc_timer(uv_timer_t *t)
{
	struct loop_ctx *l = t->data;

	if (l->gc_busy || l->stopping)
		return;
	l->gc_work.data = l;
	if (uv_queue_work(&l->loop, &l->gc_work, gc_work, on_gc_done) == 0)
		l->gc_busy = 1;
}

void
loop_spill_gc(const struct config *cfg)
{
	long ttl = cfg->completed_ttl_s > cfg->failed_ttl_s
	    ? cfg->completed_ttl_s
	    : cfg->failed_ttl_s;
	int n;

	/* a record lives at most its TTL after the file was written */
	n = spill_gc(cfg->spill_dir, ttl + cfg->lock_ttl_s, cfg->lock_ttl_s);
	if (n < 0)
		log_warn(NULL, "spill gc: cannot read %s", cfg->spill_dir);
	else if (n > 0)
		log_info(NULL, "spill gc: removed %d file(s)", n);
}

/* --- accepting ----------------------------------------------------------- */

static void on_listen(uv_poll_t *p, int status, int events);

static void
on_retry_timer(uv_timer_t *t)
{
	struct loop_ctx *l = t->data;

	if (!l->stopping &&
	    uv_poll_start(&l->listen_poll, UV_READABLE, on_listen) != 0)
		log_error(NULL, "loop %d: cannot poll the listening socket",
		    l->w.id);
}

/* Accept failures that pass: out of descriptors, buffers or memory. */
static int
accept_error_transient(int err)
{
	return err == EMFILE || err == ENFILE || err == ENOBUFS ||
	    err == ENOMEM;
}

static void
on_listen(uv_poll_t *p, int status, int events)
{
	struct loop_ctx *l = p->data;
	int i, fd;

	(void)events;
	if (status < 0 || l->stopping)
		return;
	for (i = 0; i < ACCEPTS_PER_EVENT; i++) {
		fd = accept4(l->listen_fd, NULL, NULL,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break; /* another loop took it, or none left */
			if (accept_error_transient(errno)) {
				if (l->transient++ == 0)
					log_error(NULL,
					    "loop %d: accept: %s; retrying every %d ms",
					    l->w.id, strerror(errno),
					    ACCEPT_RETRY_MS);
				(void)uv_poll_stop(&l->listen_poll);
				(void)uv_timer_start(&l->retry_timer,
				    on_retry_timer, ACCEPT_RETRY_MS, 0);
				return;
			}
			log_error(NULL, "loop %d: accept: %s", l->w.id,
			    strerror(errno));
			return;
		}
		if (!l->host.listen_unix && !peer_allowed(fd)) {
			log_warn(NULL,
			    "loop %d: a connection from an address not in FCGI_WEB_SERVER_ADDRS: closed",
			    l->w.id);
			(void)close(fd);
			continue;
		}
		if (l->transient > 0) {
			log_info(NULL,
			    "loop %d: accepting again after %d failed attempt(s)",
			    l->w.id, l->transient);
			l->transient = 0;
		}
		if (conn_open(&l->host, fd) != 0)
			log_error(NULL, "loop %d: cannot serve a connection",
			    l->w.id);
	}
}

/* --- stopping -------------------------------------------------------------- */

static void
loop_finish(struct loop_ctx *l)
{
	if (l->finished)
		return;
	l->finished = 1;
	(void)uv_timer_stop(&l->drain_timer);
	(void)uv_timer_stop(&l->gc_timer);
	uv_close((uv_handle_t *)&l->listen_poll, NULL);
	uv_close((uv_handle_t *)&l->stop_async, NULL);
	uv_close((uv_handle_t *)&l->reload_async, NULL);
	uv_close((uv_handle_t *)&l->retry_timer, NULL);
	uv_close((uv_handle_t *)&l->drain_timer, NULL);
	uv_close((uv_handle_t *)&l->finish_timer, NULL);
	uv_close((uv_handle_t *)&l->gc_timer, NULL);
	conn_host_close(&l->host);
	worker_close(&l->w); /* the loop runs on until its handles closed */
}

static void
on_finish_timer(uv_timer_t *t)
{
	struct loop_ctx *l = t->data;

	if (l->host.nconns == 0 && l->host.nexchanges == 0)
		loop_finish(l);
}

/*
 * A connection closed or a request ended: done once nothing is left. The
 * loop finishes from a timer of its own: this may run inside a Redis
 * reply's callback, where the Redis client may not be freed.
 */
static void
on_host_idle(struct conn_host *h)
{
	struct loop_ctx *l =
	    (struct loop_ctx *)((char *)h - offsetof(struct loop_ctx, host));

	if (l->stopping && !l->finished && h->nconns == 0 && h->nexchanges == 0)
		(void)uv_timer_start(&l->finish_timer, on_finish_timer, 0, 0);
}

static void
on_drain_timer(uv_timer_t *t)
{
	struct loop_ctx *l = t->data;

	if (l->host.nconns > 0)
		log_warn(NULL,
		    "loop %d: drain time over: %u connection(s) closed",
		    l->w.id, l->host.nconns);
	conn_expire_all(&l->host);
	on_host_idle(&l->host);
}

static void
on_stop(uv_async_t *a)
{
	struct loop_ctx *l = a->data;

	if (l->stopping)
		return;
	l->stopping = 1;
	l->w.draining = 1;
	(void)uv_poll_stop(&l->listen_poll);
	(void)uv_timer_stop(&l->retry_timer);
	conn_stop_idle(&l->host);
	(void)uv_timer_start(&l->drain_timer, on_drain_timer,
	    (uint64_t)l->w.cfg->drain_timeout_ms, 0);
	on_host_idle(&l->host);
}

/* A reload: the loop's requests from now on see the new configuration. */
static void
on_reload(uv_async_t *a)
{
	struct loop_ctx *l = a->data;
	const struct loop_conf *c =
	    __atomic_exchange_n(&l->pending, NULL, __ATOMIC_ACQ_REL);

	if (c == NULL)
		return;
	worker_reconfigure(&l->w, c->cfg, c->auth);
	__atomic_store_n(&l->applied, c, __ATOMIC_RELEASE);
}

/* --- the loop thread ------------------------------------------------------ */

static void *
loop_main(void *arg)
{
	struct loop_ctx *l = arg;

	if (uv_run(&l->loop, UV_RUN_DEFAULT) != 0)
		log_warn(NULL, "loop %d: handles left at exit", l->w.id);
	digest_thread_done(); /* this thread's digest contexts */
	__atomic_store_n(&l->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void
on_warm_pong(const struct redis_result *res, void *arg)
{
	struct loop_ctx *l = arg;

	if (res->reply == NULL)
		log_warn(NULL, "loop %d: redis: %s", l->w.id, res->errstr);
}

/* 1 if fd is a unix-domain socket, else 0 (TCP, or unknown). */
static int
socket_is_unix(int fd)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);

	if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		return 0;
	return sa.ss_family == AF_UNIX;
}

/* Everything of loop l before its thread starts. 0 or -1. */
static int
loop_init(struct loop_ctx *l, const struct config *cfg,
    const struct auth_table *auth, int listen_fd, int id)
{
	memset(l, 0, sizeof(*l));
	l->listen_fd = listen_fd;
	if (uv_loop_init(&l->loop) != 0)
		return -1;
	if (worker_init(&l->w, cfg, auth, &l->loop, id) != 0) {
		(void)uv_loop_close(&l->loop);
		return -1;
	}
	l->host.w = &l->w;
	l->host.bounds.inflight = &inflight;
	l->host.bounds.body_bytes = &body_bytes;
	l->host.on_idle = on_host_idle;
	l->host.listen_unix = socket_is_unix(listen_fd);
	if (conn_host_init(&l->host, &l->loop) != 0) {
		log_error(NULL, "loop %d: epoll set: %s", id, strerror(errno));
		return -1;
	}
	if (uv_poll_init_socket(&l->loop, &l->listen_poll, listen_fd) != 0 ||
	    uv_async_init(&l->loop, &l->stop_async, on_stop) != 0 ||
	    uv_async_init(&l->loop, &l->reload_async, on_reload) != 0) {
		log_error(NULL, "loop %d: cannot watch the listening socket",
		    id);
		return -1;
	}
	(void)uv_timer_init(&l->loop, &l->retry_timer);
	(void)uv_timer_init(&l->loop, &l->drain_timer);
	(void)uv_timer_init(&l->loop, &l->finish_timer);
	(void)uv_timer_init(&l->loop, &l->gc_timer);
	l->listen_poll.data = l->stop_async.data = l->reload_async.data = l;
	l->retry_timer.data = l->drain_timer.data = l->gc_timer.data = l;
	l->finish_timer.data = l;
	if (uv_poll_start(&l->listen_poll, UV_READABLE, on_listen) != 0)
		return -1;
	/*
	 * Opens the loop's Redis connection before its first request, so that
	 * a later shortage of descriptors cannot stop it serving.
	 */
	if (redis_ping(l->w.redis, on_warm_pong, l) != 0)
		log_warn(NULL, "loop %d: cannot queue the first PING", id);
	/* every process settles unknown outcomes on its first loop */
	if (id == 0 && worker_start_completer(&l->w) != 0)
		log_warn(NULL, "loop %d: cannot start the completer", id);
	/* every process collects, idle or not; the first pass ran at start */
	if (id == 0)
		(void)uv_timer_start(&l->gc_timer, on_gc_timer,
		    1000ULL * (uint64_t)cfg->spill_gc_interval_s,
		    1000ULL * (uint64_t)cfg->spill_gc_interval_s);
	return 0;
}

/* The number of loops: threads, or one per core. */
static int
loop_count(const struct config *cfg)
{
	long n = cfg->threads;

	if (n <= 0) {
		n = sysconf(_SC_NPROCESSORS_ONLN);
		if (n < 1)
			n = 1;
		if (n > THREADS_MAX)
			n = THREADS_MAX;
	}
	return (int)n;
}

/* $NOTIFY_SOCKET hears state; a failure is logged. */
static void
loop_notify(const char *state)
{
	if (notify_send(state) < 0)
		log_warn(NULL, "NOTIFY_SOCKET: %s", strerror(errno));
}

/*
 * SIGHUP: the configuration reload() returns goes to every loop, which
 * takes it on its own thread; waits (RELOAD_WAIT_MS at most) until all
 * have.
 */
static void
loop_reload(struct loop_ctx *ls, int n, loop_reload_fn *reload, void *arg)
{
	struct timespec ts = { 0, RELOAD_POLL_MS * 1000000L }, t0;
	char state[64];
	const struct loop_conf *c;
	int i, left, waited;

	(void)clock_gettime(CLOCK_MONOTONIC, &t0);
	(void)snprintf(state, sizeof(state), "RELOADING=1\nMONOTONIC_USEC=%lld",
	    (long long)t0.tv_sec * 1000000LL + t0.tv_nsec / 1000);
	loop_notify(state);
	if ((c = reload(arg)) != NULL) {
		for (i = 0; i < n; i++) {
			__atomic_store_n(&ls[i].pending, c, __ATOMIC_RELEASE);
			if (uv_async_send(&ls[i].reload_async) != 0)
				log_error(NULL, "cannot reload event loop %d",
				    i);
		}
		for (waited = 0;; waited += RELOAD_POLL_MS) {
			for (left = 0, i = 0; i < n; i++)
				left += __atomic_load_n(&ls[i].applied,
				            __ATOMIC_ACQUIRE) != c;
			if (left == 0 || waited >= RELOAD_WAIT_MS)
				break;
			(void)nanosleep(&ts, NULL);
		}
		if (left == 0)
			log_info(NULL,
			    "reload: the new configuration is in force on %d event loop(s)",
			    n);
		else
			log_warn(NULL,
			    "reload: %d event loop(s) of %d took no new configuration within %d ms",
			    left, n, RELOAD_WAIT_MS);
	}
	loop_notify("READY=1\nSTATUS=serving");
}

/*
 * Waits for a stop signal (reloading at each SIGHUP), or for every loop to
 * have ended. 0 or 1.
 */
static int
wait_for_stop(struct loop_ctx *ls, int n, loop_reload_fn *reload, void *arg)
{
	struct timespec ts = { 0, SIGNAL_POLL_MS * 1000000L };
	sigset_t stopset;
	int i, alive, sig;

	if (sigemptyset(&stopset) != 0 || sigaddset(&stopset, SIGTERM) != 0 ||
	    sigaddset(&stopset, SIGINT) != 0 ||
	    sigaddset(&stopset, SIGUSR1) != 0 ||
	    sigaddset(&stopset, SIGHUP) != 0)
		return 1;
	for (;;) {
		sig = sigtimedwait(&stopset, NULL, &ts);
		if (sig == SIGHUP) {
			log_info(NULL, "signal %d: reloading the configuration",
			    sig);
			loop_reload(ls, n, reload, arg);
			continue;
		}
		if (sig > 0) {
			log_info(NULL, "signal %d: finishing requests in hand",
			    sig);
			return 0;
		}
		for (alive = 0, i = 0; i < n; i++)
			alive +=
			    !__atomic_load_n(&ls[i].done, __ATOMIC_SEQ_CST);
		if (alive == 0) {
			log_error(NULL,
			    "every event loop ended: the process exits");
			return 1;
		}
	}
}

int
loop_serve(const struct loop_conf *conf, int listen_fd, const char *allow,
    loop_reload_fn *reload, void *arg)
{
	const struct config *cfg = conf->cfg;
	struct loop_ctx *ls;
	int i, n = loop_count(cfg), started = 0, rc = 1, fl;

	if ((fl = fcntl(listen_fd, F_GETFL)) < 0 ||
	    fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
		log_error(NULL, "listening socket: %s", strerror(errno));
		return 1;
	}
	web_server_addrs = allow;
	if ((ls = calloc((size_t)n, sizeof(*ls))) == NULL)
		return 1;
	for (i = 0; i < n; i++) {
		if (loop_init(&ls[i], cfg, conf->auth, listen_fd, i) != 0 ||
		    pthread_create(&ls[i].tid, NULL, loop_main, &ls[i]) != 0) {
			log_error(NULL, "cannot start event loop %d", i);
			break;
		}
		started++;
	}
	if (started == n) {
		log_info(NULL,
		    "serving FastCGI with %d event loop(s), at most %d request(s) in flight",
		    n, cfg->max_inflight);
		loop_notify("READY=1\nSTATUS=serving");
		rc = wait_for_stop(ls, n, reload, arg);
		loop_notify("STOPPING=1\nSTATUS=finishing requests");
	}
	for (i = 0; i < started; i++)
		if (uv_async_send(&ls[i].stop_async) != 0)
			log_error(NULL, "cannot stop event loop %d", i);
	for (i = 0; i < started; i++) {
		(void)pthread_join(ls[i].tid, NULL);
		if (uv_loop_close(&ls[i].loop) != 0)
			log_warn(NULL, "loop %d: not closed cleanly", i);
	}
	/* a loop that failed to start is left to the process's exit */
	if (started == n)
		free(ls);
	return rc;
}
