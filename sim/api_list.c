/*
 * api_list.c - GET /v1/charges (the list: a created range, cursors) and
 * GET /v1/charges/search (one metadata clause, paged), the caller's charges
 * newest first.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "api_int.h"

/* The query parameters of GET /v1/charges and /v1/charges/search. */
struct page_params {
	int64_t lo; /* created range, inclusive */
	int64_t hi;
	size_t limit;
	const struct sim_charge *after; /* starting_after, or the page cursor */
	const struct sim_charge *before; /* ending_before */
	const char *query;
	size_t query_len;
	bool has_query;
};

/* A decimal integer, an optional '-' and 1 to 18 digits, into *out. */
static bool
parse_int(const char *p, size_t n, int64_t *out)
{
	size_t i = n > 0 && p[0] == '-' ? 1 : 0;
	int64_t v = 0;

	if (n == i || n - i > 18)
		return false;
	for (; i < n; i++) {
		if (!isdigit((unsigned char)p[i]))
			return false;
		v = v * 10 + (p[i] - '0');
	}
	*out = p[0] == '-' ? -v : v;
	return true;
}

/* The caller's charge named by a cursor parameter, or 400 (NULL). */
static const struct sim_charge *
cursor_charge(struct sim_api *api, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	const struct sim_charge *c =
	    sim_store_charge_find(api->store, p->value, p->value_len);
	char msg[96];

	if (c != NULL && c->scope == x->scope)
		return c;
	snprintf(msg, sizeof(msg), "No such charge: '%.*s'",
	    (int)(p->value_len > 40 ? 40 : p->value_len), p->value);
	api_answer_invalid(x, "resource_missing", p->name, p->name_len, msg);
	return NULL;
}

/* The search cursor: "pg_" and the 24 hex digits of the last charge's id. */
static void
add_page_cursor(struct sim_buf *b, const struct sim_charge *c)
{
	sim_buf_adds(b, "\"pg_");
	sim_buf_add(b, c->id + 3, SIM_CHARGE_ID_LEN - 3);
	sim_buf_adds(b, "\"");
}

static const struct sim_charge *
page_cursor_charge(struct sim_api *api, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	char id[SIM_CHARGE_ID_LEN];
	const struct sim_charge *c = NULL;

	if (p->value_len == SIM_CHARGE_ID_LEN &&
	    memcmp(p->value, "pg_", 3) == 0) {
		memcpy(id, "ch_", 3);
		memcpy(id + 3, p->value + 3, SIM_CHARGE_ID_LEN - 3);
		c = sim_store_charge_find(api->store, id, sizeof(id));
	}
	if (c != NULL && c->scope == x->scope)
		return c;
	api_answer_invalid(x, "parameter_invalid", "page", 4,
	    "Invalid page: not a next_page of this search, or its charge has expired.");
	return NULL;
}

/* The walk over a list's or a search's query. */
struct page_walk {
	struct sim_api *api;
	struct page_params *pp;
	bool search;
};

/* Takes one parameter into w->pp; false after answering 400. */
typedef bool page_take(struct page_walk *w, struct sim_exchange_data *x,
    const struct sim_pair *p);

static bool
take_limit(struct page_walk *w, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	int64_t v;

	if (!parse_int(p->value, p->value_len, &v) || v < 1 ||
	    v > SIM_LIST_MAX_LIMIT) {
		api_answer_invalid(x, "parameter_invalid_integer", "limit", 5,
		    "Invalid integer: limit must be an integer from 1 to 100.");
		return false;
	}
	w->pp->limit = (size_t)v;
	return true;
}

/* created, created[gt], created[gte], created[lt], created[lte]: the
 * inclusive range narrowed. */
static bool
take_created(struct page_walk *w, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	struct page_params *pp = w->pp;
	char msg[160];
	int64_t v;

	if (!parse_int(p->value, p->value_len, &v)) {
		snprintf(msg, sizeof(msg),
		    "Invalid integer: %.*s must be a Unix time in seconds.",
		    (int)p->name_len, p->name);
		api_answer_invalid(x, "parameter_invalid_integer", p->name,
		    p->name_len, msg);
		return false;
	}
	if (api_name_is(p, "created[gt]"))
		v++;
	if (api_name_is(p, "created[lt]"))
		v--;
	if ((api_name_is(p, "created") || api_name_is(p, "created[gt]") ||
	        api_name_is(p, "created[gte]")) &&
	    v > pp->lo)
		pp->lo = v;
	if ((api_name_is(p, "created") || api_name_is(p, "created[lt]") ||
	        api_name_is(p, "created[lte]")) &&
	    v < pp->hi)
		pp->hi = v;
	return true;
}

static bool
take_after(struct page_walk *w, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	return (w->pp->after = cursor_charge(w->api, x, p)) != NULL;
}

static bool
take_before(struct page_walk *w, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	return (w->pp->before = cursor_charge(w->api, x, p)) != NULL;
}

static bool
take_query(struct page_walk *w, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	(void)x;
	w->pp->query = p->value;
	w->pp->query_len = p->value_len;
	w->pp->has_query = true;
	return true;
}

static bool
take_page(struct page_walk *w, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	return (w->pp->after = page_cursor_charge(w->api, x, p)) != NULL;
}

/* The parameters of a list and of a search. */
static const struct page_rule {
	const char *name;
	bool list;   /* GET /v1/charges takes it */
	bool search; /* GET /v1/charges/search takes it */
	page_take *take;
} page_rules[] = {
	{ "limit", true, true, take_limit },
	{ "created", true, false, take_created },
	{ "created[gt]", true, false, take_created },
	{ "created[gte]", true, false, take_created },
	{ "created[lt]", true, false, take_created },
	{ "created[lte]", true, false, take_created },
	{ "starting_after", true, false, take_after },
	{ "ending_before", true, false, take_before },
	{ "query", false, true, take_query },
	{ "page", false, true, take_page },
};

static bool
page_pair(struct sim_exchange_data *x, const struct sim_pair *p, void *arg)
{
	struct page_walk *w = arg;
	const struct page_rule *r;
	size_t k;

	for (k = 0; k < sizeof(page_rules) / sizeof(page_rules[0]); k++) {
		r = &page_rules[k];
		if ((w->search ? r->search : r->list) &&
		    api_name_is(p, r->name))
			return r->take(w, x, p);
	}
	api_answer_unknown(x, p);
	return false;
}

/*
 * Decodes and checks the query of a list (search false: created[...],
 * limit, starting_after, ending_before) or a search (query, limit, page);
 * false after answering 400.
 */
static bool
page_params(struct sim_api *api, struct sim_exchange_data *x, const char *qs,
    size_t qn, bool search, struct page_params *pp)
{
	struct page_walk w = { api, pp, search };

	memset(pp, 0, sizeof(*pp));
	pp->lo = INT64_MIN;
	pp->hi = INT64_MAX;
	pp->limit = SIM_LIST_DEFAULT_LIMIT;
	if (!api_form_walk(x, qs, qn,
	        "The query string is not valid percent-encoding.", page_pair,
	        &w))
		return false;
	if (pp->after != NULL && pp->before != NULL) {
		api_answer_invalid(x, "parameter_invalid", "ending_before", 13,
		    "You may only specify one of these parameters: starting_after, ending_before.");
		return false;
	}
	if (search && !pp->has_query) {
		api_answer_invalid(x, "parameter_missing", "query", 5,
		    "Missing required param: query.");
		return false;
	}
	return true;
}

/* The index of the first charge of v[0..n) created after hi. */
static size_t
upper_of(struct sim_charge *const *v, size_t n, int64_t hi)
{
	return hi == INT64_MAX ? n : sim_store_lower_bound(v, n, hi + 1, 0);
}

/*
 * GET /v1/charges: the caller's charges by (created, seq) descending, a
 * created range, cursors. O(log n + limit) with the scope's index.
 */
void
api_list_charges(struct sim_api *api, struct sim_exchange_data *x,
    const char *qs, size_t qn)
{
	struct sim_buf *b = &x->body_out;
	struct sim_charge *const *v;
	struct page_params pp;
	size_t n, bottom, top, last, j;
	bool more;

	if (!api_authenticate(api, x) ||
	    !page_params(api, x, qs, qn, false, &pp))
		return;
	v = sim_store_charges_of(api->store, x->scope, &n);
	bottom = pp.lo > pp.hi ? 0 : sim_store_lower_bound(v, n, pp.lo, 0);
	top = pp.lo > pp.hi ? 0 : upper_of(v, n, pp.hi);
	b->len = 0;
	sim_buf_adds(b, "{\"object\":\"list\",\"data\":[");
	if (pp.before != NULL) {
		/* the limit charges just newer than the cursor, newest first */
		j = sim_store_index_of(v, n, pp.before) + 1;
		if (j > bottom)
			bottom = j;
		last = top > bottom && top - bottom > pp.limit
		    ? bottom + pp.limit
		    : top;
		more = top > last;
		for (j = last; j > bottom; j--) {
			if (j < last)
				sim_buf_add(b, ",", 1);
			sim_buf_add(b, v[j - 1]->json, v[j - 1]->json_len);
		}
	} else {
		if (pp.after != NULL) {
			j = sim_store_index_of(v, n, pp.after);
			if (j < top)
				top = j;
		}
		last = top > bottom && top - bottom > pp.limit ? top - pp.limit
		                                               : bottom;
		more = last > bottom;
		for (j = top; j > last; j--) {
			if (j < top)
				sim_buf_add(b, ",", 1);
			sim_buf_add(b, v[j - 1]->json, v[j - 1]->json_len);
		}
	}
	sim_buf_adds(b, more ? "],\"has_more\":true" : "],\"has_more\":false");
	sim_buf_adds(b, ",\"url\":\"/v1/charges\"}");
	api_answer(x, 200);
}

static void
skip_ws(const char *s, size_t n, size_t *i)
{
	while (*i < n && (s[*i] == ' ' || s[*i] == '\t'))
		(*i)++;
}

/* Skips blanks, then the literal lit; false when it is not there. */
static bool
expect_lit(const char *s, size_t n, size_t *i, const char *lit)
{
	size_t l = strlen(lit);

	skip_ws(s, n, i);
	if (n - *i < l || memcmp(s + *i, lit, l) != 0)
		return false;
	*i += l;
	return true;
}

/*
 * A quoted string of the search language at s[*i..n) after blanks: '...'
 * or "...", a backslash makes the next character literal (\' is a quote,
 * \\ a backslash), as Stripe's query language escapes. Appended to out.
 */
static bool
parse_quoted(const char *s, size_t n, size_t *i, struct sim_buf *out)
{
	char q, c;

	skip_ws(s, n, i);
	if (*i >= n || (s[*i] != '\'' && s[*i] != '"'))
		return false;
	q = s[(*i)++];
	while (*i < n) {
		c = s[(*i)++];
		if (c == q)
			return true;
		if (c == '\\') {
			if (*i >= n)
				return false;
			c = s[(*i)++];
		}
		sim_buf_add(out, &c, 1);
	}
	return false;
}

/* True when the metadata form meta (name=value&..., percent-encoded as
 * sim_pct_encode does) has the pair want (encoded the same way). */
static bool
meta_has(const char *meta, size_t meta_len, const char *want, size_t wl)
{
	const char *p = meta, *end = meta + meta_len, *amp;
	size_t sl;

	while (p < end) {
		amp = memchr(p, '&', (size_t)(end - p));
		sl = amp ? (size_t)(amp - p) : (size_t)(end - p);
		if (sl == wl && memcmp(p, want, wl) == 0)
			return true;
		p += sl + 1;
	}
	return false;
}

/*
 * GET /v1/charges/search?query=metadata['NAME']:'VALUE'[&limit=N][&page=C]:
 * newest first, paged like Stripe's search (next_page). A linear scan of
 * the caller's charges from the cursor.
 */
void
api_search_charges(struct sim_api *api, struct sim_exchange_data *x,
    const char *qs, size_t qn)
{
	struct sim_buf name = { 0 }, value = { 0 }, want = { 0 };
	struct sim_buf *b = &x->body_out;
	struct sim_charge *const *v;
	const struct sim_charge *last = NULL;
	struct page_params pp;
	size_t n, j, got = 0, i = 0;
	bool more = false;

	if (!api_authenticate(api, x) ||
	    !page_params(api, x, qs, qn, true, &pp))
		return;
	if (!expect_lit(pp.query, pp.query_len, &i, "metadata") ||
	    !expect_lit(pp.query, pp.query_len, &i, "[") ||
	    !parse_quoted(pp.query, pp.query_len, &i, &name) ||
	    !expect_lit(pp.query, pp.query_len, &i, "]") ||
	    !expect_lit(pp.query, pp.query_len, &i, ":") ||
	    !parse_quoted(pp.query, pp.query_len, &i, &value) ||
	    (skip_ws(pp.query, pp.query_len, &i), i != pp.query_len)) {
		api_answer_invalid(x, "parameter_invalid", "query", 5,
		    "The simulator's search understands one clause: metadata['NAME']:'VALUE' (\\' is a quote, \\\\ a backslash).");
		goto done;
	}
	sim_pct_encode(&want, name.p ? name.p : "", name.len);
	sim_buf_add(&want, "=", 1);
	sim_pct_encode(&want, value.p ? value.p : "", value.len);
	v = sim_store_charges_of(api->store, x->scope, &n);
	j = pp.after != NULL ? sim_store_index_of(v, n, pp.after) : n;
	b->len = 0;
	sim_buf_adds(b, "{\"object\":\"search_result\",\"data\":[");
	for (; j > 0; j--) {
		if (!meta_has(v[j - 1]->meta, v[j - 1]->meta_len, want.p,
		        want.len) ||
		    world_search_hidden(api, v[j - 1]))
			continue;
		if (got == pp.limit) {
			more = true;
			break;
		}
		if (got++ > 0)
			sim_buf_add(b, ",", 1);
		sim_buf_add(b, v[j - 1]->json, v[j - 1]->json_len);
		last = v[j - 1];
	}
	sim_buf_adds(b,
	    more ? "],\"has_more\":true,\"next_page\":"
	         : "],\"has_more\":false,\"next_page\":");
	if (more)
		add_page_cursor(b, last);
	else
		sim_buf_adds(b, "null");
	sim_buf_adds(b, ",\"url\":\"/v1/charges/search\"}");
	api_answer(x, 200);
done:
	sim_buf_free(&name);
	sim_buf_free(&value);
	sim_buf_free(&want);
}
