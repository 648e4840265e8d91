/*
 * server.h - HTTP/1.1 on one libuv loop with llhttp as the parser: kept-
 * alive connections, one request at a time per connection (pipelined bytes
 * wait), the group commit of the store before any answer of a loop turn
 * goes out, and the byte-level faults (FIN, RST, late, trickle).
 */
#ifndef SIM_SERVER_H
#define SIM_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "store.h"
#include "webhook.h"

struct sim_server_config {
	const char *listen; /* HOST:PORT, [V6]:PORT or unix:/path */
	unsigned late_ms;
	unsigned trickle_ms;
	unsigned idle_timeout_s;
	size_t max_connections;
	const struct sim_webhook_config *webhooks; /* NULL: none */
	int request_log_fd; /* --request-log: O_APPEND; -1: none */
};

/*
 * Listens, prints "charge-provider-sim: listening on ADDR" to stderr and
 * runs the loop until SIGTERM or SIGINT; then stops accepting, commits the
 * store and returns 0. -1 (with a message on stderr) when it cannot listen.
 */
int sim_server_run(const struct sim_server_config *cfg, struct sim_api *api,
    struct sim_store *store);

#endif
