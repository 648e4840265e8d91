/*
 * schema.h - the /charge body schema (docs/API.md §5): which members, their
 * types and limits, the line_items sum; and the list of errors, each naming
 * the field it is about. Reads the tree json.c builds. Pure.
 */
#ifndef CHARGE_SCHEMA_H
#define CHARGE_SCHEMA_H

#include <cJSON.h>

#include "defaults.h"
#include "json_path.h"

struct validation_error {
	/* "amount", "metadata.k", "line_items[3].quantity", "body" */
	char field[JSON_FIELD_SIZE];
	char message[160];
};

struct validation {
	struct validation_error errors[VALIDATION_ERRORS_MAX];
	int n; /* errors recorded (at most VALIDATION_ERRORS_MAX) */
};

/* The members of a body as schema_check() found them. */
struct charge_fields {
	long long amount;
	char currency[4];            /* lower case */
	char source[SOURCE_MAX + 1]; /* "tok_...", or a chain */
	/* each NULL when absent or null */
	const cJSON *customer, *description, *metadata, *line_items;
};

/*
 * The body's parameters in their fixed order: the order the schema checks
 * them, the canonical form lists them and a 422 names them.
 */
#define SCHEMA_PARAM_COUNT 7
extern const char *const schema_param_names[SCHEMA_PARAM_COUNT];

/* Appends an error on field to v; once v is full, does nothing. */
void schema_error(struct validation *v, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Checks the object root (from json_parse()) against the schema and appends
 * an error to v for each violation: unknown members in document order, then
 * amount, currency, source, customer, description, metadata, line_items.
 * When it added none, f holds the body's parameters (its nodes point into
 * root).
 */
void schema_check(const cJSON *root, struct charge_fields *f,
    struct validation *v);

#endif
