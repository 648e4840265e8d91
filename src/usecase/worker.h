/*
 * worker.h - everything one event loop owns: the loop, its Redis client
 * and ledger descriptor, with the configuration and API keys in force.
 * Every request the loop serves borrows them; none owns a thread. A
 * reload (SIGHUP) swaps the configuration on the loop's own thread
 * (worker_reconfigure); a request keeps the one it started with.
 */
#ifndef CHARGE_WORKER_H
#define CHARGE_WORKER_H

#include <uv.h>

#include "auth.h"
#include "completer.h"
#include "config.h"
#include "provider.h"
#include "redis.h"

struct worker {
	const struct config *cfg;
	const struct auth_table *auth;
	uv_loop_t *loop;
	struct redis_client *redis;
	int ledger_fd; /* the provider ledger, -1 until first used */
	struct provider *provider;   /* the simulation, or HTTP(S) */
	struct completer *completer; /* one loop per process: NULL elsewhere */
	int id;
	int draining; /* the process stops: /readyz answers 503 (loop's own) */
};

/*
 * Prepares w on loop for cfg->redis (connects lazily) and opens the
 * ledger, so that a later shortage of descriptors cannot stop it serving
 * (a failure is logged; the request path retries it). 0, or -1 on ENOMEM.
 */
int worker_init(struct worker *w, const struct config *cfg,
    const struct auth_table *auth, uv_loop_t *loop, int id);

/*
 * A reload, on w's loop: requests from now on see cfg and auth (the
 * caller keeps both alive until the process exits: the requests in flight
 * and the completer still read the old ones); a changed provider_api_key
 * goes to the provider's next calls. Only keys config_fixed_change lets
 * change may differ from the configuration in force.
 */
void worker_reconfigure(struct worker *w, const struct config *cfg,
    const struct auth_table *auth);

/*
 * Starts the completer of unknown outcomes on w's loop (one loop per
 * process). 0, or -1 on ENOMEM.
 */
int worker_start_completer(struct worker *w);

/*
 * NULL-safe: stops the completer, frees the provider (calls in flight get
 * their callbacks first), frees the Redis client (pending commands get
 * their callbacks first; from inside one of its callbacks, as when a loop
 * stops on the reply of its last request, on the loop's next turn:
 * redis.h) and closes the ledger. Run the loop afterwards until its
 * handles have closed.
 */
void worker_close(struct worker *w);

#endif
