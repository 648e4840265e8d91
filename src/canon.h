/*
 * canon.h - the canonical form of a valid /charge body (docs/API.md §7.1):
 * the text the fingerprint is computed over and the charge object echoes.
 * Pure.
 */
#ifndef CHARGE_CANON_H
#define CHARGE_CANON_H

#include <stddef.h>

#include "schema.h"

/*
 * The canonical text of f, which schema_check() found valid: compact JSON of
 * amount, currency, source, customer and description (null when absent),
 * metadata (keys sorted bytewise; {} when absent) and line_items (each
 * {description, quantity, unit_amount}; [] when absent), strings escaped as
 * cJSON prints them. Equal parameters give equal text. Malloc'd,
 * NUL-terminated, length in *len; NULL on ENOMEM.
 */
char *canon_text(const struct charge_fields *f, size_t *len);

#endif
