/*
 * webhook.h - POST <provider_webhook_path>: the provider's signed events
 * (Stripe's charge.succeeded, charge.failed) settle the unknown record of
 * the request the charge is proven to belong to (docs/API.md §17.5).
 */
#ifndef CHARGE_WEBHOOK_H
#define CHARGE_WEBHOOK_H

#include "exchange.h"

struct config;

/*
 * 1 when the route serves path: the path is provider_webhook_path and a
 * secret is configured (without one the route is off: 404).
 */
int webhook_route_on(const struct config *cfg, const char *path);

/*
 * Answers x: 200 {"received":true,"result":...} once the event is
 * decided (settled, duplicate, ignored, mismatch, not_found), 400/401
 * refusals that change nothing, 405, 408, 413, or 503 with Retry-After
 * when it cannot be decided now (the provider delivers it again). Calls
 * exchange_finish(x) once.
 */
void webhook_handle(struct exchange *x);

#endif
