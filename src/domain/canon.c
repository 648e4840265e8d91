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
#include "util.h"

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

/*
 * The reader of what canon_text() wrote: a canonical text is compact JSON
 * that json.c already checked when it was made, so a member's value is
 * found by skipping the values before it (strings to their closing quote,
 * objects and arrays to their bracket), which costs a fraction of parsing
 * the text again into a tree.
 */

/* The index after the string that begins at t[i] (a quote), or len + 1. */
static size_t
skip_string(const char *t, size_t len, size_t i)
{
	for (i++; i < len; i++) {
		if (t[i] == '\\')
			i++;
		else if (t[i] == '"')
			return i + 1;
	}
	return len + 1;
}

/* The index after the value that begins at t[i], or len + 1. */
static size_t
skip_value(const char *t, size_t len, size_t i)
{
	size_t depth = 0;

	if (i < len && t[i] == '"')
		return skip_string(t, len, i);
	if (i < len && t[i] != '{' && t[i] != '[') {
		while (i < len && t[i] != ',' && t[i] != '}' && t[i] != ']')
			i++;
		return i;
	}
	while (i < len) {
		switch (t[i]) {
		case '"': i = skip_string(t, len, i); continue;
		case '{':
		case '[': depth++; break;
		case '}':
		case ']':
			if (--depth == 0)
				return i + 1;
			break;
		default: break;
		}
		i++;
	}
	return len + 1;
}

const char *
canon_value_end(const char *p, const char *end)
{
	size_t len = (size_t)(end - p), i = skip_value(p, len, 0);

	return i > len ? NULL : p + i;
}

int
canon_string_member(const char *text, size_t len, const char *name,
    const char **s, size_t *n)
{
	size_t namelen = strlen(name), i = 1, k, v, end;

	if (len < 2 || text[0] != '{')
		return -1;
	if (text[1] == '}')
		return 0;
	for (;;) {
		if (i >= len || text[i] != '"')
			return -1;
		k = i;
		if ((i = skip_string(text, len, i)) >= len || text[i] != ':')
			return -1;
		v = i + 1;
		if ((end = skip_value(text, len, v)) > len || end == v)
			return -1;
		if (i - k - 2 == namelen &&
		    memcmp(text + k + 1, name, namelen) == 0) {
			if (end - v == 4 && memcmp(text + v, "null", 4) == 0)
				return 0;
			if (text[v] != '"')
				return -1;
			*s = text + v + 1;
			*n = end - v - 2;
			return 1;
		}
		if (end >= len)
			return -1;
		if (text[end] == '}')
			return 0;
		if (text[end] != ',')
			return -1;
		i = end + 1;
	}
}

int
canon_string_byte(const char *s, size_t n, size_t *i)
{
	int hi, lo;
	char c;

	if (*i >= n)
		return -1;
	if ((c = s[(*i)++]) != '\\')
		return (unsigned char)c;
	if (*i >= n)
		return -1;
	switch (s[(*i)++]) {
	case '"': return '"';
	case '\\': return '\\';
	case 'b': return '\b';
	case 'f': return '\f';
	case 'n': return '\n';
	case 'r': return '\r';
	case 't': return '\t';
	case 'u':
		if (n - *i < 4 || s[*i] != '0' || s[*i + 1] != '0' ||
		    (hi = util_hex_digit(s[*i + 2])) < 0 ||
		    (lo = util_hex_digit(s[*i + 3])) < 0 || hi > 1)
			return -1; /* put_string() writes \u00xx below 0x20 only */
		*i += 4;
		return hi << 4 | lo;
	default: return -1;
	}
}
