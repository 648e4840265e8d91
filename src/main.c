/*
 * main.c - start-up, the accept loop and shutdown.
 *
 * Modes: FastCGI on the listening socket inherited as fd 0 (lighttpd
 * bin-path, mod_fcgid); FastCGI on a socket of our own (--listen, for nginx
 * and spawn-fcgi); or plain CGI when fd 0 is no socket: one request, exit.
 * In FastCGI mode `threads` workers accept concurrently, each with its own
 * Redis connection. The main thread only waits for signals: SIGTERM, SIGINT,
 * SIGUSR1 and SIGHUP finish the requests in hand, then exit. Idle workers
 * are woken by shutting the listening socket down, not by a signal: a signal
 * would also interrupt a worker that has just accepted a connection and is
 * reading its params inside libfcgi, which does not retry after EINTR.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fcgiapp.h>

#include "app.h"
#include "clock.h"
#include "config.h"
#include "config_load.h"
#include "config_print.h"
#include "digest.h"
#include "idem.h"
#include "log.h"
#include "metrics.h"
#include "spill.h"
#include "util.h"

extern char **environ;

#define LISTEN_BACKLOG 128
#define ACCEPT_RETRY_MS 100 /* pause after accept failed for resources */
#define GC_INTERVAL_S 3600  /* spill garbage collection period */

/* The loaded configuration: read-only once the workers start. */
static struct config cfg;
static struct auth_table auth;

/*
 * Set by the main thread (which takes the stop signals with sigtimedwait,
 * not in a handler) and read by the workers: an atomic, not a
 * volatile sig_atomic_t, because it crosses threads.
 */
static int stopping;

struct worker_thread {
	pthread_t tid;
	struct worker w;
	int listen_fd;
	int listen_unix;   /* the listener is AF_UNIX (see worker_main) */
	int done;          /* atomic: loop ended */
	long long next_gc; /* worker 0 only */
};

/* --- FastCGI and CGI adapters to request_source / response_sink ------- */

static long
fcgi_read(void *ctx, char *buf, size_t n)
{
	FCGX_Request *r = ctx;
	int len = n > (size_t)INT32_MAX ? INT32_MAX : (int)n, got, e;

	got = FCGX_GetStr(buf, len, r->in);
	if (got == 0) {
		/*
		 * SO_RCVTIMEO on the connection: the read timed out. A stop
		 * and continue (SIGSTOP, SIGCONT) interrupts a read on such a
		 * socket with EINTR even without a handler (signal(7)), and
		 * libfcgi's stream does not resume after an error: the body
		 * did not arrive in time either way.
		 */
		e = FCGX_GetError(r->in);
		if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR)
			return READ_TIMED_OUT;
	}
	return got;
}

static int
fcgi_write(void *ctx, const char *p, size_t n)
{
	FCGX_Request *r = ctx;

	while (n > 0) {
		int len = n > (size_t)INT32_MAX ? INT32_MAX : (int)n;

		if (FCGX_PutStr(p, len, r->out) != len)
			return -1;
		p += len;
		n -= (size_t)len;
	}
	return 0;
}

/* ctx: the request's deadline (monotonic microseconds). */
static long
cgi_read(void *ctx, char *buf, size_t n)
{
	const long long *deadline_us = ctx;
	struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
	long long left_ms;
	ssize_t r;
	int p;

	do {
		left_ms = (*deadline_us - now_mono_us() + 999) / 1000;
		if (left_ms <= 0)
			return READ_TIMED_OUT;
		p = poll(&pfd, 1,
		    left_ms > INT32_MAX ? INT32_MAX : (int)left_ms);
	} while (p < 0 && errno == EINTR);
	if (p == 0)
		return READ_TIMED_OUT;
	do
		r = read(STDIN_FILENO, buf, n);
	while (r < 0 && errno == EINTR);
	return (long)r;
}

static int
cgi_write(void *ctx, const char *p, size_t n)
{
	(void)ctx;
	return util_write_all(STDOUT_FILENO, p, n);
}

/* --- one request ------------------------------------------------------ */

/* Serves one request. 1 when its body was read to the declared end. */
static int
serve_one(struct worker *w, struct request_source *src,
    const struct response_sink *sink, int drain)
{
	struct request req;
	struct response resp;
	long long dur;
	int body_read;

	response_init(&resp);
	src->deadline_us = now_mono_us() + 1000LL * cfg.request_timeout_ms;
	if (request_read(&req, src, (size_t)cfg.max_request_bytes, drain) !=
	    0) {
		response_problem(&resp, PROB_INTERNAL, NULL, NULL);
		(void)response_send(&resp, "-", sink, 0);
		response_free(&resp);
		request_free(&req);
		return 0;
	}
	body_read = req.body_status == BODY_OK;
	app_handle(w, &req, &resp);
	if (response_send(&resp, req.request_id, sink,
	        strcmp(req.method, "HEAD") == 0) != 0)
		log_warn(req.request_id,
		    "client went away before the response "
		    "was written");
	dur = now_mono_us() - req.start_us;
	metrics_request(resp.outcome, dur);
	log_info(req.request_id, "%s %s %d %s %.1fms", req.method, req.path,
	    resp.status, resp.outcome != NULL ? resp.outcome : "-",
	    (double)dur / 1000.0);
	response_free(&resp);
	request_free(&req);
	return body_read;
}

/*
 * 1 when the web server has sent its whole input and it has all been read:
 * the end of the stdin stream follows the body at once (FastCGI), and it
 * is usually in libfcgi's buffer already. Read only after a complete body:
 * after a refused or stalled one the web server may still be sending.
 */
static int
fcgi_input_ended(FCGX_Request *r, int body_read)
{
	return body_read && FCGX_GetChar(r->in) == EOF &&
	    FCGX_HasSeenEOF(r->in) == EOF && FCGX_GetError(r->in) == 0;
}

static void
spill_gc_run(void)
{
	long ttl = cfg.completed_ttl_s > cfg.failed_ttl_s ? cfg.completed_ttl_s
	                                                  : cfg.failed_ttl_s;
	int n;

	/* a record lives at most its TTL after the file was written */
	n = spill_gc(cfg.spill_dir, ttl + cfg.lock_ttl_s, cfg.lock_ttl_s);
	if (n < 0)
		log_warn(NULL, "spill gc: cannot read %s", cfg.spill_dir);
	else if (n > 0)
		log_info(NULL, "spill gc: removed %d file(s)", n);
}

/* --- FastCGI workers --------------------------------------------------- */

/* Sets SO_RCVTIMEO on fd to request_timeout_ms. 0 or -1. */
static int
set_read_timeout(int fd)
{
	struct timeval tv;

	tv.tv_sec = cfg.request_timeout_ms / 1000;
	tv.tv_usec = (cfg.request_timeout_ms % 1000) * 1000;
	return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* Accept failures that pass: out of descriptors, buffers or memory. */
static int
accept_error_transient(int err)
{
	return err == EMFILE || err == ENFILE || err == ENOBUFS ||
	    err == ENOMEM;
}

static void *
worker_main(void *arg)
{
	struct worker_thread *t = arg;
	struct request_source src;
	struct response_sink sink;
	FCGX_Request req;
	int rc, err, transient = 0, body_read;

	if (FCGX_InitRequest(&req, t->listen_fd, 0) != 0) {
		log_error(NULL, "worker %d: FCGX_InitRequest failed", t->w.id);
		goto out;
	}
	worker_warm(&t->w);
	memset(&src, 0, sizeof(src));
	src.read = fcgi_read;
	src.ctx = &req;
	sink.write = fcgi_write;
	sink.ctx = &req;
	while (!__atomic_load_n(&stopping, __ATOMIC_SEQ_CST)) {
		/* a request accepted here is served even if a stop comes now */
		if ((rc = FCGX_Accept_r(&req)) < 0) {
			err = -rc;
			if (__atomic_load_n(&stopping, __ATOMIC_SEQ_CST))
				break;
			/* the listener's SO_RCVTIMEO ended an idle accept() */
			if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
				continue;
			if (accept_error_transient(err)) {
				if (transient++ == 0)
					log_error(NULL,
					    "worker %d: accept: %s; "
					    "retrying every %d ms",
					    t->w.id, strerror(err),
					    ACCEPT_RETRY_MS);
				sleep_ms(ACCEPT_RETRY_MS);
				continue;
			}
			log_error(NULL,
			    "worker %d: accept failed (%d: %s); this "
			    "worker stops",
			    t->w.id, rc,
			    rc < -1 && rc > -4096 ? strerror(err)
			                          : "libfcgi error");
			break;
		}
		if (transient > 0) {
			log_info(NULL,
			    "worker %d: accepting again after %d "
			    "failed attempt(s)",
			    t->w.id, transient);
			transient = 0;
		}
		/*
		 * Bounds the body read. An accepted TCP connection inherits
		 * the listener's SO_RCVTIMEO (serve_fastcgi); a unix one
		 * does not.
		 */
		if (t->listen_unix && set_read_timeout(req.ipcFd) != 0)
			log_warn(NULL, "SO_RCVTIMEO: %s", strerror(errno));
		src.envp = req.envp;
		body_read = serve_one(&t->w, &src, &sink, 0);
		/*
		 * libfcgi closes a connection with shutdown(SHUT_WR), then
		 * waits in poll() and read() until the web server closes its
		 * end, so that the web server can finish sending and a
		 * close() with unread input (a RST on TCP) cannot destroy the
		 * response in its buffers. On a unix socket, once the whole
		 * input has been read, nothing is left to wait for: such a
		 * request is detached and closed with close() alone, three
		 * system calls fewer (one of them a wait). A refused body
		 * (413), a stalled one (408) and TCP keep libfcgi's way. The
		 * mark is set for each request anew: on a connection the web
		 * server keeps open (FCGI_KEEP_CONN) it would outlive this one.
		 */
		if (t->listen_unix && fcgi_input_ended(&req, body_read))
			(void)FCGX_Detach(&req);
		else
			(void)FCGX_Attach(&req);
		FCGX_Finish_r(&req);
		if (t->w.id == 0 && time(NULL) >= t->next_gc) {
			spill_gc_run();
			t->next_gc = time(NULL) + GC_INTERVAL_S;
		}
	}
	FCGX_Free(&req, 0);
out:
	digest_thread_done(); /* this thread's contexts */
	__atomic_store_n(&t->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
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

static int
serve_fastcgi(int listen_fd)
{
	struct worker_thread *ts = NULL;
	sigset_t stopset;
	struct timespec poll;
	int i, n = 0, alive, sig = 0, rc = 1, is_unix;

	/*
	 * Accepted TCP connections inherit SO_RCVTIMEO from the listener, so
	 * the params libfcgi reads inside FCGX_Accept_r are bounded too; idle
	 * accept() calls wake up that often and go back to waiting.
	 */
	if (set_read_timeout(listen_fd) != 0)
		log_warn(NULL, "SO_RCVTIMEO on the listening socket: %s",
		    strerror(errno));
	is_unix = socket_is_unix(listen_fd);
	if ((ts = calloc((size_t)cfg.threads, sizeof(*ts))) == NULL)
		return 1;
	for (i = 0; i < cfg.threads; i++) {
		ts[i].listen_fd = listen_fd;
		ts[i].listen_unix = is_unix;
		ts[i].next_gc = time(NULL) + GC_INTERVAL_S;
		worker_init(&ts[i].w, &cfg, &auth, i);
		if (pthread_create(&ts[i].tid, NULL, worker_main, &ts[i]) !=
		    0) {
			log_error(NULL, "pthread_create failed");
			worker_close(&ts[i].w);
			goto stop;
		}
		n++;
	}
	log_info(NULL, "serving FastCGI with %d worker thread(s)", n);
	rc = 0;
	if (sigemptyset(&stopset) != 0 || sigaddset(&stopset, SIGTERM) != 0 ||
	    sigaddset(&stopset, SIGINT) != 0 ||
	    sigaddset(&stopset, SIGUSR1) != 0 ||
	    sigaddset(&stopset, SIGHUP) != 0)
		goto stop;
	poll.tv_sec = 0;
	poll.tv_nsec = 200 * 1000000L;
	for (;;) {
		sig = sigtimedwait(&stopset, NULL, &poll);
		if (sig > 0) {
			log_info(NULL, "signal %d: finishing requests in hand",
			    sig);
			break;
		}
		for (alive = 0, i = 0; i < n; i++)
			alive +=
			    !__atomic_load_n(&ts[i].done, __ATOMIC_SEQ_CST);
		if (alive == 0) {
			log_error(NULL,
			    "every worker's accept loop ended: the "
			    "process exits");
			rc = 1;
			break;
		}
	}
stop:
	__atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
	FCGX_ShutdownPending();
	/*
	 * Wakes every worker blocked in accept() (it fails with EINVAL) and
	 * leaves the connections already accepted alone: their params and
	 * bodies are read to the end and answered. Under lighttpd and
	 * mod_fcgid each process has a listening socket of its own; processes
	 * forked by spawn-fcgi -F share one, so stop those together.
	 */
	if (n > 0 && shutdown(listen_fd, SHUT_RD) != 0 && errno != ENOTCONN)
		log_warn(NULL, "shutdown of the listening socket: %s",
		    strerror(errno));
	for (i = 0; i < n; i++) {
		(void)pthread_join(ts[i].tid, NULL);
		worker_close(&ts[i].w);
	}
	free(ts);
	return rc;
}

/* --- start-up ---------------------------------------------------------- */

/*
 * Connects to Redis once before serving, so that a Redis that may evict
 * records stops the start (every new connection checks it again). An
 * unreachable Redis does not: requests get 503 until it answers.
 */
static int
startup_check_redis(void)
{
	struct worker w;
	int rc = 0;

	worker_init(&w, &cfg, &auth, -1);
	if (redis_ping(&w.redis) != 0) {
		if (w.redis.evicting) {
			log_error(NULL, "%s", w.redis.errstr);
			rc = -1;
		} else
			log_warn(NULL,
			    "Redis is not reachable at start-up (%s); "
			    "/charge answers 503 until it is",
			    w.redis.errstr);
	}
	worker_close(&w);
	return rc;
}

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: charge [--listen HOST:PORT|/path.sock] "
	    "[--check-config]\n"
	    "       charge --help | --version\n"
	    "\n"
	    "FastCGI responder for POST /charge, an idempotent payment "
	    "endpoint.\n"
	    "\n"
	    "Modes:\n"
	    "  (no option)     serve the FastCGI socket on fd 0 (lighttpd, "
	    "mod_fcgid,\n"
	    "                  spawn-fcgi), or one CGI request when fd 0 is "
	    "no socket\n"
	    "  --listen ADDR   open and serve ADDR (HOST:PORT or a unix "
	    "socket path)\n"
	    "  --check-config  print the effective configuration and exit\n"
	    "  --help          this text\n"
	    "  --version       the version\n"
	    "\n"
	    "Configuration: $CHARGE_CONF (default %s),\n"
	    "each key overridable by CHARGE_<KEY>. SIGTERM, SIGINT, SIGUSR1 "
	    "or SIGHUP\n"
	    "finish the requests in hand, then exit. See charge(8).\n",
	    config_default_path(environ));
}

int
main(int argc, char **argv)
{
	const char *listen_addr = NULL;
	char err[512];
	int check_only = 0, i, listen_fd = 0, rc = 1;
	sigset_t block;
	struct worker w;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc)
			listen_addr = argv[++i];
		else if (strcmp(argv[i], "--check-config") == 0)
			check_only = 1;
		else if (strcmp(argv[i], "--version") == 0) {
			printf("charge %s\n", CHARGE_VERSION);
			return 0;
		} else if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (config_load(&cfg, config_default_path(environ), environ, err,
	        sizeof(err)) != 0) {
		fprintf(stderr, "charge: configuration: %s\n", err);
		return 1;
	}
	log_set_level(cfg.log_level);
	if (auth_load(&auth, cfg.api_keys_file, err, sizeof(err)) != 0) {
		fprintf(stderr, "charge: api_keys_file: %s\n", err);
		return 1;
	}
	if (check_only) {
		config_print(&cfg, stdout);
		printf("# %zu API key(s) loaded\n", auth.n);
		auth_free(&auth);
		return 0;
	}
	if (digest_init() != 0 || idem_init() != 0) {
		log_error(NULL, "OpenSSL digests unavailable");
		goto done;
	}
	if (spill_dir_create(cfg.spill_dir) != 0) {
		log_error(NULL, "spill_dir %s: %s", cfg.spill_dir,
		    strerror(errno));
		goto done;
	}
	if (metrics_open(cfg.metrics_file) != 0 &&
	    strcmp(cfg.metrics_file, "none") != 0 &&
	    cfg.metrics_file[0] != '\0')
		log_warn(NULL,
		    "metrics_file %s unusable: counters are per process",
		    cfg.metrics_file);
	spill_gc_run();

	/*
	 * No fast bins: libfcgi allocates 8 KiB stream buffers for every
	 * request, and each allocation that large first consolidates the
	 * fast bins (glibc malloc), so the small chunks the per-thread cache
	 * cannot hold were merged once per request anyway. Without them
	 * those chunks go to the regular bins directly (callgrind: 1 000
	 * instructions fewer per replayed request, 570 per fresh one).
	 */
	if (mallopt(M_MXFAST, 0) != 1)
		log_warn(NULL, "mallopt(M_MXFAST, 0) failed");
	/* SIGPIPE ignored before FCGX_Init: a gone peer gives EPIPE */
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		goto done;
	if (listen_addr == NULL && FCGX_IsCGI()) {
		struct request_source src = { environ, cgi_read, NULL, 0 };
		struct response_sink sink = { cgi_write, NULL };

		src.ctx = &src.deadline_us; /* set by serve_one */

		worker_init(&w, &cfg, &auth, 0);
		(void)serve_one(&w, &src, &sink, 1);
		worker_close(&w);
		rc = 0;
		goto done;
	}
	/* stop signals go to the main thread only (sigtimedwait) */
	if (sigemptyset(&block) != 0 || sigaddset(&block, SIGTERM) != 0 ||
	    sigaddset(&block, SIGINT) != 0 || sigaddset(&block, SIGUSR1) != 0 ||
	    sigaddset(&block, SIGHUP) != 0 ||
	    pthread_sigmask(SIG_BLOCK, &block, NULL) != 0)
		goto done;
	if (FCGX_Init() != 0) {
		log_error(NULL, "FCGX_Init failed");
		goto done;
	}
	if (listen_addr != NULL) {
		/* note: libfcgi exits the process if bind() fails */
		listen_fd = FCGX_OpenSocket(listen_addr, LISTEN_BACKLOG);
		if (listen_fd < 0) {
			log_error(NULL, "cannot listen on %s", listen_addr);
			goto done;
		}
		log_info(NULL, "listening on %s", listen_addr);
	}
	if (startup_check_redis() != 0)
		goto done;
	rc = serve_fastcgi(listen_fd);
done:
	auth_free(&auth);
	return rc;
}
