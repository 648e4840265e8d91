/*
 * app.c - the routes: /charge, /charge/keys/<key>, /healthz (liveness),
 * /readyz (readiness), /metrics, by exact path or (the keys) by exact
 * prefix; and the provider's webhook path (provider_webhook_path) when a
 * secret is configured.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "app.h"
#include "charge.h"
#include "clock.h"
#include "idem.h"
#include "introspect.h"
#include "log.h"
#include "metrics.h"
#include "spill.h"
#include "webhook.h"
#include "worker.h"

static int
method_is_get(const char *m)
{
	return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

/* A readiness check waiting for its PING. */
struct ready {
	struct exchange *x;
	int spill_ok;
	const char *spill;
};

/* 503 problem+json naming what failed, the checks as extension members. */
static void
ready_refuse(struct exchange *x, int redis_ok, const char *spill, int draining)
{
	const char *detail;
	cJSON *ext = cJSON_CreateObject();

	/* the first check that failed; the members say which did */
	if (draining)
		detail = "Not ready: the process is draining (stopping).";
	else if (!redis_ok)
		detail = "Not ready: Redis is unreachable.";
	else if (strcmp(spill, "not writable") == 0)
		detail = "Not ready: spill_dir is not writable.";
	else
		detail = "Not ready: spill_dir is low on space.";
	if (ext != NULL &&
	    (cJSON_AddStringToObject(ext, "redis",
	         redis_ok ? "ok" : "unreachable") == NULL ||
	        cJSON_AddStringToObject(ext, "spill_dir", spill) == NULL ||
	        cJSON_AddBoolToObject(ext, "draining", draining) == NULL)) {
		cJSON_Delete(ext);
		ext = NULL;
	}
	response_problem(&x->resp, PROB_UNAVAILABLE, detail, ext);
	(void)response_header(&x->resp, "Retry-After", "%d",
	    RETRY_AFTER_UNAVAILABLE_S);
}

static void
ready_answer(struct ready *rc, int redis_ok, const char *redis_err)
{
	struct exchange *x = rc->x;
	static const char ok[] =
	    "{\"status\":\"ok\",\"redis\":\"ok\",\"spill_dir\":\"ok\",\"draining\":false}";
	int draining = x->w->draining;

	if (!redis_ok)
		log_warn(x->req.request_id, "readyz: redis: %s", redis_err);
	if (!rc->spill_ok)
		log_warn(x->req.request_id, "readyz: spill_dir %s: %s",
		    x->w->cfg->spill_dir, rc->spill);
	if (redis_ok && rc->spill_ok && !draining) {
		(void)response_copy_body(&x->resp, 200, "application/json", ok,
		    sizeof(ok) - 1);
		x->resp.outcome = OUTCOME_OK;
	} else
		ready_refuse(x, redis_ok, rc->spill, draining);
	free(rc);
	exchange_finish(x);
}

static void
on_ready_pong(const struct redis_result *res, void *arg)
{
	ready_answer(arg, res->reply != NULL, res->errstr);
}

/*
 * Readiness: a PING on this loop's Redis client (bounded by
 * redis_timeout_ms), the spill directory writable with room for a few
 * spilled bodies (two system calls: bounded, on the loop), and the process
 * not draining. 503 names the checks that failed.
 */
static void
ready_route(struct exchange *x)
{
	const struct config *cfg = x->w->cfg;
	long long need =
	    HEALTH_SPILL_ROOM * (long long)cfg->spill_threshold_bytes;
	long long avail;
	struct ready *rc;

	if ((rc = calloc(1, sizeof(*rc))) == NULL) {
		response_problem(&x->resp, PROB_INTERNAL, NULL, NULL);
		exchange_finish(x);
		return;
	}
	rc->x = x;
	rc->spill_ok = spill_dir_writable(cfg->spill_dir);
	rc->spill = "ok";
	if (need < HEALTH_SPILL_ROOM_MIN_BYTES)
		need = HEALTH_SPILL_ROOM_MIN_BYTES;
	if (!rc->spill_ok)
		rc->spill = "not writable";
	else if ((avail = spill_dir_avail(cfg->spill_dir)) >= 0 &&
	    avail < need) {
		rc->spill = "low on space";
		rc->spill_ok = 0;
	}
	if (redis_ping(x->w->redis, on_ready_pong, rc) != 0)
		ready_answer(rc, 0, "out of memory");
}

/* Liveness: the process serves requests (nothing else is checked). */
static void
live_route(struct exchange *x)
{
	static const char ok[] = "{\"status\":\"ok\"}";

	(void)response_copy_body(&x->resp, 200, "application/json", ok,
	    sizeof(ok) - 1);
	x->resp.outcome = OUTCOME_OK;
	exchange_finish(x);
}

static void
metrics_answer(struct exchange *x)
{
	size_t len = 0;
	char *text = metrics_render(&len);

	if (text == NULL)
		response_problem(&x->resp, PROB_INTERNAL, NULL, NULL);
	else {
		response_set_body(&x->resp, 200,
		    "text/plain; version=0.0.4; charset=utf-8", text, len);
		x->resp.outcome = OUTCOME_OK;
	}
	exchange_finish(x);
}

/*
 * The index's oldest entry (pending.lua 'oldest': when it was first named,
 * by Redis's clock) as an age at this scrape; not known (Redis down): the
 * gauge's sample is left out.
 */
static void
on_oldest(struct idem_result *res, void *arg)
{
	struct exchange *x = arg;
	long long age_s = -1;

	if (res->st == IDEM_DONE)
		age_s = res->due.first_ms > 0
		    ? (now_wall_ms() - res->due.first_ms) / 1000
		    : 0;
	metrics_unknown_oldest_age(age_s < -1 ? 0 : age_s);
	metrics_answer(x);
}

/* Prometheus text; one read of the unknown index first (redis_timeout_ms). */
static void
metrics_route(struct exchange *x)
{
	char index[KEY_PREFIX_MAX + 16];

	if (idem_index_name(index, sizeof(index), x->w->cfg->key_prefix) < 0 ||
	    idem_pending_oldest(x->w->redis, index, on_oldest, x) != 0) {
		metrics_unknown_oldest_age(-1);
		metrics_answer(x);
	}
}

/* /charge checks its method itself (POST only, 405 with Allow: POST). */
static void
charge_route(struct exchange *x)
{
	charge_handle(x);
}

/* GET /charge/keys/<key>: the key is the rest of the path. */
static void
keys_route(struct exchange *x)
{
	introspect_handle(x, x->req.path + strlen(INTROSPECT_PREFIX));
}

/*
 * Exact paths, or with prefix set every path that starts with it; a route
 * with methods set answers 405 to any other method.
 */
static const struct route {
	const char *path;
	int prefix;
	const char *methods; /* the Allow header; NULL: the handler checks */
	void (*handle)(struct exchange *x);
} routes[] = {
	{ "/charge", 0, NULL, charge_route },
	{ INTROSPECT_PREFIX, 1, "GET, HEAD", keys_route },
	{ "/healthz", 0, "GET, HEAD", live_route },
	{ "/readyz", 0, "GET, HEAD", ready_route },
	{ "/metrics", 0, "GET, HEAD", metrics_route },
};

void
app_handle(struct exchange *x)
{
	const struct request *req = &x->req;
	const struct route *r;
	size_t i;

	if (webhook_route_on(x->w->cfg, req->path)) {
		webhook_handle(x);
		return;
	}
	for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		r = &routes[i];
		if (r->prefix
		        ? strncmp(req->path, r->path, strlen(r->path)) != 0
		        : strcmp(req->path, r->path) != 0)
			continue;
		if (r->methods != NULL && !method_is_get(req->method)) {
			response_problem(&x->resp, PROB_METHOD_NOT_ALLOWED,
			    "Use GET or HEAD on this path.", NULL);
			(void)response_header(&x->resp, "Allow", "%s",
			    r->methods);
			exchange_finish(x);
			return;
		}
		r->handle(x);
		return;
	}
	response_problem(&x->resp, PROB_NOT_FOUND,
	    "No such resource. The API serves POST /charge, GET /charge/keys/<idempotency-key>, GET /healthz, GET /readyz and GET /metrics.",
	    NULL);
	exchange_finish(x);
}
