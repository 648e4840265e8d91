/*
 * provider_http.h - the provider as a network peer: a Stripe-compatible
 * POST /v1/charges over HTTP(S) or HTTP on a unix socket, with libcurl's
 * multi-socket interface on the loop (one multi handle per loop, its
 * connections kept alive). Each call retries with the same downstream key
 * (provider_wire.h) within its deadline and ends definitive (a charge, a
 * decline, a rejected request) or PROV_UNKNOWN.
 */
#ifndef CHARGE_PROVIDER_HTTP_H
#define CHARGE_PROVIDER_HTTP_H

#include <uv.h>

#include "config.h"
#include "provider.h"

/*
 * Once per process before any thread starts: curl_global_init when a
 * loop will use the HTTP provider through libcurl (the
 * configured provider_client, or a proxy in the environment). 0 or -1.
 */
int provider_http_global_init(const struct config *cfg);

/*
 * The HTTP provider on loop for cfg->provider_url. NULL on ENOMEM or when
 * libcurl cannot be set up (errstr).
 */
struct provider *provider_http_new(uv_loop_t *loop, const struct config *cfg,
    char *errstr, size_t errlen);

#endif
