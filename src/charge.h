/*
 * charge.h - the pure parts of the /charge use case: the fingerprint and the
 * charge object; and the orchestration, charge_handle.
 */
#ifndef CHARGE_CHARGE_H
#define CHARGE_CHARGE_H

#include <stddef.h>

#include "request.h"
#include "response.h"
#include "validate.h"
#include "worker.h"

/*
 * The /charge use case: check, fingerprint, claim, provider, spill, record,
 * replay. Fills resp (always: errors become problems).
 */
void charge_handle(struct worker *w, const struct request *req,
    struct response *resp);

/*
 * Hex SHA-256 of "POST /charge\n" principal "\n" canonical text into
 * out[65], where canon is validate_canonical_text() of the parameters.
 * Equal parameters give equal fingerprints. 0 or -1.
 */
int charge_fingerprint(const char *canon, size_t canonlen,
    const char *principal, char out[65]);

/*
 * The 201 body: {"id","object","status", the canonical members (amount,
 * currency, source, customer, description, metadata, line_items), "created",
 * "idempotency_key"} as compact JSON. The charge echoes exactly the
 * parameters that were fingerprinted, so their canonical text is spliced in
 * rather than built again. Malloc'd; NULL on ENOMEM or bad input.
 */
char *charge_object_render(const char *canon, size_t canonlen,
    const char *charge_id, long long created, const char *key, size_t keylen,
    size_t *len);

#endif
