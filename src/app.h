/*
 * app.h - routing: /charge, /charge/keys/<key>, /healthz, /metrics.
 */
#ifndef CHARGE_APP_H
#define CHARGE_APP_H

#include "request.h"
#include "response.h"
#include "worker.h"

/* Routes the request and fills resp (always: errors become problems). */
void app_handle(struct worker *w, const struct request *req,
    struct response *resp);

#endif
