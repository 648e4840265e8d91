/*
 * worker.c - what one worker thread owns.
 */
#include <errno.h>
#include <string.h>

#include "digest.h"
#include "log.h"
#include "provider.h"
#include "worker.h"

void
worker_init(struct worker *w, const struct config *cfg,
    const struct auth_table *auth, int id)
{
	memset(w, 0, sizeof(*w));
	w->cfg = cfg;
	w->auth = auth;
	w->id = id;
	w->ledger_fd = -1;
	redis_conn_init(&w->redis, &cfg->redis, cfg->redis_timeout_ms);
	redis_conn_set_wait(&w->redis, cfg->redis_min_replicas,
	    cfg->redis_replica_timeout_ms);
}

void
worker_close(struct worker *w)
{
	if (w == NULL)
		return;
	redis_conn_close(&w->redis);
	provider_close(&w->ledger_fd);
	digest_thread_done();
}

void
worker_warm(struct worker *w)
{
	if (redis_ping(&w->redis) != 0)
		log_warn(NULL, "worker %d: redis: %s", w->id, w->redis.errstr);
	if (provider_open(w->cfg->provider_ledger, &w->ledger_fd) != 0)
		log_warn(NULL, "worker %d: ledger %s: %s", w->id,
		    w->cfg->provider_ledger, strerror(errno));
}
