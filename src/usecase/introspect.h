/*
 * introspect.h - GET /charge/keys/<idempotency-key>: what the caller's
 * record under a key says about itself (state, times, status), read
 * without creating or extending anything.
 */
#ifndef CHARGE_INTROSPECT_H
#define CHARGE_INTROSPECT_H

#include "exchange.h"
#include "idem.h"

/* The route prefix; the rest of the path is the percent-encoded key. */
#define INTROSPECT_PREFIX "/charge/keys/"

/*
 * Answers for the key in seg (the path after INTROSPECT_PREFIX): 200 JSON,
 * 404 key-not-found (no record, or another principal's), 401, 400 for a
 * malformed or empty key, 503 when Redis fails.
 * The caller has checked the method (GET or HEAD).
 */
void introspect_handle(struct exchange *x, const char *seg);

/*
 * The 200 body for key and info as compact JSON: {"key","state","created",
 * "updated","expires","status"} with RFC 3339 times (expires null when
 * unknown, status null while in progress). Pure. Malloc'd; NULL on ENOMEM.
 */
char *introspect_render(const char *key, const struct idem_info *info,
    long long expires_ms, size_t *len);

#endif
