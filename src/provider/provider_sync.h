/*
 * provider_sync.h - the provider read synchronously, for charge-reconcile:
 * GET requests
 * on provider_url (http, https, or unix:/path for HTTP on a unix socket,
 * as the responder's provider_url) with provider_api_key, through
 * libcurl's easy interface (a command-line tool waits for each page; the
 * responder's HTTP client lives on an event loop). Only GETs are sent.
 */
#ifndef CHARGE_PROVIDER_SYNC_H
#define CHARGE_PROVIDER_SYNC_H

#include <stddef.h>

#include "config.h"

#define PROVIDER_SYNC_TIMEOUT_MS 60000 /* one page or charge, start to end */
#define PROVIDER_SYNC_BODY_MAX                                                 \
	16777216                     /* 16 MiB: 100 charges at their largest */
#define PROVIDER_SYNC_ATTEMPTS 4     /* per GET: transport errors, 429, 5xx */
#define PROVIDER_SYNC_BACKOFF_MS 500 /* before the 2nd attempt, then doubled */

struct provider_sync;

/* Once per process, before any other call (curl_global_init). 0 or -1. */
int provider_sync_global_init(void);
/* At the end, after every provider_sync_close (curl_global_cleanup). */
void provider_sync_global_done(void);

/* After provider_sync_global_init. NULL with errstr (provider_url empty or
 * too long). */
struct provider_sync *provider_sync_open(const struct config *cfg, char *errstr,
    size_t errlen);

/* NULL-safe. */
void provider_sync_close(struct provider_sync *p);

/*
 * GET path (from "/v1/..."): *body (owned by p, NUL-terminated, valid
 * until the next call), *len and the HTTP *status. A transfer that failed,
 * 429 and 5xx are tried again (PROVIDER_SYNC_ATTEMPTS, backing off); 0 with
 * the last answer's status, or -1 with errstr when none came.
 */
int provider_sync_get(struct provider_sync *p, const char *path,
    const char **body, size_t *len, long *status, char *errstr, size_t errlen);

#endif
