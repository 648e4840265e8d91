/*
 * loop.h - the event loops of one FastCGI process and their shutdown.
 */
#ifndef CHARGE_LOOP_H
#define CHARGE_LOOP_H

#include "auth.h"
#include "config.h"

/* A configuration and its API keys, in force together. */
struct loop_conf {
	const struct config *cfg;
	const struct auth_table *auth;
};

/*
 * A reload (SIGHUP), on the main thread: the configuration to put in
 * force, which must stay valid until the process exits; or NULL when it
 * is refused (the callback logs why: the one in force stays).
 */
typedef const struct loop_conf *loop_reload_fn(void *arg);

/*
 * Serves FastCGI on the listening socket listen_fd with conf->cfg->threads
 * event loops (0: one per core) until SIGTERM, SIGINT or SIGUSR1 (which
 * the caller has blocked in every thread, with SIGHUP), then drains and
 * returns 0; 1 when serving could not start or every loop ended by
 * itself. SIGHUP calls reload and hands what it returns to every loop
 * (worker_reconfigure). $NOTIFY_SOCKET hears READY=1, RELOADING=1 and
 * STOPPING=1. allow: the FCGI_WEB_SERVER_ADDRS list (NULL or "": any
 * address may connect over TCP).
 */
int loop_serve(const struct loop_conf *conf, int listen_fd, const char *allow,
    loop_reload_fn *reload, void *arg);

/* One pass of spill garbage collection (blocking: start-up, worker pool). */
void loop_spill_gc(const struct config *cfg);

#endif
