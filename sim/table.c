/*
 * table.c - open addressing, linear probing, backward-shift deletion.
 */
#include "table.h"

#include <stdlib.h>
#include <string.h>

#include "buf.h"

#define TABLE_FIRST_CAP 1024

void
sim_table_init(struct sim_table *t, sim_table_key_fn key_of)
{
	memset(t, 0, sizeof(*t));
	t->key_of = key_of;
}

static int
same_key(const struct sim_table *t, const void *item, const char *k, size_t n)
{
	size_t in;
	const char *ik = t->key_of(item, &in);

	return in == n && memcmp(ik, k, n) == 0;
}

void *
sim_table_get(const struct sim_table *t, const char *k, size_t n)
{
	uint64_t h;
	size_t i, mask;

	if (t->cap == 0)
		return NULL;
	h = sim_hash(k, n);
	mask = t->cap - 1;
	for (i = h & mask; t->items[i] != NULL; i = (i + 1) & mask)
		if (t->hashes[i] == h && same_key(t, t->items[i], k, n))
			return t->items[i];
	return NULL;
}

static void
insert(void **items, uint64_t *hashes, size_t cap, void *item, uint64_t h)
{
	size_t i, mask = cap - 1;

	for (i = h & mask; items[i] != NULL; i = (i + 1) & mask)
		;
	items[i] = item;
	hashes[i] = h;
}

static void
grow(struct sim_table *t)
{
	size_t cap = t->cap ? t->cap * 2 : TABLE_FIRST_CAP, i;
	void **items = calloc(cap, sizeof(*items));
	uint64_t *hashes = calloc(cap, sizeof(*hashes));

	if (items == NULL || hashes == NULL)
		sim_fatal("out of memory (a table of %zu slots)", cap);
	for (i = 0; i < t->cap; i++)
		if (t->items[i] != NULL)
			insert(items, hashes, cap, t->items[i], t->hashes[i]);
	free(t->items);
	free(t->hashes);
	t->items = items;
	t->hashes = hashes;
	t->cap = cap;
}

void
sim_table_put(struct sim_table *t, void *item)
{
	size_t n;
	const char *k = t->key_of(item, &n);

	if ((t->n + 1) * 10 > t->cap * 7)
		grow(t);
	insert(t->items, t->hashes, t->cap, item, sim_hash(k, n));
	t->n++;
}

void
sim_table_del(struct sim_table *t, const void *item)
{
	size_t n, i, j, mask, home;
	const char *k;
	uint64_t h;

	if (t->cap == 0)
		return;
	k = t->key_of(item, &n);
	h = sim_hash(k, n);
	mask = t->cap - 1;
	for (i = h & mask; t->items[i] != item; i = (i + 1) & mask)
		if (t->items[i] == NULL)
			return;
	/* shift back every later item of the run that may move into the gap */
	j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (t->items[j] == NULL)
			break;
		home = t->hashes[j] & mask;
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			t->items[i] = t->items[j];
			t->hashes[i] = t->hashes[j];
			i = j;
		}
	}
	t->items[i] = NULL;
	t->n--;
}

void
sim_table_free(struct sim_table *t)
{
	free(t->items);
	free(t->hashes);
	memset(t, 0, sizeof(*t));
}
