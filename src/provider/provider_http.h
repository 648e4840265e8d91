/*
 * provider_http.h - the provider as a network peer: a Stripe-compatible
 * POST /v1/charges over HTTP(S) or HTTP on a unix socket, with the
 * responder's own HTTP/1.1 client on the loop (http1.h: one pool of
 * kept-alive connections per loop; a proxy from the environment). Each
 * call retries with the same downstream key (provider_wire.h) within its
 * deadline and ends definitive (a charge, a decline, a rejected request)
 * or PROV_UNKNOWN.
 */
#ifndef CHARGE_PROVIDER_HTTP_H
#define CHARGE_PROVIDER_HTTP_H

#include <uv.h>

#include "config.h"
#include "provider.h"

/*
 * The HTTP provider on loop for cfg->provider_url. NULL on ENOMEM, or when
 * the URL or a proxy variable cannot be used (errstr).
 */
struct provider *provider_http_new(uv_loop_t *loop, const struct config *cfg,
    char *errstr, size_t errlen);

#endif
