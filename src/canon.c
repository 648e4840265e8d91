/*
 * canon.c - the canonical form of a valid /charge body, written straight
 * from the parsed tree. It must stay byte for byte what cJSON 1.7.15's
 * cJSON_PrintUnformatted() printed for it (the fingerprints of stored
 * records and the charge objects depend on it): its string escapes, and
 * numbers as "%1.15g" prints them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"

#define CANON_START 512 /* bytes; a typical body's text fits */

#define PUT_LITERAL(o, s) put((o), (s), sizeof(s) - 1)

/* The text being written; fail once anything could not be. */
struct out {
	char *p;
	size_t n, cap;
	int fail;
};

/* Where n more bytes go, or NULL (o->fail set). */
static char *
room(struct out *o, size_t n)
{
	size_t cap = o->cap ? o->cap : CANON_START;
	char *p;

	if (o->fail)
		return NULL;
	if (n <= o->cap - o->n)
		return o->p + o->n;
	while (n > cap - o->n)
		cap *= 2;
	if ((p = realloc(o->p, cap)) == NULL) {
		o->fail = 1;
		return NULL;
	}
	o->p = p;
	o->cap = cap;
	return o->p + o->n;
}

static void
put(struct out *o, const char *s, size_t n)
{
	char *d = room(o, n);

	if (d != NULL) {
		memcpy(d, s, n);
		o->n += n;
	}
}

/*
 * s quoted as cJSON's print_string_ptr() does: '"', '\\' and bytes < 0x20
 * escaped (\b \f \n \r \t by name, the others as \u00xx in lower case),
 * every other byte as it is.
 */
static void
put_string(struct out *o, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = strlen(s);
	char *d = room(o, 6 * n + 2);

	if (d == NULL)
		return;
	*d++ = '"';
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c > 31 && c != '"' && c != '\\') {
			*d++ = (char)c;
			continue;
		}
		*d++ = '\\';
		switch (c) {
		case '"': *d++ = '"'; break;
		case '\\': *d++ = '\\'; break;
		case '\b': *d++ = 'b'; break;
		case '\f': *d++ = 'f'; break;
		case '\n': *d++ = 'n'; break;
		case '\r': *d++ = 'r'; break;
		case '\t': *d++ = 't'; break;
		default:
			*d++ = 'u';
			*d++ = '0';
			*d++ = '0';
			*d++ = hex[c >> 4];
			*d++ = hex[c & 0xf];
		}
	}
	*d++ = '"';
	o->n = (size_t)(d - o->p);
}

/*
 * An integral double below 10^15 in magnitude as "%1.15g" prints it: its
 * digits. No negative zero comes here: json.c reads "-0" as 0.
 */
static void
put_number(struct out *o, double d)
{
	char buf[24], *end = buf + sizeof(buf), *p = end;
	unsigned long long u = (unsigned long long)fabs(d);

	do
		*--p = (char)('0' + u % 10);
	while ((u /= 10) != 0);
	if (signbit(d))
		*--p = '-';
	put(o, p, (size_t)(end - p));
}

/* A string, or null for NULL. */
static void
put_optional(struct out *o, const cJSON *s)
{
	if (s == NULL)
		PUT_LITERAL(o, "null");
	else
		put_string(o, s->valuestring);
}

/* The members in bytewise order of their names; {} for NULL. */
static void
put_metadata(struct out *o, const cJSON *m)
{
	const cJSON *kv[METADATA_KEYS_MAX], *c;
	size_t n = 0, i, j;

	for (c = m != NULL ? m->child : NULL; c != NULL; c = c->next) {
		if (n == METADATA_KEYS_MAX) {
			o->fail = 1; /* schema_check() allows no more */
			return;
		}
		/* insertion sort: a few dozen keys, often in order already */
		for (j = n++; j > 0 && strcmp(kv[j - 1]->string, c->string) > 0;
		     j--)
			kv[j] = kv[j - 1];
		kv[j] = c;
	}
	PUT_LITERAL(o, "{");
	for (i = 0; i < n; i++) {
		if (i > 0)
			PUT_LITERAL(o, ",");
		put_string(o, kv[i]->string);
		PUT_LITERAL(o, ":");
		put_string(o, kv[i]->valuestring);
	}
	PUT_LITERAL(o, "}");
}

/* Each item's members in a fixed order; [] for NULL. */
static void
put_line_items(struct out *o, const cJSON *items)
{
	const cJSON *c;

	PUT_LITERAL(o, "[");
	for (c = items != NULL ? items->child : NULL; c != NULL; c = c->next) {
		if (c != items->child)
			PUT_LITERAL(o, ",");
		PUT_LITERAL(o, "{\"description\":");
		put_string(o,
		    cJSON_GetObjectItemCaseSensitive(c, "description")
		        ->valuestring);
		PUT_LITERAL(o, ",\"quantity\":");
		put_number(o,
		    cJSON_GetObjectItemCaseSensitive(c, "quantity")
		        ->valuedouble);
		PUT_LITERAL(o, ",\"unit_amount\":");
		put_number(o,
		    cJSON_GetObjectItemCaseSensitive(c, "unit_amount")
		        ->valuedouble);
		PUT_LITERAL(o, "}");
	}
	PUT_LITERAL(o, "]");
}

char *
canon_text(const struct charge_fields *f, size_t *len)
{
	struct out o = { NULL, 0, 0, 0 };

	PUT_LITERAL(&o, "{\"amount\":");
	put_number(&o, (double)f->amount);
	PUT_LITERAL(&o, ",\"currency\":");
	put_string(&o, f->currency);
	PUT_LITERAL(&o, ",\"source\":");
	put_string(&o, f->source);
	PUT_LITERAL(&o, ",\"customer\":");
	put_optional(&o, f->customer);
	PUT_LITERAL(&o, ",\"description\":");
	put_optional(&o, f->description);
	PUT_LITERAL(&o, ",\"metadata\":");
	put_metadata(&o, f->metadata);
	PUT_LITERAL(&o, ",\"line_items\":");
	put_line_items(&o, f->line_items);
	PUT_LITERAL(&o, "}");
	if (room(&o, 1) == NULL) {
		free(o.p);
		return NULL;
	}
	o.p[o.n] = '\0';
	if (len != NULL)
		*len = o.n;
	return o.p;
}
