/*
 * main.c - arguments, start-up, and the mode: FastCGI on the listening
 * socket inherited as fd 0 (lighttpd bin-path, mod_fcgid, spawn-fcgi), on a
 * socket of our own (--listen, for nginx and Apache mod_proxy_fcgi), both
 * served by the event loops of loop.c; or plain CGI when fd 0 is no
 * socket: one request on one loop, then exit.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "app.h"
#include "clock.h"
#include "config.h"
#include "config_load.h"
#include "config_print.h"
#include "digest.h"
#include "idem.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "provider_http.h"
#include "redis.h"
#include "spill.h"
#include "util.h"
#include "worker.h"

extern char **environ;

#define LISTEN_BACKLOG 1024 /* connections the kernel queues for us */

/* The loaded configuration: read-only once the loops start. */
static struct config cfg;
static struct auth_table auth;

/* --- plain CGI: one request -------------------------------------------- */

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

static void
on_cgi_done(struct exchange *x)
{
	*(int *)x->transport = 1;
}

/*
 * Reads the request from the environment and stdin (blocking: this process
 * serves only it), runs the use case on a loop of its own, writes the
 * response to stdout.
 */
static int
serve_cgi(void)
{
	struct request_source src = { environ, cgi_read, NULL, 0 };
	struct response_sink sink = { cgi_write, NULL };
	struct exchange x;
	struct worker w;
	uv_loop_t loop;
	long long dur;
	int done = 0, rc = 1;

	memset(&x, 0, sizeof(x));
	response_init(&x.resp);
	src.ctx = &src.deadline_us;
	src.deadline_us = now_mono_us() + 1000LL * cfg.request_timeout_ms;
	if (uv_loop_init(&loop) != 0)
		return 1;
	if (worker_init(&w, &cfg, &auth, &loop, 0) != 0)
		goto out;
	x.w = &w;
	x.done = on_cgi_done;
	x.transport = &done;
	if (request_read(&x.req, &src, (size_t)cfg.max_request_bytes, 1) != 0) {
		response_problem(&x.resp, PROB_INTERNAL, NULL, NULL);
		done = 1;
	} else
		app_handle(&x);
	while (!done && uv_run(&loop, UV_RUN_ONCE) != 0)
		;
	if (!done) {
		response_problem(&x.resp, PROB_INTERNAL, NULL, NULL);
		log_error(x.req.request_id, "the request never finished");
	}
	if (response_send(&x.resp, x.req.request_id, &sink,
	        x.req.method != NULL && strcmp(x.req.method, "HEAD") == 0) != 0)
		log_warn(x.req.request_id,
		    "client went away before the response was written");
	dur = now_mono_us() - x.req.start_us;
	metrics_request(x.resp.outcome, dur);
	log_info(x.req.request_id, "%s %s %d %s %.1fms",
	    x.req.method != NULL ? x.req.method : "-", x.req.path,
	    x.resp.status, x.resp.outcome != NULL ? x.resp.outcome : "-",
	    (double)dur / 1000.0);
	worker_close(&w);
	rc = 0;
out:
	(void)uv_run(&loop, UV_RUN_DEFAULT); /* close callbacks */
	(void)uv_loop_close(&loop);
	response_free(&x.resp);
	request_free(&x.req);
	return rc;
}

/* --- sockets ------------------------------------------------------------ */

/* 1 when fd is a listening socket (FastCGI's fd 0), else 0: CGI. */
static int
fd_is_listener(int fd)
{
	int v = 0;
	socklen_t len = sizeof(v);

	return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 &&
	    v != 0;
}

/* A unix socket at path (a stale socket there is replaced). -1: errno. */
static int
listen_unix(const char *path)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		(void)unlink(path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, LISTEN_BACKLOG) != 0) {
		(void)close(fd);
		return -1;
	}
	return fd;
}

/* HOST:PORT, [V6]:PORT or :PORT (every address). -1: errno or EAI. */
static int
listen_tcp(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints, *ai = NULL, *a;
	size_t hl = (size_t)(colon - addr);
	int fd = -1, on = 1;

	if (hl >= sizeof(host))
		return -1;
	memcpy(host, addr, hl);
	host[hl] = '\0';
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (getaddrinfo(host[0] != '\0' ? host : NULL, colon + 1, &hints,
	        &ai) != 0)
		return -1;
	for (a = ai; a != NULL; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC,
		    a->ai_protocol);
		if (fd < 0)
			continue;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) ==
		        0 &&
		    bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
		    listen(fd, LISTEN_BACKLOG) == 0)
			break;
		(void)close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

/* --listen ADDR: a unix socket path, or HOST:PORT. */
static int
listen_open(const char *addr)
{
	if (addr[0] == '/' || strchr(addr, ':') == NULL)
		return listen_unix(addr);
	return listen_tcp(addr);
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
	char err[256];
	int rc;

	rc = redis_startup_check(&cfg.redis, cfg.redis_timeout_ms, err,
	    sizeof(err));
	if (rc < 0)
		log_error(NULL, "%s", err);
	else if (rc > 0)
		log_warn(NULL,
		    "Redis is not reachable at start-up (%s); /charge answers 503 until it is",
		    err);
	return rc < 0 ? -1 : 0;
}

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: charge [--listen HOST:PORT|/path.sock] [--check-config]\n"
	    "       charge --help | --version\n"
	    "\n"
	    "FastCGI responder for POST /charge, an idempotent payment endpoint.\n"
	    "\n"
	    "Modes:\n"
	    "  (no option)     serve the FastCGI socket on fd 0 (lighttpd, mod_fcgid,\n"
	    "                  spawn-fcgi), or one CGI request when fd 0 is no socket\n"
	    "  --listen ADDR   open and serve ADDR (HOST:PORT or a unix socket path)\n"
	    "  --check-config  print the effective configuration and exit\n"
	    "  --help          this text\n"
	    "  --version       the version\n"
	    "\n"
	    "Configuration: $CHARGE_CONF (default %s),\n"
	    "each key overridable by CHARGE_<KEY>. SIGTERM, SIGINT, SIGUSR1 or SIGHUP\n"
	    "finish the requests in flight (at most drain_timeout_ms), then exit.\nSee charge(8).\n",
	    config_default_path(environ));
}

/* Blocks the stop signals in every thread: the main thread waits for them. */
static int
block_stop_signals(void)
{
	sigset_t block;

	return sigemptyset(&block) != 0 || sigaddset(&block, SIGTERM) != 0 ||
	        sigaddset(&block, SIGINT) != 0 ||
	        sigaddset(&block, SIGUSR1) != 0 ||
	        sigaddset(&block, SIGHUP) != 0 ||
	        pthread_sigmask(SIG_BLOCK, &block, NULL) != 0
	    ? -1
	    : 0;
}

int
main(int argc, char **argv)
{
	const char *listen_addr = NULL;
	char err[512], pool[16];
	int check_only = 0, i, listen_fd = 0, rc = 1;

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
	if (provider_http_global_init() != 0) {
		log_error(NULL, "libcurl cannot be initialised");
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
	loop_spill_gc(&cfg);
	/* libuv's I/O thread pool (spill files) is sized before its first use */
	(void)snprintf(pool, sizeof(pool), "%d", cfg.io_threads);
	if (setenv("UV_THREADPOOL_SIZE", pool, 1) != 0)
		goto done;
	/* a gone peer gives EPIPE, not a signal */
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		goto done;
	if (listen_addr == NULL && !fd_is_listener(STDIN_FILENO)) {
		rc = serve_cgi();
		goto done;
	}
	if (block_stop_signals() != 0)
		goto done;
	log_nonblocking();
	if (listen_addr != NULL) {
		if ((listen_fd = listen_open(listen_addr)) < 0) {
			log_error(NULL, "cannot listen on %s: %s", listen_addr,
			    strerror(errno));
			goto done;
		}
		log_info(NULL, "listening on %s", listen_addr);
	}
	if (startup_check_redis() != 0)
		goto done;
	rc =
	    loop_serve(&cfg, &auth, listen_fd, getenv("FCGI_WEB_SERVER_ADDRS"));
done:
	digest_thread_done();
	auth_free(&auth);
	return rc;
}
