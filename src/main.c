/*
 * main.c - arguments, start-up, and the mode: FastCGI on the listening
 * socket inherited as fd 0 (lighttpd bin-path, mod_fcgid, spawn-fcgi) or
 * passed by a service manager (LISTEN_FDS: systemd's charge.socket), on a
 * socket of our own (--listen, for nginx and Apache mod_proxy_fcgi; opened
 * by listen.c), both served by the event loops of loop.c; or plain CGI when
 * fd 0 is no socket: one request on one loop (cgi.c), then exit.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "cgi.h"
#include "config.h"
#include "config_load.h"
#include "config_print.h"
#include "digest.h"
#include "idem.h"
#include "listen.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "redis.h"
#include "spill.h"
#include "webhook_store.h"

extern char **environ;

/* The loaded configuration: read-only once the loops start. */
static struct config cfg;
static struct auth_table auth;

/*
 * What each accepted reload (SIGHUP) read: the configuration and API keys
 * then in force. Kept until the process exits, newest first: the requests
 * in flight, the completer and the provider go on reading the ones they
 * started with.
 */
struct generation {
	struct config cfg;
	struct auth_table auth;
	struct loop_conf conf;
	struct generation *prev;
};
static struct generation *reloaded;

/*
 * loop_reload_fn: charge.conf (and the CHARGE_* environment) and
 * api_keys_file again, all or nothing. A file that does not load, or a
 * key that cannot change live, is refused with one log line; the
 * configuration in force stays.
 */
static const struct loop_conf *
reload_config(void *arg)
{
	const struct config *now = reloaded != NULL ? &reloaded->cfg : &cfg;
	struct generation *g;
	const char *key;
	char err[512];

	(void)arg;
	if ((g = calloc(1, sizeof(*g))) == NULL) {
		log_error(NULL,
		    "reload refused: out of memory; the configuration in force stays");
		return NULL;
	}
	if (config_load(&g->cfg, config_default_path(environ), environ, err,
	        sizeof(err)) != 0) {
		log_error(NULL,
		    "reload refused: configuration: %s; the configuration in force stays",
		    err);
		goto refused;
	}
	if ((key = config_fixed_change(now, &g->cfg)) != NULL) {
		log_error(NULL,
		    "reload refused: %s cannot change while running (restart to change it); the configuration in force stays",
		    key);
		goto refused;
	}
	if (auth_load(&g->auth, g->cfg.api_keys_file, err, sizeof(err)) != 0) {
		log_error(NULL,
		    "reload refused: api_keys_file: %s; the configuration in force stays",
		    err);
		goto refused;
	}
	log_set_level(g->cfg.log_level);
	g->conf.cfg = &g->cfg;
	g->conf.auth = &g->auth;
	g->prev = reloaded;
	reloaded = g;
	log_info(NULL, "reload: configuration re-read, %zu API key(s)",
	    g->auth.n);
	return &g->conf;
refused:
	free(g);
	return NULL;
}

static void
reloaded_free(void)
{
	struct generation *g;

	while ((g = reloaded) != NULL) {
		reloaded = g->prev;
		auth_free(&g->auth);
		free(g);
	}
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
	    "  (no option)     serve the socket a service manager passed (LISTEN_FDS),\n"
	    "                  else the FastCGI socket on fd 0 (lighttpd, mod_fcgid,\n"
	    "                  spawn-fcgi), or one CGI request when fd 0 is no socket\n"
	    "  --listen ADDR   open and serve ADDR (HOST:PORT or a unix socket path),\n"
	    "                  unless a service manager passed a socket (LISTEN_FDS)\n"
	    "  --check-config  print the effective configuration and exit\n"
	    "  --help          this text\n"
	    "  --version       the version\n"
	    "\n"
	    "Configuration: $CHARGE_CONF (default %s),\n"
	    "each key overridable by CHARGE_<KEY>. SIGTERM, SIGINT or SIGUSR1 finish\n"
	    "the requests in flight (at most drain_timeout_ms), then exit; SIGHUP\n"
	    "re-reads the configuration and the API keys. See charge(8).\n",
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

/* The log's level and format, from the configuration. */
static void
log_setup(const struct config *c)
{
	log_set_level(c->log_level);
	log_set_format(log_format_parse(c->log_format));
}

/*
 * FastCGI on the socket passed (listen_fd) or, with listen_addr, on one of
 * our own, until a stop signal: the exit status.
 */
static int
serve_fastcgi(const char *listen_addr, int listen_fd)
{
	struct loop_conf conf = { &cfg, &auth };

	if (block_stop_signals() != 0)
		return 1;
	log_nonblocking();
	if (listen_addr != NULL) {
		if ((listen_fd = listen_open(listen_addr)) < 0) {
			log_error(NULL, "cannot listen on %s: %s", listen_addr,
			    strerror(errno));
			return 1;
		}
		log_info(NULL, "listening on %s", listen_addr);
	} else if (listen_fd != STDIN_FILENO)
		log_info(NULL, "serving the socket passed as descriptor %d",
		    listen_fd);
	if (startup_check_redis() != 0)
		return 1;
	return loop_serve(&conf, listen_fd, getenv("FCGI_WEB_SERVER_ADDRS"),
	    reload_config, NULL);
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
	log_setup(&cfg);
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
	if (digest_init() != 0 || idem_init() != 0 || wstore_init() != 0) {
		log_error(NULL, "OpenSSL digests unavailable");
		goto done;
	}
	/* provider_client is still read, so that configurations setting it load */
	if (cfg.provider_url[0] != '\0' &&
	    strcmp(cfg.provider_client, "libcurl") == 0)
		log_warn(NULL,
		    "provider_client = libcurl: libcurl is no longer built into the responder; its own HTTP/1.1 client is used");
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
	/* a socket the service manager holds (charge.socket) beats --listen */
	if ((listen_fd = listen_inherited(err, sizeof(err))) == -2) {
		log_error(NULL, "socket activation: %s", err);
		goto done;
	}
	if (listen_fd >= 0)
		listen_addr = NULL;
	else
		listen_fd = STDIN_FILENO;
	if (listen_addr == NULL && listen_fd == STDIN_FILENO &&
	    !listen_fd_is_listener(STDIN_FILENO)) {
		rc = cgi_serve(&cfg, &auth, environ);
		goto done;
	}
	rc = serve_fastcgi(listen_addr, listen_fd);
done:
	digest_thread_done();
	reloaded_free();
	auth_free(&auth);
	return rc;
}
