/*
 * worker.c - what one event loop owns.
 */
#include <errno.h>
#include <string.h>

#include "log.h"
#include "provider.h"
#include "provider_http.h"
#include "worker.h"

int
worker_init(struct worker *w, const struct config *cfg,
    const struct auth_table *auth, uv_loop_t *loop, int id)
{
	char err[256];

	memset(w, 0, sizeof(*w));
	w->cfg = cfg;
	w->auth = auth;
	w->loop = loop;
	w->id = id;
	w->ledger_fd = -1;
	w->redis = redis_client_new(loop, &cfg->redis, cfg->redis_timeout_ms,
	    cfg->redis_min_replicas, cfg->redis_replica_timeout_ms);
	if (w->redis == NULL)
		return -1;
	if (cfg->provider_url[0] != '\0') {
		if ((w->provider = provider_http_new(loop, cfg, err,
		         sizeof(err))) == NULL) {
			log_error(NULL, "loop %d: %s", id, err);
			redis_client_free(w->redis);
			w->redis = NULL;
			return -1;
		}
		return 0;
	}
	if ((w->provider = provider_sim_new(loop, cfg, &w->ledger_fd)) ==
	    NULL) {
		redis_client_free(w->redis);
		w->redis = NULL;
		return -1;
	}
	if (provider_open(cfg->provider_ledger, &w->ledger_fd) != 0)
		log_warn(NULL, "loop %d: ledger %s: %s", id,
		    cfg->provider_ledger, strerror(errno));
	return 0;
}

int
worker_start_completer(struct worker *w)
{
	w->completer = completer_start(w->loop, w->cfg, w->redis, w->provider);
	return w->completer != NULL ? 0 : -1;
}

void
worker_close(struct worker *w)
{
	if (w == NULL)
		return;
	/* the completer and the provider's calls still use the client */
	completer_stop(w->completer);
	w->completer = NULL;
	provider_free(w->provider);
	w->provider = NULL;
	redis_client_free(w->redis);
	w->redis = NULL;
	provider_close(&w->ledger_fd);
}

void
worker_reconfigure(struct worker *w, const struct config *cfg,
    const struct auth_table *auth)
{
	if (strcmp(w->cfg->provider_api_key, cfg->provider_api_key) != 0 &&
	    provider_set_api_key(w->provider, cfg->provider_api_key) != 0)
		log_error(NULL,
		    "loop %d: reload: provider_api_key too long: the old one stays",
		    w->id);
	w->cfg = cfg;
	w->auth = auth;
}
