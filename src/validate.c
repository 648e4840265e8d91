/*
 * validate.c - the /charge body (SPEC section 2): validation and the
 * canonical form the fingerprint is computed over.
 *
 * cJSON is lenient (numbers become doubles, duplicate members, invalid
 * UTF-8, raw control characters, "\u0000", a BOM and any byte <= 0x20 as
 * whitespace are all accepted), so a small lexical pass over the raw bytes
 * records every string and number token in document order. A pre-order
 * walk of the cJSON tree visits the same tokens in the same order (member
 * name, then value), which ties each token's raw properties to its node
 * and its field path.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "json.h"
#include "validate.h"

#define SOURCE_PREFIX     "tok_"
#define CURRENCY_LEN      3
#define FIELD_BODY        "body"
#define FIELD_SIZE        sizeof(((struct validation_error *)0)->field)

/* Lexical token: a kind plus, for strings, what is wrong with the raw text. */
#define TK_NUM            0x01
#define TK_STR            0x02
#define TK_KIND           0x03
#define TK_INT            0x04  /* number: -?(0|[1-9][0-9]*) */
#define TK_BAD_UTF8       0x08  /* string: raw bytes are not UTF-8 */
#define TK_CTRL           0x10  /* string: unescaped byte < 0x20 */
#define TK_NUL            0x20  /* string: \u0000 escape */

struct lexer {
	unsigned char *tok;
	size_t ntok, cap;
	int too_deep;
	int bad;                /* a byte that no JSON token may hold */
	size_t bad_at;
};

struct numflag {
	uintptr_t node;
	int is_int;
};

struct walk {
	const struct lexer *lx;
	size_t next;            /* next token to consume */
	struct numflag *nums;
	size_t nnum, numcap;
	struct validation *v;
	int desync;             /* tree and tokens disagree (defensive) */
	int oom;
	int utf8_reported;
};

/* The checked members of the body, first occurrences, NULL when absent. */
struct fields {
	const cJSON *customer, *description, *metadata, *line_items;
	size_t nitems;
};

static void
field_copy(char *dst, size_t size, const char *src)
{
	size_t n = strlen(src);

	if (n >= size) {
		n = size - 1;
		/* do not cut a UTF-8 sequence in half */
		while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static void
verror(struct validation *v, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
verror(struct validation *v, const char *field, const char *fmt, ...)
{
	struct validation_error *e;
	va_list ap;

	if (v->n >= VALIDATION_ERRORS_MAX)
		return;
	e = &v->errors[v->n++];
	field_copy(e->field, sizeof(e->field), field);
	va_start(ap, fmt);
	if (vsnprintf(e->message, sizeof(e->message), fmt, ap) < 0)
		e->message[0] = '\0';
	va_end(ap);
}

static int
lex_push(struct lexer *lx, unsigned char t)
{
	if (lx->ntok == lx->cap) {
		size_t cap = lx->cap ? lx->cap * 2 : 64;
		unsigned char *p = realloc(lx->tok, cap);

		if (p == NULL)
			return -1;
		lx->tok = p;
		lx->cap = cap;
	}
	lx->tok[lx->ntok++] = t;
	return 0;
}

static int
is_json_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int
is_num_char(char c)
{
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' ||
	    c == 'e' || c == 'E';
}

static int
num_is_plain_int(const char *s, size_t n)
{
	size_t i = 0;

	if (i < n && s[i] == '-')
		i++;
	if (i == n)
		return 0;
	if (s[i] == '0')
		return i + 1 == n;
	for (; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return 0;
	return 1;
}

/*
 * Records the string and number tokens of body[0..len) in document order.
 * Stops at an unterminated string (the parser rejects it) or when nesting
 * exceeds JSON_DEPTH_MAX. Returns -1 on allocation failure.
 */
static int
lex_body(const char *body, size_t len, struct lexer *lx)
{
	size_t i = 0;
	int depth = 0;

	while (i < len) {
		char c = body[i];

		if (is_json_ws(c) || c == ',' || c == ':' ||
		    (c >= 'a' && c <= 'z')) {
			i++;
		} else if (c == '{' || c == '[') {
			if (++depth > JSON_DEPTH_MAX) {
				lx->too_deep = 1;
				return 0;
			}
			i++;
		} else if (c == '}' || c == ']') {
			if (depth > 0)
				depth--;
			i++;
		} else if (c == '"') {
			unsigned char t = TK_STR;
			size_t start = ++i;

			while (i < len && body[i] != '"') {
				if ((unsigned char)body[i] < 0x20)
					t |= TK_CTRL;
				if (body[i] == '\\') {
					i++;
					if (i + 4 < len && body[i] == 'u' &&
					    memcmp(body + i + 1, "0000", 4) == 0)
						t |= TK_NUL;
				}
				i++;
			}
			if (i >= len)
				return 0;
			if (!utf8_valid(body + start, i - start))
				t |= TK_BAD_UTF8;
			i++;
			if (lex_push(lx, t) == -1)
				return -1;
		} else if (c == '-' || (c >= '0' && c <= '9')) {
			size_t start = i;

			while (i < len && is_num_char(body[i]))
				i++;
			if (lex_push(lx, num_is_plain_int(body + start,
			    i - start) ? TK_NUM | TK_INT : TK_NUM) == -1)
				return -1;
		} else {
			if (!lx->bad) {
				lx->bad = 1;
				lx->bad_at = i;
			}
			i++;
		}
	}
	return 0;
}

/*
 * dst = parent "." key (or key at the top level), truncated to size. A
 * name that is not UTF-8 has its bytes >= 0x80 shown as '?', so error
 * fields are always valid UTF-8.
 */
static void
path_member(char *dst, size_t size, const char *parent, const char *key)
{
	size_t n = 0, klen = strlen(key);
	int ok = utf8_valid(key, klen);

	if (*parent != '\0') {
		field_copy(dst, size, parent);
		n = strlen(dst);
		if (n + 1 < size)
			dst[n++] = '.';
	}
	for (size_t i = 0; i < klen && n + 1 < size; i++) {
		unsigned char c = (unsigned char)key[i];

		if (ok && c >= 0xc0) {
			/* copy a whole sequence or stop */
			size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;

			if (n + len >= size)
				break;
			memcpy(dst + n, key + i, len);
			n += len;
			i += len - 1;
		} else
			dst[n++] = (!ok && c >= 0x80) ? '?' : (char)c;
	}
	dst[n] = '\0';
}

static void
path_index(char *dst, size_t size, const char *parent, size_t i)
{
	char idx[32];
	size_t n;

	field_copy(dst, size, parent);
	if (snprintf(idx, sizeof(idx), "[%zu]", i) < 0)
		return;
	n = strlen(dst);
	if (n + strlen(idx) < size)
		memcpy(dst + n, idx, strlen(idx) + 1);
}

/* Consumes the next token, which must be of kind; -1 when it is not. */
static int
walk_take(struct walk *w, unsigned char kind, unsigned char *t)
{
	if (w->next >= w->lx->ntok ||
	    (w->lx->tok[w->next] & TK_KIND) != kind) {
		w->desync = 1;
		return -1;
	}
	*t = w->lx->tok[w->next++];
	return 0;
}

static void
walk_string_flags(struct walk *w, unsigned char t, const char *field,
    const char *what)
{
	if (t & TK_BAD_UTF8) {
		verror(w->v, field, "%s is not valid UTF-8", what);
		w->utf8_reported = 1;
	}
	if (t & TK_CTRL)
		verror(w->v, field, "%s contains an unescaped control character",
		    what);
	if (t & TK_NUL)
		verror(w->v, field, "%s must not contain \\u0000", what);
}

struct member_name {
	const char *name;
	size_t idx;
};

static int
member_name_cmp(const void *a, const void *b)
{
	const struct member_name *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c != 0)
		return c;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Reports each member name that occurs more than once in obj. */
static void
walk_duplicates(struct walk *w, const cJSON *obj, const char *path)
{
	struct member_name *names;
	size_t n = 0, i;
	const cJSON *c;

	for (c = obj->child; c != NULL; c = c->next)
		n++;
	if (n < 2)
		return;
	names = calloc(n, sizeof(*names));
	if (names == NULL) {
		w->oom = 1;
		return;
	}
	for (i = 0, c = obj->child; c != NULL; c = c->next, i++) {
		names[i].name = c->string != NULL ? c->string : "";
		names[i].idx = i;
	}
	qsort(names, n, sizeof(*names), member_name_cmp);
	for (i = 1; i < n; i++) {
		char field[FIELD_SIZE];

		if (strcmp(names[i].name, names[i - 1].name) != 0)
			continue;
		if (i >= 2 && strcmp(names[i].name, names[i - 2].name) == 0)
			continue;       /* already reported */
		path_member(field, sizeof(field), path, names[i].name);
		verror(w->v, field, "duplicate member");
	}
	free(names);
}

static int
numflag_cmp(const void *a, const void *b)
{
	const struct numflag *x = a, *y = b;

	return x->node < y->node ? -1 : x->node > y->node;
}

static int
walk_record_number(struct walk *w, const cJSON *node, int is_int)
{
	if (w->nnum == w->numcap) {
		size_t cap = w->numcap ? w->numcap * 2 : 16;
		struct numflag *p = realloc(w->nums, cap * sizeof(*p));

		if (p == NULL) {
			w->oom = 1;
			return -1;
		}
		w->nums = p;
		w->numcap = cap;
	}
	w->nums[w->nnum].node = (uintptr_t)node;
	w->nums[w->nnum].is_int = is_int;
	w->nnum++;
	return 0;
}

/*
 * Pre-order walk of every node: ties tokens to nodes, reports raw string
 * problems and duplicate members with their field path, and records which
 * numbers were written as plain integers.
 */
static void
walk_node(struct walk *w, const cJSON *node, const char *path)
{
	char field[FIELD_SIZE];
	const cJSON *c;
	unsigned char t;
	size_t i;

	if (w->desync || w->oom)
		return;
	if (cJSON_IsObject(node)) {
		walk_duplicates(w, node, path);
		for (c = node->child; c != NULL; c = c->next) {
			path_member(field, sizeof(field), path,
			    c->string != NULL ? c->string : "");
			if (walk_take(w, TK_STR, &t) == -1)
				return;
			walk_string_flags(w, t, field, "member name");
			walk_node(w, c, field);
		}
	} else if (cJSON_IsArray(node)) {
		for (i = 0, c = node->child; c != NULL; c = c->next, i++) {
			path_index(field, sizeof(field), path, i);
			walk_node(w, c, field);
		}
	} else if (cJSON_IsString(node)) {
		if (walk_take(w, TK_STR, &t) == 0)
			walk_string_flags(w, t, path, "value");
	} else if (cJSON_IsNumber(node)) {
		if (walk_take(w, TK_NUM, &t) == 0)
			(void)walk_record_number(w, node, (t & TK_INT) != 0);
	}
}

static int
num_is_int(const struct walk *w, const cJSON *node)
{
	struct numflag key = { (uintptr_t)node, 0 };
	const struct numflag *f;

	if (w->nnum == 0)
		return 0;
	f = bsearch(&key, w->nums, w->nnum, sizeof(*w->nums), numflag_cmp);
	return f != NULL && f->is_int;
}

/* Checks an integer field in [min, max]; 0 and *out set when valid. */
static int
check_int(struct walk *w, const cJSON *node, const char *field,
    long long min, long long max, long long *out)
{
	double d;

	if (!cJSON_IsNumber(node)) {
		verror(w->v, field, "must be an integer");
		return -1;
	}
	if (!num_is_int(w, node)) {
		verror(w->v, field, "must be an integer, without fraction, "
		    "exponent or leading zero");
		return -1;
	}
	d = node->valuedouble;
	/* plain integer syntax, so d is finite; both bounds are exact doubles */
	if (!(d >= (double)min && d <= (double)max)) {
		verror(w->v, field, "must be between %lld and %lld", min, max);
		return -1;
	}
	*out = (long long)d;
	return 0;
}

/* Checks a string field of at most max bytes; 0 when valid. */
static int
check_string(struct walk *w, const cJSON *node, const char *field,
    size_t max)
{
	if (!cJSON_IsString(node) || node->valuestring == NULL) {
		verror(w->v, field, "must be a string");
		return -1;
	}
	if (strlen(node->valuestring) > max) {
		verror(w->v, field, "must be at most %zu bytes", max);
		return -1;
	}
	return 0;
}

/* An optional member: NULL when absent or null. */
static const cJSON *
member_optional(const cJSON *obj, const char *name)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, name);

	return cJSON_IsNull(m) ? NULL : m;
}

static void
check_currency(struct walk *w, const cJSON *node, struct charge_params *p)
{
	const char *s;

	if (node == NULL) {
		verror(w->v, "currency", "is required");
		return;
	}
	if (!cJSON_IsString(node) || node->valuestring == NULL) {
		verror(w->v, "currency", "must be a string");
		return;
	}
	s = node->valuestring;
	if (strlen(s) != CURRENCY_LEN) {
		verror(w->v, "currency", "must be a three-letter currency code");
		return;
	}
	for (size_t i = 0; i < CURRENCY_LEN; i++) {
		char c = s[i];

		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c < 'a' || c > 'z') {
			verror(w->v, "currency",
			    "must be a three-letter currency code");
			return;
		}
		p->currency[i] = c;
	}
	p->currency[CURRENCY_LEN] = '\0';
}

static void
check_source(struct walk *w, const cJSON *node, struct charge_params *p)
{
	size_t plen = strlen(SOURCE_PREFIX), n;
	const char *s;

	if (node == NULL) {
		verror(w->v, "source", "is required");
		return;
	}
	if (!cJSON_IsString(node) || node->valuestring == NULL) {
		verror(w->v, "source", "must be a string");
		return;
	}
	s = node->valuestring;
	n = strlen(s);
	if (n <= plen || n - plen > SOURCE_TOKEN_MAX ||
	    strncmp(s, SOURCE_PREFIX, plen) != 0)
		goto bad;
	for (size_t i = plen; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_'))
			goto bad;
	}
	memcpy(p->source, s, n + 1);
	return;
bad:
	verror(w->v, "source", "must be \"%s\" followed by 1 to %d letters, "
	    "digits or underscores", SOURCE_PREFIX, SOURCE_TOKEN_MAX);
}

static void
check_metadata(struct walk *w, const cJSON *node)
{
	char field[FIELD_SIZE];
	const cJSON *c;
	int n = 0;

	if (!cJSON_IsObject(node)) {
		verror(w->v, "metadata", "must be an object");
		return;
	}
	for (c = node->child; c != NULL; c = c->next)
		n++;
	if (n > METADATA_KEYS_MAX)
		verror(w->v, "metadata", "must have at most %d keys",
		    METADATA_KEYS_MAX);
	for (c = node->child; c != NULL; c = c->next) {
		const char *k = c->string != NULL ? c->string : "";

		path_member(field, sizeof(field), "metadata", k);
		if (*k == '\0')
			verror(w->v, "metadata", "keys must not be empty");
		else if (strlen(k) > METADATA_KEY_MAX)
			verror(w->v, field, "key must be at most %d bytes",
			    METADATA_KEY_MAX);
		(void)check_string(w, c, field, METADATA_VALUE_MAX);
	}
}

static int
line_item_member_known(const char *name)
{
	return strcmp(name, "description") == 0 ||
	    strcmp(name, "quantity") == 0 || strcmp(name, "unit_amount") == 0;
}

/* Checks one line item; adds quantity * unit_amount to *sum when valid. */
static int
check_line_item(struct walk *w, const cJSON *item, size_t i, long long *sum)
{
	char base[FIELD_SIZE];
	char field[sizeof(base)];
	const cJSON *c, *m;
	long long qty = 0, unit = 0;
	int bad = 0;

	path_index(base, sizeof(base), "line_items", i);
	if (!cJSON_IsObject(item)) {
		verror(w->v, base, "must be an object");
		return -1;
	}
	for (c = item->child; c != NULL; c = c->next) {
		const char *k = c->string != NULL ? c->string : "";

		if (!line_item_member_known(k)) {
			path_member(field, sizeof(field), base, k);
			verror(w->v, field, "unknown field");
			bad = 1;
		}
	}

	path_member(field, sizeof(field), base, "description");
	m = cJSON_GetObjectItemCaseSensitive(item, "description");
	if (m == NULL) {
		verror(w->v, field, "is required");
		bad = 1;
	} else if (check_string(w, m, field, LINE_ITEM_DESC_MAX) == -1)
		bad = 1;

	path_member(field, sizeof(field), base, "quantity");
	m = cJSON_GetObjectItemCaseSensitive(item, "quantity");
	if (m == NULL) {
		verror(w->v, field, "is required");
		bad = 1;
	} else if (check_int(w, m, field, LINE_ITEM_QTY_MIN,
	    LINE_ITEM_QTY_MAX, &qty) == -1)
		bad = 1;

	path_member(field, sizeof(field), base, "unit_amount");
	m = cJSON_GetObjectItemCaseSensitive(item, "unit_amount");
	if (m == NULL) {
		verror(w->v, field, "is required");
		bad = 1;
	} else if (check_int(w, m, field, LINE_ITEM_UNIT_MIN,
	    LINE_ITEM_UNIT_MAX, &unit) == -1)
		bad = 1;

	if (bad)
		return -1;
	/*
	 * qty * unit <= 10^4 * 10^8 and at most LINE_ITEMS_MAX items are
	 * summed, so this cannot overflow; the guard keeps it true if the
	 * bounds ever change.
	 */
	if (*sum > LLONG_MAX - qty * unit)
		return -1;
	*sum += qty * unit;
	return 0;
}

/* Checks line_items; *sum is their total, -1 when it cannot be computed. */
static void
check_line_items(struct walk *w, const cJSON *node, long long *sum)
{
	const cJSON *c;
	size_t n = 0, i;
	int bad = 0;

	*sum = -1;
	if (!cJSON_IsArray(node)) {
		verror(w->v, "line_items", "must be an array");
		return;
	}
	for (c = node->child; c != NULL; c = c->next)
		n++;
	if (n > LINE_ITEMS_MAX) {
		verror(w->v, "line_items", "must have at most %d items",
		    LINE_ITEMS_MAX);
		bad = 1;
	}
	*sum = 0;
	for (i = 0, c = node->child; c != NULL; c = c->next, i++) {
		if (w->v->n >= VALIDATION_ERRORS_MAX)
			break;
		if (check_line_item(w, c, i, sum) == -1)
			bad = 1;
	}
	if (bad)
		*sum = -1;
}

static int
top_field_known(const char *name)
{
	static const char *const known[] = {
		"amount", "currency", "source", "customer", "description",
		"metadata", "line_items",
	};

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(name, known[i]) == 0)
			return 1;
	return 0;
}

/* The schema of SPEC section 2 over the (first occurrence of) members. */
static void
check_body(struct walk *w, const cJSON *root, struct charge_params *p,
    struct fields *f)
{
	char field[FIELD_SIZE];
	const cJSON *c, *amount;
	long long sum = -1;
	int amount_ok = 0;

	for (c = root->child; c != NULL; c = c->next) {
		const char *k = c->string != NULL ? c->string : "";

		if (!top_field_known(k)) {
			path_member(field, sizeof(field), "", k);
			verror(w->v, field, "unknown field");
		}
	}

	amount = cJSON_GetObjectItemCaseSensitive(root, "amount");
	if (amount == NULL)
		verror(w->v, "amount", "is required");
	else if (check_int(w, amount, "amount", AMOUNT_MIN, AMOUNT_MAX,
	    &p->amount) == 0)
		amount_ok = 1;

	check_currency(w, cJSON_GetObjectItemCaseSensitive(root, "currency"),
	    p);
	check_source(w, cJSON_GetObjectItemCaseSensitive(root, "source"), p);

	f->customer = member_optional(root, "customer");
	if (f->customer != NULL)
		(void)check_string(w, f->customer, "customer", CUSTOMER_MAX);
	f->description = member_optional(root, "description");
	if (f->description != NULL)
		(void)check_string(w, f->description, "description",
		    DESCRIPTION_MAX);
	f->metadata = member_optional(root, "metadata");
	if (f->metadata != NULL)
		check_metadata(w, f->metadata);
	f->line_items = member_optional(root, "line_items");
	if (f->line_items != NULL) {
		check_line_items(w, f->line_items, &sum);
		/* an empty list is the same as no list: nothing to sum */
		if (amount_ok && sum >= 0 && f->line_items->child != NULL &&
		    sum != p->amount)
			verror(w->v, "amount", "must equal the sum of "
			    "line_items quantity * unit_amount (%lld)", sum);
	}
}

static int
name_cmp(const void *a, const void *b)
{
	const cJSON *const *x = a, *const *y = b;

	return strcmp((*x)->string, (*y)->string);
}

static cJSON *
canonical_metadata(const cJSON *metadata)
{
	const cJSON **kv = NULL, *c;
	cJSON *m = NULL;
	size_t n = 0, i;

	m = cJSON_CreateObject();
	if (m == NULL || metadata == NULL)
		return m;
	for (c = metadata->child; c != NULL; c = c->next)
		n++;
	if (n == 0)
		return m;
	kv = calloc(n, sizeof(*kv));
	if (kv == NULL)
		goto fail;
	for (i = 0, c = metadata->child; c != NULL; c = c->next)
		kv[i++] = c;
	qsort(kv, n, sizeof(*kv), name_cmp);
	for (i = 0; i < n; i++)
		if (cJSON_AddStringToObject(m, kv[i]->string,
		    kv[i]->valuestring) == NULL)
			goto fail;
	free(kv);
	return m;
fail:
	free(kv);
	cJSON_Delete(m);
	return NULL;
}

static cJSON *
canonical_line_items(const cJSON *items)
{
	const cJSON *c;
	cJSON *a, *o;

	a = cJSON_CreateArray();
	if (a == NULL || items == NULL)
		return a;
	for (c = items->child; c != NULL; c = c->next) {
		const cJSON *d, *q, *u;

		d = cJSON_GetObjectItemCaseSensitive(c, "description");
		q = cJSON_GetObjectItemCaseSensitive(c, "quantity");
		u = cJSON_GetObjectItemCaseSensitive(c, "unit_amount");
		o = cJSON_CreateObject();
		if (o == NULL)
			goto fail;
		if (!cJSON_AddItemToArray(a, o)) {
			cJSON_Delete(o);
			goto fail;
		}
		if (cJSON_AddStringToObject(o, "description",
		    d->valuestring) == NULL ||
		    cJSON_AddNumberToObject(o, "quantity",
		    q->valuedouble) == NULL ||
		    cJSON_AddNumberToObject(o, "unit_amount",
		    u->valuedouble) == NULL)
			goto fail;
	}
	return a;
fail:
	cJSON_Delete(a);
	return NULL;
}

static int
add_optional_string(cJSON *obj, const char *name, const cJSON *value)
{
	if (value == NULL)
		return cJSON_AddNullToObject(obj, name) != NULL ? 0 : -1;
	return cJSON_AddStringToObject(obj, name, value->valuestring) != NULL ?
	    0 : -1;
}

/* Builds the canonical object of validated parameters; NULL on ENOMEM. */
static cJSON *
canonical_build(const struct charge_params *p, const struct fields *f)
{
	cJSON *o = NULL, *m = NULL, *li = NULL;

	o = cJSON_CreateObject();
	if (o == NULL)
		goto fail;
	/* amounts are <= AMOUNT_MAX, which cJSON prints exactly via %d */
	if (cJSON_AddNumberToObject(o, "amount", (double)p->amount) == NULL ||
	    cJSON_AddStringToObject(o, "currency", p->currency) == NULL ||
	    cJSON_AddStringToObject(o, "source", p->source) == NULL ||
	    add_optional_string(o, "customer", f->customer) == -1 ||
	    add_optional_string(o, "description", f->description) == -1)
		goto fail;
	m = canonical_metadata(f->metadata);
	if (m == NULL || !cJSON_AddItemToObject(o, "metadata", m))
		goto fail;
	m = NULL;
	li = canonical_line_items(f->line_items);
	if (li == NULL || !cJSON_AddItemToObject(o, "line_items", li))
		goto fail;
	return o;
fail:
	cJSON_Delete(li);
	cJSON_Delete(m);
	cJSON_Delete(o);
	return NULL;
}

int
validate_charge(const char *body, size_t len, struct charge_params *p,
    struct validation *v)
{
	struct lexer lx;
	struct walk w;
	struct fields f;
	struct charge_params out;
	const char *end = NULL;
	cJSON *root = NULL;
	size_t pos;
	int rc = -1;

	memset(&lx, 0, sizeof(lx));
	memset(&w, 0, sizeof(w));
	memset(&f, 0, sizeof(f));
	memset(&out, 0, sizeof(out));
	v->n = 0;

	if (body == NULL || len == 0) {
		verror(v, FIELD_BODY, "must be a JSON object, got an empty body");
		goto fail;
	}
	if (lex_body(body, len, &lx) == -1)
		goto oom;
	if (lx.too_deep) {
		verror(v, FIELD_BODY, "nests deeper than %d levels",
		    JSON_DEPTH_MAX);
		goto fail;
	}
	root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
	if (root == NULL) {
		if (!utf8_valid(body, len))
			verror(v, FIELD_BODY, "is not valid UTF-8");
		else if (end != NULL && end >= body && end <= body + len)
			verror(v, FIELD_BODY, "is not valid JSON (error at "
			    "byte %zu)", (size_t)(end - body));
		else
			verror(v, FIELD_BODY, "is not valid JSON");
		goto fail;
	}
	pos = (size_t)(end - body);
	if (lx.bad && lx.bad_at < pos) {
		verror(v, FIELD_BODY, "is not valid JSON (unexpected byte at "
		    "%zu)", lx.bad_at);
		goto fail;
	}
	while (pos < len && is_json_ws(body[pos]))
		pos++;
	if (pos != len) {
		verror(v, FIELD_BODY, "has unexpected data after the JSON value "
		    "at byte %zu", pos);
		goto fail;
	}
	if (!cJSON_IsObject(root)) {
		verror(v, FIELD_BODY, "must be a JSON object");
		goto fail;
	}

	w.lx = &lx;
	w.v = v;
	walk_node(&w, root, "");
	if (w.oom)
		goto oom;
	if (w.desync || w.next != lx.ntok) {
		verror(v, FIELD_BODY, "is not valid JSON");
		goto fail;
	}
	if (!w.utf8_reported && !utf8_valid(body, len))
		verror(v, FIELD_BODY, "is not valid UTF-8");
	if (w.nnum > 1)
		qsort(w.nums, w.nnum, sizeof(*w.nums), numflag_cmp);

	check_body(&w, root, &out, &f);
	if (v->n > 0)
		goto fail;
	out.canonical = canonical_build(&out, &f);
	if (out.canonical == NULL)
		goto oom;
	*p = out;
	rc = 0;
	goto done;
oom:
	verror(v, FIELD_BODY, "could not be checked: out of memory");
fail:
	if (v->n == 0)
		verror(v, FIELD_BODY, "is invalid");
done:
	free(lx.tok);
	free(w.nums);
	cJSON_Delete(root);
	return rc;
}

char *
validate_canonical_text(const struct charge_params *p, size_t *len)
{
	char *s, *copy;
	size_t n;

	if (p == NULL || p->canonical == NULL)
		return NULL;
	s = cJSON_PrintUnformatted(p->canonical);
	if (s == NULL)
		return NULL;
	/* hand back plain malloc memory whatever cJSON's hooks are */
	n = strlen(s);
	copy = malloc(n + 1);
	if (copy != NULL) {
		memcpy(copy, s, n + 1);
		if (len != NULL)
			*len = n;
	}
	cJSON_free(s);
	return copy;
}

void
charge_params_free(struct charge_params *p)
{
	if (p == NULL)
		return;
	cJSON_Delete(p->canonical);
	p->canonical = NULL;
}
