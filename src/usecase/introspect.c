/*
 * introspect.c - GET /charge/keys/<idempotency-key>. Authenticated and
 * scoped like POST /charge: the record looked up is the caller's own, so
 * another principal's key is as absent as one never used (404, not 403).
 * One read-only round trip (lua/lookup.lua); the body is never read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "headers.h"
#include "idem.h"
#include "introspect.h"
#include "auth.h"
#include "worker.h"
#include "log.h"
#include "metrics.h"
#include "timefmt.h"

#define JSON_CTYPE "application/json"

static int
add_time(cJSON *o, const char *name, long long ms)
{
	char buf[RFC3339_MS_LEN + 1];

	if (ms <= 0 || timefmt_rfc3339_ms(ms, buf, sizeof(buf)) != 0)
		return cJSON_AddNullToObject(o, name) != NULL ? 0 : -1;
	return cJSON_AddStringToObject(o, name, buf) != NULL ? 0 : -1;
}

char *
introspect_render(const char *key, const struct idem_info *info,
    long long expires_ms, size_t *len)
{
	cJSON *o;
	char *out = NULL;
	int in_progress = strcmp(info->state, "in_progress") == 0;

	if ((o = cJSON_CreateObject()) == NULL)
		return NULL;
	if (cJSON_AddStringToObject(o, "key", key) == NULL ||
	    cJSON_AddStringToObject(o, "state", info->state) == NULL ||
	    add_time(o, "created", info->created_ms) != 0 ||
	    /* a claim's last update is its creation */
	    add_time(o, "updated",
	        in_progress ? info->created_ms : info->updated_ms) != 0 ||
	    add_time(o, "expires", expires_ms) != 0 ||
	    (in_progress ? cJSON_AddNullToObject(o, "status")
	                 : cJSON_AddNumberToObject(o, "status",
	                       info->status)) == NULL)
		goto done;
	if ((out = cJSON_PrintUnformatted(o)) != NULL)
		*len = strlen(out);
done:
	cJSON_Delete(o);
	return out;
}

/*
 * When the record expires, as the Idempotency-Key-Expires header of the
 * responses it gives says: a claim lapses lock_ttl_s after it was made; an
 * outcome at its stored expires_ms (older records: now + the TTL left).
 */
static long long
info_expires_ms(const struct worker *w, const struct idem_info *info)
{
	if (strcmp(info->state, "in_progress") == 0)
		return info->created_ms + 1000LL * w->cfg->lock_ttl_s;
	if (info->expires_ms > 0)
		return info->expires_ms;
	return info->pttl_ms > 0 ? now_wall_ms() + info->pttl_ms : 0;
}

/* A lookup waiting for its reply: the decoded key travels with it. */
struct lookup {
	struct exchange *x;
	size_t keylen;
	char key[IDEM_KEY_MAX + 1];
};

static void
on_lookup_reply(struct idem_result *res, void *arg)
{
	struct lookup *lk = arg;
	struct exchange *x = lk->x;
	struct response *resp = &x->resp;
	size_t len = 0;
	char *body;

	switch (res->st) {
	case IDEM_FOUND:
		body = introspect_render(lk->key, &res->info,
		    info_expires_ms(x->w, &res->info), &len);
		if (body == NULL) {
			response_problem(resp, PROB_INTERNAL, NULL, NULL);
			break;
		}
		response_set_body(resp, 200, JSON_CTYPE, body, len);
		resp->outcome = OUTCOME_KEY_FOUND;
		break;
	case IDEM_ABSENT:
		response_problem(resp, PROB_KEY_NOT_FOUND,
		    "No live record exists for this Idempotency-Key.", NULL);
		break;
	default:
		metrics_inc(MC_REDIS_ERRORS);
		log_warn(x->req.request_id, "idempotency store unavailable: %s",
		    res->errstr != NULL ? res->errstr : "?");
		response_problem(resp, PROB_UNAVAILABLE,
		    "The idempotency store is unavailable. Retry later.", NULL);
		(void)response_header(resp, "Retry-After", "%d",
		    RETRY_AFTER_UNAVAILABLE_S);
		break;
	}
	free(lk);
	exchange_finish(x);
}

void
introspect_handle(struct exchange *x, const char *seg)
{
	struct worker *w = x->w;
	struct response *resp = &x->resp;
	char rkey[IDEM_RKEY_MAX];
	const char *principal;
	struct lookup *lk = NULL;

	principal = auth_principal(w->auth, x->req.authorization);
	if (principal == NULL) {
		response_problem(resp, PROB_UNAUTHORIZED,
		    "Send a valid API key as Authorization: Bearer <key>.",
		    NULL);
		(void)response_header(resp, "WWW-Authenticate", "Bearer");
		goto answer;
	}
	if ((lk = calloc(1, sizeof(*lk))) == NULL) {
		response_problem(resp, PROB_INTERNAL, NULL, NULL);
		goto answer;
	}
	lk->x = x;
	if (idem_key_from_path(seg, lk->key, &lk->keylen) != KEY_OK) {
		/* an empty key too: there is no list of keys to show */
		response_problem(resp, PROB_INVALID_KEY,
		    "Name the key as GET /charge/keys/<idempotency-key>: once percent-decoded, 1-255 visible ASCII characters (0x21-0x7E), bare or as a quoted Structured-Field string, with well-formed %-escapes.",
		    NULL);
		goto answer;
	}
	if (idem_key_name(rkey, sizeof(rkey), w->cfg->key_prefix, principal,
	        lk->key, lk->keylen) < 0 ||
	    idem_lookup(w->redis, rkey, on_lookup_reply, lk) != 0) {
		response_problem(resp, PROB_INTERNAL, NULL, NULL);
		goto answer;
	}
	return;
answer:
	free(lk);
	exchange_finish(x);
}
