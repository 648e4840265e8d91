/*
 * charge_object.h - the pure parts of the /charge use case: the
 * fingerprint, the per-parameter digests and the charge object.
 */
#ifndef CHARGE_CHARGE_OBJECT_H
#define CHARGE_CHARGE_OBJECT_H

#include <stddef.h>

#include "schema.h"

/*
 * Hex SHA-256 of "POST /charge\n" principal "\n" canonical text into
 * out[65], where canon is the parameters' canonical text (charge_params).
 * Equal parameters give equal fingerprints. 0 or -1.
 */
int charge_fingerprint(const char *canon, size_t canonlen,
    const char *principal, char out[65]);

/*
 * Per-parameter digests: for each top-level member of the canonical form,
 * in its fixed order (amount, currency, source, customer, description,
 * metadata, line_items), the 32-bit FNV-1a of the member's canonical text
 * ("amount":1999), big-endian, in hex, concatenated. They
 * are stored with the claim so that a 422 can name the parameters that
 * changed without storing any value.
 */
#define CHARGE_PARAM_COUNT SCHEMA_PARAM_COUNT
#define CHARGE_PARAM_DIGEST_BYTES 4
#define CHARGE_PARAM_DIGEST_HEX (2 * CHARGE_PARAM_DIGEST_BYTES)
#define CHARGE_PARAMS_HEX_LEN (CHARGE_PARAM_COUNT * CHARGE_PARAM_DIGEST_HEX)

/* The name of parameter i (< CHARGE_PARAM_COUNT) in the fixed order. */
const char *charge_param_name(int i);

/*
 * The digests of canon (charge_params' canonical text) into
 * out[CHARGE_PARAMS_HEX_LEN + 1]. 0, or -1 when canon is not the canonical
 * form (members missing, out of order, or not compact JSON).
 */
int charge_param_digests(const char *canon, size_t canonlen,
    char out[CHARGE_PARAMS_HEX_LEN + 1]);

/*
 * Compares stored digests with ours: sets differ[i] for each parameter
 * whose digests differ. The number that differ, or -1 when stored is not a
 * digest string of this layout (a record written before it, say).
 */
int charge_params_diff(const char *stored, const char *ours,
    int differ[CHARGE_PARAM_COUNT]);

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
