/*
 * rc_table.h - what charge-reconcile keeps of every charge of the window:
 * 24 bytes (the request's and the id's 64-bit names, amount, currency,
 * status, whether it was an orphan), in one array that grows up to a cap.
 * Sorted once the walk is over, it answers "which charges does the
 * provider hold for this request" (phantoms) and "which requests have more
 * than one charge" (duplicates) without a second copy of anything. Pure.
 */
#ifndef CHARGE_RC_TABLE_H
#define CHARGE_RC_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "rc_wire.h"

#define RC_F_STATUS 0x3 /* enum rc_charge_status */
#define RC_F_ORPHAN 0x4 /* reported as an orphan by the walk */

struct rc_entry {
	uint64_t req;    /* rc_request_hash of the charge's charge_request */
	uint64_t id;     /* rc_id_hash of its id */
	uint32_t amount; /* UINT32_MAX: larger than any amount we send */
	char cur[3];     /* the currency's first 3 bytes, NUL-padded */
	uint8_t flags;
};

struct rc_table {
	struct rc_entry *v;
	size_t n, cap;
	size_t max; /* entries at most: the memory bound */
	int sorted;
};

/* An empty table of at most max entries (nothing allocated yet). */
void rc_table_init(struct rc_table *t, size_t max);

/* NULL-safe; the table is empty afterwards. */
void rc_table_free(struct rc_table *t);

/*
 * Adds the charge c as a charge of request (a downstream key: c's
 * charge_request, or the one its record proves), flags RC_F_ORPHAN when
 * orphan. 0; -1 when the table holds max entries; -2 on ENOMEM.
 */
int rc_table_add(struct rc_table *t, const struct rc_charge *c,
    const char *request, int orphan);

/* An entry's fields compared with an amount and currency: 1 when equal. */
int rc_entry_same_money(const struct rc_entry *e, long long amount,
    const char *currency);

/*
 * Sorts by (req, id) and folds entries with the same req and id into one
 * (a charge listed twice). Afterwards the lookups below work.
 */
void rc_table_sort(struct rc_table *t);

/*
 * The entries of one request after rc_table_sort: a pointer to the first,
 * their number in *n (NULL and 0 when none).
 */
const struct rc_entry *rc_table_find(const struct rc_table *t, uint64_t req,
    size_t *n);

/*
 * After rc_table_sort: the requests with more than one charge, ascending,
 * into out[0..max) (allocated by the caller); their number, which may
 * exceed max (only max are written). *charges_in receives how many
 * charges they hold, *orphans_in how many of those the walk had flagged as
 * orphans (so the orphan count can give them to the duplicates).
 */
size_t rc_table_duplicates(const struct rc_table *t, uint64_t *out, size_t max,
    long long *charges_in, long long *orphans_in);

/* 1 when req is in the ascending array reqs[0..n). */
int rc_req_in(const uint64_t *reqs, size_t n, uint64_t req);

#endif
