/*
 * app.h - routing: /charge, /charge/keys/<key>, /healthz, /readyz, /metrics, the
 * provider's webhook path.
 */
#ifndef CHARGE_APP_H
#define CHARGE_APP_H

#include "exchange.h"

/*
 * Routes x->req; the handler fills x->resp (errors become problems) and
 * calls exchange_finish(x) once, at once or when its waits are over.
 */
void app_handle(struct exchange *x);

#endif
