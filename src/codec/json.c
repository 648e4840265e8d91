/*
 * json.c - the strict JSON layer: one pass over a body's bytes lexes,
 * checks and parses it, decoding each string once into the cJSON node it
 * builds; afterwards, only when something was found, a walk of the tree
 * names the members the problems are in. The tokens (strings, numbers) are
 * read by json_lex.c; the values, the document's status and the walk are
 * here.
 *
 * Why not cJSON_Parse: cJSON is lenient (numbers become doubles, so "1.0",
 * "1e2" and "01" all read as 1; duplicate members, invalid UTF-8, raw control
 * characters, "\u0000", a BOM and any byte <= 0x20 as whitespace are all
 * accepted) and keeps no positions, so the raw text would need a second pass
 * of its own. The tree is cJSON's (cJSON_Create*, cJSON_Delete); only the
 * reading of the bytes is written here.
 *
 * What the parser accepts, and the byte each error names, are those of
 * cJSON 1.7.15's parser (the 400 bodies depend on them): any byte <= 0x20 is
 * whitespace to the grammar (the ones JSON does not allow are then reported
 * as JSON_BAD_BYTE), a BOM is skipped when at least two bytes follow it, a
 * missing member name is reported one byte after where its quote should be,
 * and a \u escape whose four characters are not hex digits decodes as U+0000
 * (see resync_error() in json_lex.c).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "defaults.h"
#include "json.h"
#include "json_lex.h"
#include "json_path.h"
#include "utf8.h"

#define BOM "\xef\xbb\xbf"
#define BOM_SKIP_MIN 5  /* body bytes for cJSON to skip a BOM */
#define DUP_SORT_MIN 16 /* members: from here, sort for duplicates */

static cJSON *parse_value(struct parser *ps);

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 when two of obj's n members have the same name, 0 if not, -1 on ENOMEM. */
static int
has_duplicates(const cJSON *obj, size_t n)
{
	const cJSON *a, *b;
	const char **names;
	size_t i;
	int dup = 0;

	if (n < DUP_SORT_MIN) {
		for (a = obj->child; a != NULL; a = a->next)
			for (b = a->next; b != NULL; b = b->next)
				if (strcmp(a->string, b->string) == 0)
					return 1;
		return 0;
	}
	if ((names = malloc(n * sizeof(*names))) == NULL)
		return -1;
	for (i = 0, a = obj->child; a != NULL; a = a->next)
		names[i++] = a->string;
	qsort(names, n, sizeof(*names), name_cmp);
	for (i = 1; i < n && !dup; i++)
		dup = strcmp(names[i - 1], names[i]) == 0;
	free(names);
	return dup;
}

/* A member name: a copy of its decoded text, for the member's node. */
static char *
parse_name(struct parser *ps)
{
	size_t n;
	char *name;

	if (string_token(ps) == -1)
		return NULL;
	n = strlen(ps->buf);
	if ((name = cJSON_malloc(n + 1)) == NULL) {
		abandon(ps, FAIL_NOMEM);
		return NULL;
	}
	memcpy(name, ps->buf, n + 1);
	return name;
}

/*
 * After a member of an array or object: a ',' (consumed, with the space
 * after it) gives 1, the closer (not consumed) 0, anything else a syntax
 * error and -1.
 */
static int
after_member(struct parser *ps, char closer)
{
	skip_ws(ps);
	if (ps->i < ps->len && ps->s[ps->i] == ',') {
		ps->i++;
		skip_ws(ps);
		return 1;
	}
	if (ps->i >= ps->len || ps->s[ps->i] != closer) {
		syntax_error(ps, ps->i, ps->i);
		return -1;
	}
	return 0;
}

static cJSON *
parse_array(struct parser *ps)
{
	cJSON *arr, *item;
	int more;

	if (++ps->depth > JSON_DEPTH_MAX)
		return abandon(ps, FAIL_DEEP);
	if ((arr = cJSON_CreateArray()) == NULL)
		return abandon(ps, FAIL_NOMEM);
	ps->i++;
	skip_ws(ps);
	if (ps->i < ps->len && ps->s[ps->i] == ']')
		goto close;
	for (;;) {
		if ((item = parse_value(ps)) == NULL)
			goto fail;
		(void)cJSON_AddItemToArray(arr, item);
		if ((more = after_member(ps, ']')) < 0)
			goto fail;
		if (!more)
			break;
	}
close:
	ps->i++;
	ps->depth--;
	return arr;
fail:
	cJSON_Delete(arr);
	return NULL;
}

static cJSON *
parse_object(struct parser *ps)
{
	size_t seq = ps->seq++, n = 0;
	cJSON *obj, *item;
	char *name;
	int dup, more;

	if (++ps->depth > JSON_DEPTH_MAX)
		return abandon(ps, FAIL_DEEP);
	if ((obj = cJSON_CreateObject()) == NULL)
		return abandon(ps, FAIL_NOMEM);
	ps->i++;
	skip_ws(ps);
	if (ps->i < ps->len && ps->s[ps->i] == '}')
		goto close;
	for (;;) {
		if (ps->i >= ps->len || ps->s[ps->i] != '"') {
			/* cJSON names the byte after the missing quote */
			syntax_error(ps, ps->i + 1, ps->i);
			goto fail;
		}
		if ((name = parse_name(ps)) == NULL)
			goto fail;
		if (ps->depth == 1)
			(void)snprintf(ps->top, sizeof(ps->top), "%s", name);
		skip_ws(ps);
		if (ps->i >= ps->len || ps->s[ps->i] != ':') {
			cJSON_free(name);
			syntax_error(ps, ps->i, ps->i);
			goto fail;
		}
		ps->i++;
		skip_ws(ps);
		if ((item = parse_value(ps)) == NULL) {
			cJSON_free(name);
			goto fail;
		}
		/* a copy already: cJSON_AddItemToObject() would copy it again */
		item->string = name;
		(void)cJSON_AddItemToArray(obj, item);
		n++;
		if ((more = after_member(ps, '}')) < 0)
			goto fail;
		if (!more)
			break;
	}
close:
	ps->i++;
	ps->depth--;
	if (n >= 2 && (dup = has_duplicates(obj, n)) != 0 &&
	    (dup == -1 || mark(ps, seq, MARK_DUP) == -1)) {
		abandon(ps, FAIL_NOMEM);
		goto fail;
	}
	return obj;
fail:
	cJSON_Delete(obj);
	return NULL;
}

static cJSON *
parse_value(struct parser *ps)
{
	const unsigned char *p = ps->s + ps->i;
	size_t left = ps->len - ps->i;
	cJSON *v;

	if (left == 0)
		return syntax_error(ps, ps->i, ps->i);
	/* a bound on the tree, whatever the body's size (JSON_VALUES_MAX) */
	if (++ps->values > JSON_VALUES_MAX)
		return abandon(ps, FAIL_MANY);
	switch (p[0]) {
	case '"':
		if (string_token(ps) == -1)
			return NULL;
		v = cJSON_CreateString(ps->buf);
		break;
	case '-':
	case '0':
	case '1':
	case '2':
	case '3':
	case '4':
	case '5':
	case '6':
	case '7':
	case '8':
	case '9': return parse_number(ps);
	case '[': return parse_array(ps);
	case '{': return parse_object(ps);
	case 'n':
		if (left < 4 || memcmp(p, "null", 4) != 0)
			return syntax_error(ps, ps->i, ps->i);
		v = cJSON_CreateNull();
		ps->i += 4;
		break;
	case 't':
		if (left < 4 || memcmp(p, "true", 4) != 0)
			return syntax_error(ps, ps->i, ps->i);
		v = cJSON_CreateTrue();
		ps->i += 4;
		break;
	case 'f':
		if (left < 5 || memcmp(p, "false", 5) != 0)
			return syntax_error(ps, ps->i, ps->i);
		v = cJSON_CreateFalse();
		ps->i += 5;
		break;
	default: return syntax_error(ps, ps->i, ps->i);
	}
	return v != NULL ? v : abandon(ps, FAIL_NOMEM);
}

/*
 * The bytes from s[from] on, after the value or a syntax error, read only for
 * what still decides the status: brackets outside strings (1 when they nest
 * deeper than JSON_DEPTH_MAX; an unterminated string ends the count) and
 * whether every byte is UTF-8.
 */
static int
tail_scan(struct parser *ps, size_t from, int depth)
{
	const unsigned char *s = ps->s;
	size_t i = from, k;
	int in_string = 0;

	while (i < ps->len) {
		unsigned char c = s[i];

		if (c >= 0x80) {
			if ((k = utf8_seq(s + i, ps->len - i)) == 0) {
				ps->not_utf8 = 1;
				k = 1;
			}
			i += k;
			continue;
		}
		if (in_string) {
			if (c == '"')
				in_string = 0;
			else if (c == '\\' && ++i < ps->len && s[i] >= 0x80)
				continue; /* escaped, but still UTF-8 */
		} else if (c == '"')
			in_string = 1;
		else if (c == '{' || c == '[') {
			if (++depth > JSON_DEPTH_MAX)
				return 1;
		} else if ((c == '}' || c == ']') && depth > 0)
			depth--;
		i++;
	}
	return 0;
}

static int
mark_cmp(const void *a, const void *b)
{
	const struct json_mark *ma = a, *mb = b;

	return ma->seq < mb->seq ? -1 : ma->seq > mb->seq;
}

enum json_status
json_parse(const char *buf, size_t len, struct json_doc *doc)
{
	struct parser ps;
	enum json_status st;
	size_t end, t;

	memset(doc, 0, sizeof(*doc));
	if (buf == NULL || len == 0)
		return JSON_EMPTY;
	memset(&ps, 0, offsetof(struct parser, stack));
	ps.s = (const unsigned char *)buf;
	ps.len = len;
	ps.buf = ps.stack;
	ps.bufcap = sizeof(ps.stack);
	if (len >= BOM_SKIP_MIN && memcmp(buf, BOM, 3) == 0) {
		ps.i = 3;
		ps.bad = 1;
		ps.bad_at = 0;
	}
	skip_ws(&ps);
	doc->root = parse_value(&ps);
	if (doc->root != NULL) {
		end = ps.i;
		for (t = end; t < len && is_json_ws(ps.s[t]); t++)
			;
		if (t < len && tail_scan(&ps, end, 0))
			st = JSON_TOO_DEEP;
		else if (ps.bad && ps.bad_at < end) {
			st = JSON_BAD_BYTE;
			doc->at = ps.bad_at;
		} else if (t < len) {
			st = JSON_TRAILING;
			doc->at = t;
		} else
			st = JSON_OK;
	} else if (ps.fail == FAIL_SYNTAX) {
		if (tail_scan(&ps, ps.resume, ps.depth))
			st = JSON_TOO_DEEP;
		else if (ps.not_utf8)
			st = JSON_NOT_UTF8;
		else {
			st = JSON_SYNTAX;
			doc->at = ps.fail_at < len ? ps.fail_at : len - 1;
		}
	} else if (ps.fail == FAIL_MANY) {
		/* nothing after is read, but nesting too deep still wins */
		if (tail_scan(&ps, ps.i, ps.depth))
			st = JSON_TOO_DEEP;
		else {
			st = JSON_TOO_MANY;
			(void)snprintf(doc->field, sizeof(doc->field), "%s",
			    ps.top);
		}
	} else
		st = ps.fail == FAIL_DEEP ? JSON_TOO_DEEP : JSON_NOMEM;
	if (ps.buf != ps.stack)
		free(ps.buf);
	if (st != JSON_OK) {
		cJSON_Delete(doc->root);
		doc->root = NULL;
		free(ps.marks);
		return st;
	}
	if (ps.unsorted)
		qsort(ps.marks, ps.nmarks, sizeof(*ps.marks), mark_cmp);
	doc->marks = ps.marks;
	doc->nmarks = ps.nmarks;
	return JSON_OK;
}

void
json_doc_free(struct json_doc *doc)
{
	if (doc == NULL)
		return;
	cJSON_Delete(doc->root);
	free(doc->marks);
	memset(doc, 0, sizeof(*doc));
}

/* The walk of json_problems(): marks are met in the order of their seq. */
struct walk {
	const struct json_mark *marks;
	size_t nmarks, next, seq;
	json_problem_fn *fn;
	void *ctx;
	int oom;
};

static unsigned char
walk_mark(struct walk *wk)
{
	size_t seq = wk->seq++;

	if (wk->next < wk->nmarks && wk->marks[wk->next].seq == seq)
		return wk->marks[wk->next++].flags;
	return 0;
}

static void
walk_string(struct walk *wk, unsigned char f, const char *field, int is_name)
{
	static const char *const msg[2][3] = {
		{ "value is not valid UTF-8",
		    "value contains an unescaped control character",
		    "value must not contain \\u0000" },
		{ "member name is not valid UTF-8",
		    "member name contains an unescaped control character",
		    "member name must not contain \\u0000" },
	};

	if (f & MARK_BAD_UTF8)
		wk->fn(wk->ctx, field, msg[is_name][0]);
	if (f & MARK_CTRL)
		wk->fn(wk->ctx, field, msg[is_name][1]);
	if (f & MARK_NUL)
		wk->fn(wk->ctx, field, msg[is_name][2]);
}

struct member_name {
	const char *name;
	size_t idx;
};

static int
member_name_cmp(const void *a, const void *b)
{
	const struct member_name *na = a, *nb = b;
	int cmp = strcmp(na->name, nb->name);

	if (cmp != 0)
		return cmp;
	return na->idx < nb->idx ? -1 : na->idx > nb->idx;
}

/* Reports each name that occurs more than once in obj, once, sorted. */
static void
walk_duplicates(struct walk *wk, const cJSON *obj, const char *path)
{
	char field[JSON_FIELD_SIZE];
	struct member_name *names;
	const cJSON *member;
	size_t n = 0, i;

	for (member = obj->child; member != NULL; member = member->next)
		n++;
	if ((names = calloc(n, sizeof(*names))) == NULL) {
		wk->oom = 1;
		return;
	}
	for (i = 0, member = obj->child; member != NULL;
	     member = member->next, i++) {
		names[i].name = member->string;
		names[i].idx = i;
	}
	qsort(names, n, sizeof(*names), member_name_cmp);
	for (i = 1; i < n; i++) {
		if (strcmp(names[i].name, names[i - 1].name) != 0)
			continue;
		if (i >= 2 && strcmp(names[i].name, names[i - 2].name) == 0)
			continue; /* already reported */
		json_path_member(field, sizeof(field), path, names[i].name);
		wk->fn(wk->ctx, field, "duplicate member");
	}
	free(names);
}

/* Pre-order, as the parser numbered: object, then each name and its value. */
static void
walk_node(struct walk *wk, const cJSON *node, const char *path)
{
	char field[JSON_FIELD_SIZE];
	const cJSON *member;
	unsigned char f;
	size_t i;

	if (wk->next >= wk->nmarks || wk->oom)
		return;
	if (cJSON_IsObject(node)) {
		if (walk_mark(wk) & MARK_DUP)
			walk_duplicates(wk, node, path);
		for (member = node->child; member != NULL;
		     member = member->next) {
			json_path_member(field, sizeof(field), path,
			    member->string);
			if ((f = walk_mark(wk)) != 0)
				walk_string(wk, f, field, 1);
			walk_node(wk, member, field);
		}
	} else if (cJSON_IsArray(node)) {
		for (i = 0, member = node->child; member != NULL;
		     member = member->next, i++) {
			json_path_index(field, sizeof(field), path, i);
			walk_node(wk, member, field);
		}
	} else if (cJSON_IsString(node) && (f = walk_mark(wk)) != 0)
		walk_string(wk, f, path, 0);
}

int
json_problems(const struct json_doc *doc, json_problem_fn *fn, void *ctx)
{
	struct walk wk;

	if (doc->root == NULL || doc->nmarks == 0)
		return 0;
	memset(&wk, 0, sizeof(wk));
	wk.marks = doc->marks;
	wk.nmarks = doc->nmarks;
	wk.fn = fn;
	wk.ctx = ctx;
	walk_node(&wk, doc->root, "");
	return wk.oom ? -1 : 0;
}
