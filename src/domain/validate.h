/*
 * validate.h - the /charge body: validation against docs/API.md §5 and the
 * canonical form that the fingerprint is computed over. Pure: bytes in,
 * result out. The work is json.c's (syntax), schema.c's (rules, the error
 * list) and canon.c's (canonical text).
 */
#ifndef CHARGE_VALIDATE_H
#define CHARGE_VALIDATE_H

#include <stddef.h>

#include "defaults.h"
#include "schema.h"

struct charge_params {
	long long amount;
	char currency[4];            /* lower case */
	char source[SOURCE_MAX + 1]; /* "tok_...", or a chain */
	/*
	 * The canonical text of the validated parameters (canon.h): amount,
	 * currency, source, customer, description, metadata (keys sorted),
	 * line_items. Malloc'd, NUL-terminated; freed by charge_params_free().
	 */
	char *canonical;
	size_t canonical_len;
};

/*
 * Validates body[0..len) as a charge request. Returns 0 and fills p, or -1
 * and fills v with at least one error (p untouched, nothing to free).
 */
int validate_charge(const char *body, size_t len, struct charge_params *p,
    struct validation *v);

/* NULL-safe. */
void charge_params_free(struct charge_params *p);

#endif
