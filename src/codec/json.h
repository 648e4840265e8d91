/*
 * json.h - the strict JSON layer: one pass over the bytes of a body that
 * checks what cJSON does not and builds the cJSON tree. Knows nothing of
 * the /charge schema. Pure: bytes in, tree out.
 */
#ifndef CHARGE_JSON_H
#define CHARGE_JSON_H

#include <stddef.h>

#include <cJSON.h>

#include "json_path.h"

enum json_status {
	JSON_OK,
	JSON_EMPTY,    /* no bytes */
	JSON_TOO_DEEP, /* brackets nest deeper than JSON_DEPTH_MAX */
	JSON_TOO_MANY, /* more than JSON_VALUES_MAX values: doc->field */
	JSON_NOT_UTF8, /* not JSON, and not UTF-8 either */
	JSON_SYNTAX,   /* not JSON: the error is at byte doc->at */
	JSON_BAD_BYTE, /* a BOM, a control byte between tokens: doc->at */
	JSON_TRAILING, /* data after the value, from byte doc->at */
	JSON_NOMEM,
};

struct json_mark;

struct json_doc {
	cJSON *root; /* the value (any type) when JSON_OK; owned */
	size_t at;   /* the byte JSON_SYNTAX/BAD_BYTE/TRAILING name */
	struct json_mark *marks; /* what json_problems() reports; owned */
	size_t nmarks;
	/* JSON_TOO_MANY: the top-level member being read then, or "" */
	char field[JSON_FIELD_SIZE];
};

/*
 * Parses buf[0..len) as one JSON value. JSON_OK sets doc->root; any other
 * status leaves it NULL. Statuses take precedence in the order listed above
 * (a body nested too deep is that, whatever else is wrong with it).
 *
 * The tree is cJSON's, with two differences a reader of raw JSON needs:
 * - a number written as a plain integer, -?(0|[1-9][0-9]*), is a cJSON
 *   number whose valuedouble is exact up to 15 digits (more saturate at
 *   +-10^15); any other number (fraction, exponent, leading zero) is a
 *   cJSON_Raw holding its text, so integers can be told from "1.0" or "1e2";
 * - a string holds its decoded bytes up to the first U+0000, as cJSON keeps
 *   it.
 * What is well-formed but not allowed (invalid UTF-8, raw control characters
 * or \u0000 in a string, duplicate member names) does not fail the parse:
 * json_problems() lists it with the member it is in.
 * Call json_doc_free() whatever the status.
 */
enum json_status json_parse(const char *buf, size_t len, struct json_doc *doc);

/* NULL-safe; leaves doc empty. */
void json_doc_free(struct json_doc *doc);

typedef void json_problem_fn(void *ctx, const char *field, const char *message);

/*
 * Calls fn once per problem of a JSON_OK document, in document order (an
 * object's duplicate names, sorted, before its members), with the path of
 * the member ("" for the root, "metadata.k", "line_items[3].description")
 * and a message such as "value is not valid UTF-8" or "duplicate member";
 * a path fits in JSON_FIELD_SIZE bytes (json_path.h).
 * 0, or -1 on ENOMEM (some problems may have been reported).
 */
int json_problems(const struct json_doc *doc, json_problem_fn *fn, void *ctx);

#endif
