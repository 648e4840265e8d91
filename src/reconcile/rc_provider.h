/*
 * rc_provider.h - charge-reconcile's reads from the provider: GET requests
 * on provider_url (http, https, or unix:/path for HTTP on a unix socket,
 * as the responder's provider_url) with provider_api_key, through
 * libcurl's easy interface (a command-line tool waits for each page; the
 * responder's HTTP client lives on an event loop). Only GETs are sent.
 */
#ifndef CHARGE_RC_PROVIDER_H
#define CHARGE_RC_PROVIDER_H

#include <stddef.h>

#include "config.h"

#define RC_HTTP_TIMEOUT_MS 60000  /* one page or charge, start to end */
#define RC_HTTP_BODY_MAX 16777216 /* 16 MiB: 100 charges at their largest */
#define RC_HTTP_ATTEMPTS 4        /* per GET: transport errors, 429, 5xx */
#define RC_HTTP_BACKOFF_MS 500    /* before the 2nd attempt, then doubled */

struct rc_provider;

/* After curl_global_init. NULL with errstr (provider_url empty or too long). */
struct rc_provider *rc_provider_open(const struct config *cfg, char *errstr,
    size_t errlen);

/* NULL-safe. */
void rc_provider_close(struct rc_provider *p);

/*
 * GET path (from "/v1/..."): *body (owned by p, NUL-terminated, valid
 * until the next call), *len and the HTTP *status. A transfer that failed,
 * 429 and 5xx are tried again (RC_HTTP_ATTEMPTS, backing off); 0 with
 * the last answer's status, or -1 with errstr when none came.
 */
int rc_provider_get(struct rc_provider *p, const char *path, const char **body,
    size_t *len, long *status, char *errstr, size_t errlen);

#endif
