/*
 * validate.c - the /charge body from bytes to parameters: the JSON layer
 * (json.c), then the schema (schema.c), then the canonical text (canon.c),
 * with the errors in the order a 400 lists them: what is wrong with the body
 * as a whole ("body"), the problems inside its strings and objects, then the
 * schema's.
 */
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "json.h"
#include "validate.h"

#define FIELD_BODY "body"

static void
body_error(struct validation *v, enum json_status st, size_t at)
{
	switch (st) {
	case JSON_EMPTY:
		schema_error(v, FIELD_BODY,
		    "must be a JSON object, got an empty body");
		break;
	case JSON_TOO_DEEP:
		schema_error(v, FIELD_BODY, "nests deeper than %d levels",
		    JSON_DEPTH_MAX);
		break;
	case JSON_NOT_UTF8:
		schema_error(v, FIELD_BODY, "is not valid UTF-8");
		break;
	case JSON_SYNTAX:
		schema_error(v, FIELD_BODY,
		    "is not valid JSON (error at byte %zu)", at);
		break;
	case JSON_BAD_BYTE:
		schema_error(v, FIELD_BODY,
		    "is not valid JSON (unexpected byte at %zu)", at);
		break;
	case JSON_TRAILING:
		schema_error(v, FIELD_BODY,
		    "has unexpected data after the JSON value at byte %zu", at);
		break;
	case JSON_NOMEM:
		schema_error(v, FIELD_BODY,
		    "could not be checked: out of memory");
		break;
	case JSON_TOO_MANY: /* validate_charge() names the member */
	case JSON_OK: break;
	}
}

static void
add_problem(void *ctx, const char *field, const char *message)
{
	schema_error(ctx, field, "%s", message);
}

int
validate_charge(const char *body, size_t len, struct charge_params *p,
    struct validation *v)
{
	struct json_doc doc;
	struct charge_fields f;
	enum json_status st;
	char *text;
	size_t n = 0;
	int rc = -1;

	v->n = 0;
	if ((st = json_parse(body, len, &doc)) == JSON_TOO_MANY) {
		schema_error(v, doc.field[0] != '\0' ? doc.field : FIELD_BODY,
		    "makes the body hold more than %d JSON values",
		    JSON_VALUES_MAX);
		goto done;
	}
	if (st != JSON_OK) {
		body_error(v, st, doc.at);
		goto done;
	}
	if (!cJSON_IsObject(doc.root)) {
		schema_error(v, FIELD_BODY, "must be a JSON object");
		goto done;
	}
	if (json_problems(&doc, add_problem, v) == -1) {
		body_error(v, JSON_NOMEM, 0);
		goto done;
	}
	schema_check(doc.root, &f, v);
	if (v->n > 0)
		goto done;
	if ((text = canon_text(&f, &n)) == NULL) {
		body_error(v, JSON_NOMEM, 0);
		goto done;
	}
	p->amount = f.amount;
	memcpy(p->currency, f.currency, sizeof(p->currency));
	memcpy(p->source, f.source, sizeof(p->source));
	p->canonical = text;
	p->canonical_len = n;
	rc = 0;
done:
	json_doc_free(&doc);
	return rc;
}

void
charge_params_free(struct charge_params *p)
{
	if (p == NULL)
		return;
	free(p->canonical);
	p->canonical = NULL;
	p->canonical_len = 0;
}
