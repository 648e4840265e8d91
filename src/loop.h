/*
 * loop.h - the event loops of one FastCGI process and their shutdown.
 */
#ifndef CHARGE_LOOP_H
#define CHARGE_LOOP_H

#include "auth.h"
#include "config.h"

/*
 * Serves FastCGI on the listening socket listen_fd with cfg->threads event
 * loops (0: one per core) until SIGTERM, SIGINT, SIGUSR1 or SIGHUP (which
 * the caller has blocked in every thread), then drains and returns 0; 1
 * when serving could not start or every loop ended by itself. allow: the
 * FCGI_WEB_SERVER_ADDRS list (NULL or "": any address may connect over
 * TCP).
 */
int loop_serve(const struct config *cfg, const struct auth_table *auth,
    int listen_fd, const char *allow);

/* One pass of spill garbage collection (blocking: start-up, worker pool). */
void loop_spill_gc(const struct config *cfg);

#endif
