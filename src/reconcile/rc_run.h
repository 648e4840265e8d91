/*
 * rc_run.h - one reconciliation: the provider's charges of a window
 * against the records in Redis, read only.
 *
 *   1. every page of GET /v1/charges over the window: each succeeded
 *      charge that carries the responder's metadata is looked up under its
 *      record's name (HMGET per page, pipelined): no record, or a record
 *      failed/unknown/expired/of another request/naming another charge is
 *      an orphan; every charge with a charge_request goes into the table
 *      (rc_table.h, 24 bytes each);
 *   2. the table sorted: a request with more than one charge is a
 *      duplicate (its orphans are reported there); when there are
 *      duplicates, a second walk over the pages names their charges;
 *   3. SCAN over every record: a completed record created in the window
 *      must find its charge in the table (or, outside the list, by GET
 *      /v1/charges/<id>) with its amount and currency: else a phantom.
 *
 * A walk reads at most max_pages pages, and a starting_after it already
 * used (a list that returns to a charge: a cycle) ends it: both are
 * errors, not findings (the window was not read to its end).
 *
 * Memory: the table (24 bytes per charge of the window, at most
 * max_charges), one page of charges and one batch of records at a time,
 * and the findings listed (RC_LIST_MAX of each kind).
 */
#ifndef CHARGE_RC_RUN_H
#define CHARGE_RC_RUN_H

#include <stddef.h>

#include "config.h"
#include "rc_report.h"

#define RC_MAX_CHARGES_DEF 2000000 /* 2x the simulator's --max-keys */
#define RC_SCAN_COUNT 100          /* SCAN's COUNT: names per batch */
/* pages of the list one walk reads at most: 10 000 000 charges at 100 a
 * page, foreign ones included (--max-charges counts only the responder's) */
#define RC_MAX_PAGES_DEF 100000

struct rc_options {
	long long since_s, until_s; /* inclusive, Unix seconds */
	size_t max_charges;         /* the table's bound */
	long long max_pages;        /* pages one walk of the list reads */
	/* called after every page and batch (for a progress line), or NULL */
	void (
	    *progress)(const struct rc_report *r, const char *phase, void *arg);
	void *progress_arg;
};

/*
 * Runs one reconciliation into r (rc_report_init'ed): r->n counts and the
 * findings. 0, or -1 with errstr when the provider or Redis could not be
 * read to the end (the report is then incomplete: no result).
 */
int rc_run(const struct config *cfg, const struct rc_options *o,
    struct rc_report *r, char *errstr, size_t errlen);

#endif
