/*
 * table.h - an open-addressing hash table of pointers keyed by byte
 * strings. Written here rather than <search.h>'s hsearch_r because the
 * simulator prunes expired keys: hsearch has neither deletion nor growth.
 * Linear probing with backward-shift deletion (no tombstones), FNV-1a
 * hashes kept beside the slots, doubled at 70 % load.
 */
#ifndef SIM_TABLE_H
#define SIM_TABLE_H

#include <stddef.h>
#include <stdint.h>

/* Returns the key bytes of an item and their length in *n. */
typedef const char *(*sim_table_key_fn)(const void *item, size_t *n);

struct sim_table {
	void **items;
	uint64_t *hashes;
	size_t cap; /* a power of two, or 0 */
	size_t n;
	sim_table_key_fn key_of;
};

void sim_table_init(struct sim_table *t, sim_table_key_fn key_of);
/* The item with key k[0..n), or NULL. */
void *sim_table_get(const struct sim_table *t, const char *k, size_t n);
/* Adds item, whose key must not be in the table yet. */
void sim_table_put(struct sim_table *t, void *item);
/* Removes item (by its key) when present. */
void sim_table_del(struct sim_table *t, const void *item);
/* Frees the slots (not the items). */
void sim_table_free(struct sim_table *t);

#endif
