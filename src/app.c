/*
 * app.c - the routes: /charge, /charge/keys/<key>, /healthz, /metrics, by
 * exact path or (the keys) by exact prefix.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "charge.h"
#include "introspect.h"
#include "log.h"
#include "metrics.h"
#include "spill.h"

static int
method_is_get(const char *m)
{
	return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

/*
 * Readiness: a PING on this worker's connection (bounded by
 * redis_timeout_ms) and the spill directory writable with room for a few
 * spilled bodies. 503 names the check that failed.
 */
static void
health_handle(struct worker *w, struct response *resp)
{
	const struct config *cfg = w->cfg;
	long long need =
	    HEALTH_SPILL_ROOM * (long long)cfg->spill_threshold_bytes;
	long long avail;
	int redis_ok = redis_ping(&w->redis) == 0;
	int spill_ok = spill_dir_writable(cfg->spill_dir);
	const char *spill = "ok";
	char body[160];
	int n;

	if (need < HEALTH_SPILL_ROOM_MIN_BYTES)
		need = HEALTH_SPILL_ROOM_MIN_BYTES;
	if (!spill_ok)
		spill = "not writable";
	else if ((avail = spill_dir_avail(cfg->spill_dir)) >= 0 &&
	    avail < need) {
		spill = "low on space";
		spill_ok = 0;
	}
	if (!redis_ok)
		log_warn(NULL, "healthz: redis: %s", w->redis.errstr);
	if (!spill_ok)
		log_warn(NULL, "healthz: spill_dir %s: %s", cfg->spill_dir,
		    spill);
	n = snprintf(body, sizeof(body),
	    "{\"status\":\"%s\",\"redis\":\"%s\",\"spill_dir\":\"%s\"}",
	    redis_ok && spill_ok ? "ok" : "unavailable",
	    redis_ok ? "ok" : "unreachable", spill);
	(void)response_copy_body(resp, redis_ok && spill_ok ? 200 : 503,
	    "application/json", body, (size_t)n);
	resp->outcome = OUTCOME_OK;
}

static void
metrics_handle(struct response *resp)
{
	size_t len = 0;
	char *text = metrics_render(&len);

	if (text == NULL) {
		response_problem(resp, PROB_INTERNAL, NULL, NULL);
		return;
	}
	response_set_body(resp, 200, "text/plain; version=0.0.4; charset=utf-8",
	    text, len);
	resp->outcome = OUTCOME_OK;
}

/* /charge checks its method itself (POST only, 405 with Allow: POST). */
static void
charge_route(struct worker *w, const struct request *req, struct response *resp)
{
	charge_handle(w, req, resp);
}

/* GET /charge/keys/<key>: the key is the rest of the path. */
static void
keys_route(struct worker *w, const struct request *req, struct response *resp)
{
	introspect_handle(w, req, req->path + strlen(INTROSPECT_PREFIX), resp);
}

static void
health_route(struct worker *w, const struct request *req, struct response *resp)
{
	(void)req;
	health_handle(w, resp);
}

static void
metrics_route(struct worker *w, const struct request *req,
    struct response *resp)
{
	(void)w;
	(void)req;
	metrics_handle(resp);
}

/*
 * Exact paths, or with prefix set every path that starts with it; a route
 * with methods set answers 405 to any other method.
 */
static const struct route {
	const char *path;
	int prefix;
	const char *methods; /* the Allow header; NULL: the handler checks */
	void (*handle)(struct worker *, const struct request *,
	    struct response *);
} routes[] = {
	{ "/charge", 0, NULL, charge_route },
	{ INTROSPECT_PREFIX, 1, "GET, HEAD", keys_route },
	{ "/healthz", 0, "GET, HEAD", health_route },
	{ "/metrics", 0, "GET, HEAD", metrics_route },
};

void
app_handle(struct worker *w, const struct request *req, struct response *resp)
{
	const struct route *r;
	size_t i;

	for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		r = &routes[i];
		if (r->prefix
		        ? strncmp(req->path, r->path, strlen(r->path)) != 0
		        : strcmp(req->path, r->path) != 0)
			continue;
		if (r->methods != NULL && !method_is_get(req->method)) {
			response_problem(resp, PROB_METHOD_NOT_ALLOWED,
			    "Use GET or HEAD on this path.", NULL);
			(void)response_header(resp, "Allow", "%s", r->methods);
			return;
		}
		r->handle(w, req, resp);
		return;
	}
	response_problem(resp, PROB_NOT_FOUND,
	    "No such resource. The API serves POST /charge, "
	    "GET /charge/keys/<idempotency-key>, GET /healthz and GET /metrics.",
	    NULL);
}
