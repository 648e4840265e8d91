/*
 * rc_table.c - the charges of the window, 24 bytes each, sorted once.
 */
#include <stdlib.h>
#include <string.h>

#include "rc_table.h"

#define RC_TABLE_FIRST 4096 /* entries of the first allocation */

void
rc_table_init(struct rc_table *t, size_t max)
{
	memset(t, 0, sizeof(*t));
	t->max = max;
}

void
rc_table_free(struct rc_table *t)
{
	if (t == NULL)
		return;
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
	t->sorted = 0;
}

static void
cur_pack(char out[3], const char *currency)
{
	size_t i;

	for (i = 0; i < 3; i++)
		out[i] = currency != NULL && currency[0] != '\0' &&
		        (i == 0 || currency[i - 1] != '\0')
		    ? currency[i]
		    : '\0';
}

int
rc_table_add(struct rc_table *t, const struct rc_charge *c, const char *request,
    int orphan)
{
	struct rc_entry *e;
	size_t cap;

	if (t->n == t->max)
		return -1;
	if (t->n == t->cap) {
		cap = t->cap == 0 ? RC_TABLE_FIRST : t->cap * 2;
		if (cap > t->max)
			cap = t->max;
		if ((e = realloc(t->v, cap * sizeof(*e))) == NULL)
			return -2;
		t->v = e;
		t->cap = cap;
	}
	e = &t->v[t->n++];
	memset(e, 0, sizeof(*e));
	e->req = rc_request_hash(request);
	e->id = rc_id_hash(c->id, strlen(c->id));
	e->amount = c->amount < 0 || c->amount >= (long long)UINT32_MAX
	    ? UINT32_MAX
	    : (uint32_t)c->amount;
	cur_pack(e->cur, c->currency);
	e->flags = (uint8_t)((unsigned)c->status & RC_F_STATUS);
	if (orphan)
		e->flags |= RC_F_ORPHAN;
	t->sorted = 0;
	return 0;
}

int
rc_entry_same_money(const struct rc_entry *e, long long amount,
    const char *currency)
{
	char cur[3];

	cur_pack(cur, currency);
	return amount >= 0 && amount < (long long)UINT32_MAX &&
	    e->amount == (uint32_t)amount && currency[0] != '\0' &&
	    strlen(currency) <= 3 && memcmp(cur, e->cur, 3) == 0;
}

static int
entry_cmp(const void *a, const void *b)
{
	const struct rc_entry *x = a, *y = b;

	if (x->req != y->req)
		return x->req < y->req ? -1 : 1;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return 0;
}

void
rc_table_sort(struct rc_table *t)
{
	size_t i, w = 0;

	if (t->n > 1)
		qsort(t->v, t->n, sizeof(t->v[0]), entry_cmp);
	for (i = 0; i < t->n; i++) {
		if (w > 0 && entry_cmp(&t->v[w - 1], &t->v[i]) == 0) {
			/* the same charge twice: one orphan flag is enough */
			t->v[w - 1].flags |= t->v[i].flags & RC_F_ORPHAN;
			continue;
		}
		t->v[w++] = t->v[i];
	}
	t->n = w;
	t->sorted = 1;
}

const struct rc_entry *
rc_table_find(const struct rc_table *t, uint64_t req, size_t *n)
{
	size_t lo = 0, hi = t->n, mid, end;

	*n = 0;
	if (!t->sorted)
		return NULL;
	/* the first entry with req >= the one asked for */
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (t->v[mid].req < req)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (end = lo; end < t->n && t->v[end].req == req; end++)
		;
	if (end == lo)
		return NULL;
	*n = end - lo;
	return &t->v[lo];
}

size_t
rc_table_duplicates(const struct rc_table *t, uint64_t *out, size_t max,
    long long *charges_in, long long *orphans_in)
{
	size_t i, j, found = 0;

	*charges_in = 0;
	*orphans_in = 0;
	for (i = 0; i < t->n; i = j) {
		for (j = i + 1; j < t->n && t->v[j].req == t->v[i].req; j++)
			;
		if (j - i < 2)
			continue;
		if (found < max)
			out[found] = t->v[i].req;
		found++;
		*charges_in += (long long)(j - i);
		for (; i < j; i++)
			if (t->v[i].flags & RC_F_ORPHAN)
				(*orphans_in)++;
	}
	return found;
}

int
rc_req_in(const uint64_t *reqs, size_t n, uint64_t req)
{
	size_t lo = 0, hi = n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (reqs[mid] == req)
			return 1;
		if (reqs[mid] < req)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}
