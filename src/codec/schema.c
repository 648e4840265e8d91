/*
 * schema.c - the /charge body schema (docs/API.md §5) over the tree json.c
 * builds: required and optional members, their types and limits, the
 * line_items sum, and the error list that names each field. A field's path
 * is built only when an error names it.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "schema.h"
#include "util.h"

#define SOURCE_PREFIX "tok_"
#define CURRENCY_LEN 3

/* What is wrong with a value, before it is reported on a field. */
enum problem {
	PROBLEM_NONE,
	PROBLEM_MISSING,
	PROBLEM_NOT_INTEGER,
	PROBLEM_NOT_PLAIN, /* a number with fraction, exponent, leading 0 */
	PROBLEM_RANGE,
	PROBLEM_NOT_STRING,
	PROBLEM_TOO_LONG,
};

/* The top-level members, in the order their checks report. */
enum top_field {
	TOP_AMOUNT,
	TOP_CURRENCY,
	TOP_SOURCE,
	TOP_CUSTOMER,
	TOP_DESCRIPTION,
	TOP_METADATA,
	TOP_LINE_ITEMS,
	TOP_COUNT
};

_Static_assert(TOP_COUNT == SCHEMA_PARAM_COUNT, "one name per member");

const char *const schema_param_names[SCHEMA_PARAM_COUNT] = {
	"amount",
	"currency",
	"source",
	"customer",
	"description",
	"metadata",
	"line_items",
};

enum item_field {
	ITEM_DESCRIPTION,
	ITEM_QUANTITY,
	ITEM_UNIT_AMOUNT,
	ITEM_COUNT
};

static const char *const item_names[ITEM_COUNT] = {
	"description",
	"quantity",
	"unit_amount",
};

void
schema_error(struct validation *v, const char *field, const char *fmt, ...)
{
	struct validation_error *e;
	size_t n;
	va_list ap;

	if (v->n >= VALIDATION_ERRORS_MAX)
		return;
	e = &v->errors[v->n++];
	n = util_utf8_prefix(field, sizeof(e->field) - 1);
	memcpy(e->field, field, n);
	e->field[n] = '\0';
	va_start(ap, fmt);
	if (vsnprintf(e->message, sizeof(e->message), fmt, ap) < 0)
		e->message[0] = '\0';
	va_end(ap);
}

static size_t
name_index(const char *name, const char *const *names, size_t n)
{
	size_t k;

	for (k = 0; k < n; k++)
		if (name[0] == names[k][0] && strcmp(name, names[k]) == 0)
			break;
	return k;
}

/*
 * Puts obj's members named in names into slot[] (the first of equal names
 * counts, as cJSON_GetObjectItemCaseSensitive() would find it). Returns how
 * many members have other names.
 */
static size_t
slot_members(const cJSON *obj, const char *const *names, size_t n,
    const cJSON **slot)
{
	const cJSON *c;
	size_t k, unknown = 0;

	for (c = obj->child; c != NULL; c = c->next) {
		if ((k = name_index(c->string, names, n)) == n)
			unknown++;
		else if (slot[k] == NULL)
			slot[k] = c;
	}
	return unknown;
}

/* Reports obj's members with other names than names, in document order. */
static void
report_unknown(struct validation *v, const cJSON *obj, const char *parent,
    const char *const *names, size_t n)
{
	char field[JSON_FIELD_SIZE];
	const cJSON *c;

	for (c = obj->child; c != NULL; c = c->next) {
		if (name_index(c->string, names, n) < n)
			continue;
		json_path_member(field, sizeof(field), parent, c->string);
		schema_error(v, field, "unknown field");
	}
}

/* PROBLEM_NONE, and *out, when node is an integer in [min, max]. */
static enum problem
integer_problem(const cJSON *node, long long min, long long max, long long *out)
{
	double d;

	/* json.c makes any number not written as a plain integer a raw one */
	if (cJSON_IsRaw(node))
		return PROBLEM_NOT_PLAIN;
	if (!cJSON_IsNumber(node))
		return PROBLEM_NOT_INTEGER;
	d = node->valuedouble;
	/* both bounds are exact doubles */
	if (!(d >= (double)min && d <= (double)max))
		return PROBLEM_RANGE;
	*out = (long long)d;
	return PROBLEM_NONE;
}

static enum problem
string_problem(const cJSON *node, size_t max)
{
	if (!cJSON_IsString(node) || node->valuestring == NULL)
		return PROBLEM_NOT_STRING;
	if (strlen(node->valuestring) > max)
		return PROBLEM_TOO_LONG;
	return PROBLEM_NONE;
}

static void
report_integer(struct validation *v, const char *field, enum problem pr,
    long long min, long long max)
{
	if (pr == PROBLEM_MISSING)
		schema_error(v, field, "is required");
	else if (pr == PROBLEM_NOT_INTEGER)
		schema_error(v, field, "must be an integer");
	else if (pr == PROBLEM_NOT_PLAIN)
		schema_error(v, field,
		    "must be an integer, without fraction, exponent or leading zero");
	else if (pr == PROBLEM_RANGE)
		schema_error(v, field, "must be between %lld and %lld", min,
		    max);
}

static void
report_string(struct validation *v, const char *field, enum problem pr,
    size_t max)
{
	if (pr == PROBLEM_MISSING)
		schema_error(v, field, "is required");
	else if (pr == PROBLEM_NOT_STRING)
		schema_error(v, field, "must be a string");
	else if (pr == PROBLEM_TOO_LONG)
		schema_error(v, field, "must be at most %zu bytes", max);
}

/* An optional member: NULL when absent or null. */
static const cJSON *
optional(const cJSON *node)
{
	return cJSON_IsNull(node) ? NULL : node;
}

/* An optional string member, checked; NULL when absent or null. */
static const cJSON *
check_optional_string(struct validation *v, const cJSON *node,
    const char *field, size_t max)
{
	enum problem pr;

	if ((node = optional(node)) != NULL &&
	    (pr = string_problem(node, max)) != PROBLEM_NONE)
		report_string(v, field, pr, max);
	return node;
}

static void
check_currency(struct validation *v, const cJSON *node, struct charge_fields *f)
{
	const char *s;

	if (node == NULL) {
		schema_error(v, "currency", "is required");
		return;
	}
	if (string_problem(node, SIZE_MAX) != PROBLEM_NONE) {
		schema_error(v, "currency", "must be a string");
		return;
	}
	s = node->valuestring;
	if (strlen(s) != CURRENCY_LEN)
		goto bad;
	for (size_t i = 0; i < CURRENCY_LEN; i++) {
		char c = s[i];

		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c < 'a' || c > 'z')
			goto bad;
		f->currency[i] = c;
	}
	f->currency[CURRENCY_LEN] = '\0';
	return;
bad:
	schema_error(v, "currency", "must be a three-letter currency code");
}

static void
check_source(struct validation *v, const cJSON *node, struct charge_fields *f)
{
	size_t plen = strlen(SOURCE_PREFIX), n;
	const char *s;

	if (node == NULL) {
		schema_error(v, "source", "is required");
		return;
	}
	if (string_problem(node, SIZE_MAX) != PROBLEM_NONE) {
		schema_error(v, "source", "must be a string");
		return;
	}
	s = node->valuestring;
	n = strlen(s);
	if (n <= plen || n > SOURCE_MAX || strncmp(s, SOURCE_PREFIX, plen) != 0)
		goto bad;
	/*
	 * A token, or a chain "tok_a|tok_b|nonce" (the N-th delivery under
	 * one provider key uses the N-th element, docs/API.md §5): elements
	 * of 1 to SOURCE_TOKEN_MAX letters, digits or underscores.
	 */
	for (size_t i = plen, run = 0; i <= n; i++) {
		char c = s[i];

		if (c == '\0' || c == '|') {
			if (run == 0)
				goto bad;
			run = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		        (c >= '0' && c <= '9') || c == '_') ||
		    ++run > SOURCE_TOKEN_MAX)
			goto bad;
	}
	memcpy(f->source, s, n + 1);
	return;
bad:
	schema_error(v, "source",
	    "must be \"%s\" followed by 1 to %d letters, digits or underscores (or such elements joined by \"|\", at most %d bytes)",
	    SOURCE_PREFIX, SOURCE_TOKEN_MAX, SOURCE_MAX);
}

static void
check_metadata(struct validation *v, const cJSON *node)
{
	char field[JSON_FIELD_SIZE];
	const cJSON *c;
	enum problem pr;
	int n = 0;

	if (!cJSON_IsObject(node)) {
		schema_error(v, "metadata", "must be an object");
		return;
	}
	for (c = node->child; c != NULL; c = c->next)
		n++;
	if (n > METADATA_KEYS_MAX)
		schema_error(v, "metadata", "must have at most %d keys",
		    METADATA_KEYS_MAX);
	for (c = node->child; c != NULL; c = c->next) {
		size_t klen = strlen(c->string);

		if (klen == 0)
			schema_error(v, "metadata", "keys must not be empty");
		pr = string_problem(c, METADATA_VALUE_MAX);
		if (klen <= METADATA_KEY_MAX && pr == PROBLEM_NONE)
			continue;
		json_path_member(field, sizeof(field), "metadata", c->string);
		if (klen > METADATA_KEY_MAX)
			schema_error(v, field, "key must be at most %d bytes",
			    METADATA_KEY_MAX);
		report_string(v, field, pr, METADATA_VALUE_MAX);
	}
}

/* dst = "line_items[i]" or, with a member name, "line_items[i].name". */
static void
item_path(char *dst, size_t i, const char *name)
{
	char base[JSON_FIELD_SIZE];

	json_path_index(base, sizeof(base), "line_items", i);
	if (name == NULL)
		memcpy(dst, base, sizeof(base));
	else
		json_path_member(dst, JSON_FIELD_SIZE, base, name);
}

/* Checks one line item; adds quantity * unit_amount to *sum when valid. */
static int
check_line_item(struct validation *v, const cJSON *item, size_t i,
    long long *sum)
{
	/* bounds of the integer members (description is a string) */
	static const long long min[ITEM_COUNT] = {
		0,
		LINE_ITEM_QTY_MIN,
		LINE_ITEM_UNIT_MIN,
	};
	static const long long max[ITEM_COUNT] = {
		0,
		LINE_ITEM_QTY_MAX,
		LINE_ITEM_UNIT_MAX,
	};
	const cJSON *slot[ITEM_COUNT] = { NULL, NULL, NULL };
	long long value[ITEM_COUNT] = { 0, 0, 0 };
	char field[JSON_FIELD_SIZE];
	enum problem pr;
	int bad = 0;

	if (!cJSON_IsObject(item)) {
		item_path(field, i, NULL);
		schema_error(v, field, "must be an object");
		return -1;
	}
	if (slot_members(item, item_names, ITEM_COUNT, slot) > 0) {
		item_path(field, i, NULL);
		report_unknown(v, item, field, item_names, ITEM_COUNT);
		bad = 1;
	}
	for (int k = 0; k < ITEM_COUNT; k++) {
		if (slot[k] == NULL)
			pr = PROBLEM_MISSING;
		else if (k == ITEM_DESCRIPTION)
			pr = string_problem(slot[k], LINE_ITEM_DESC_MAX);
		else
			pr =
			    integer_problem(slot[k], min[k], max[k], &value[k]);
		if (pr == PROBLEM_NONE)
			continue;
		bad = 1;
		item_path(field, i, item_names[k]);
		if (k == ITEM_DESCRIPTION)
			report_string(v, field, pr, LINE_ITEM_DESC_MAX);
		else
			report_integer(v, field, pr, min[k], max[k]);
	}
	if (bad)
		return -1;
	/*
	 * qty * unit <= 10^4 * 10^8 and at most LINE_ITEMS_MAX items are
	 * summed, so this cannot overflow; the guard keeps it true if the
	 * bounds ever change.
	 */
	if (*sum > LLONG_MAX - value[ITEM_QUANTITY] * value[ITEM_UNIT_AMOUNT])
		return -1;
	*sum += value[ITEM_QUANTITY] * value[ITEM_UNIT_AMOUNT];
	return 0;
}

/* Checks line_items; *sum is their total, -1 when it cannot be computed. */
static void
check_line_items(struct validation *v, const cJSON *node, long long *sum)
{
	const cJSON *c;
	size_t n = 0, i;
	int bad = 0;

	*sum = -1;
	if (!cJSON_IsArray(node)) {
		schema_error(v, "line_items", "must be an array");
		return;
	}
	for (c = node->child; c != NULL; c = c->next)
		n++;
	if (n > LINE_ITEMS_MAX) {
		schema_error(v, "line_items", "must have at most %d items",
		    LINE_ITEMS_MAX);
		bad = 1;
	}
	*sum = 0;
	for (i = 0, c = node->child; c != NULL; c = c->next, i++) {
		if (v->n >= VALIDATION_ERRORS_MAX)
			break;
		if (check_line_item(v, c, i, sum) == -1)
			bad = 1;
	}
	if (bad)
		*sum = -1;
}

void
schema_check(const cJSON *root, struct charge_fields *f, struct validation *v)
{
	const cJSON *slot[TOP_COUNT] = { NULL };
	long long sum = -1;
	enum problem pr;
	int amount_ok = 0;

	memset(f, 0, sizeof(*f));
	if (slot_members(root, schema_param_names, TOP_COUNT, slot) > 0)
		report_unknown(v, root, "", schema_param_names, TOP_COUNT);

	if (slot[TOP_AMOUNT] == NULL)
		schema_error(v, "amount", "is required");
	else if ((pr = integer_problem(slot[TOP_AMOUNT], AMOUNT_MIN, AMOUNT_MAX,
	              &f->amount)) != PROBLEM_NONE)
		report_integer(v, "amount", pr, AMOUNT_MIN, AMOUNT_MAX);
	else
		amount_ok = 1;
	check_currency(v, slot[TOP_CURRENCY], f);
	check_source(v, slot[TOP_SOURCE], f);
	f->customer = check_optional_string(v, slot[TOP_CUSTOMER], "customer",
	    CUSTOMER_MAX);
	f->description = check_optional_string(v, slot[TOP_DESCRIPTION],
	    "description", DESCRIPTION_MAX);
	f->metadata = optional(slot[TOP_METADATA]);
	if (f->metadata != NULL)
		check_metadata(v, f->metadata);
	f->line_items = optional(slot[TOP_LINE_ITEMS]);
	if (f->line_items != NULL) {
		check_line_items(v, f->line_items, &sum);
		/* an empty list is the same as no list: nothing to sum */
		if (amount_ok && sum >= 0 && f->line_items->child != NULL &&
		    sum != f->amount)
			schema_error(v, "amount",
			    "must equal the sum of line_items quantity * unit_amount (%lld)",
			    sum);
	}
}
