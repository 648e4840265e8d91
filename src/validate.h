/*
 * validate.h - the /charge body: validation against SPEC section 2 and the
 * canonical form that the fingerprint is computed over. Pure: bytes in,
 * result out.
 */
#ifndef CHARGE_VALIDATE_H
#define CHARGE_VALIDATE_H

#include <stddef.h>

#include <cJSON.h>

#include "defaults.h"
#include "schema.h"

struct charge_params {
	long long amount;
	char currency[4];                           /* lower case */
	char source[4 + SOURCE_TOKEN_MAX + 1];      /* "tok_..." */
	/*
	 * The validated parameters in canonical order: amount, currency,
	 * source, customer (string or null), description (string or null),
	 * metadata (object, keys sorted bytewise; {} when absent),
	 * line_items (array of {description, quantity, unit_amount}; [] when
	 * absent). Owned; freed by charge_params_free().
	 */
	cJSON *canonical;
};

/*
 * Validates body[0..len) as a charge request. Returns 0 and fills p, or -1
 * and fills v with at least one error (p untouched, nothing to free).
 */
int validate_charge(const char *body, size_t len, struct charge_params *p,
    struct validation *v);

/*
 * The canonical text: compact JSON of p->canonical. Malloc'd, NUL-terminated,
 * length in *len; NULL on allocation failure. Equal parameters give equal
 * text whatever their formatting or member order.
 */
char *validate_canonical_text(const struct charge_params *p, size_t *len);

/* NULL-safe. */
void charge_params_free(struct charge_params *p);

#endif
