/*
 * rc_report.h - what charge-reconcile found, and the three ways it says
 * so: a table for people, JSON for tools, a node-exporter textfile for
 * Prometheus. Counts are exact; the findings themselves are listed up to
 * RC_LIST_MAX of each kind (the rest are counted). Pure but for writing to
 * the FILE given.
 */
#ifndef CHARGE_RC_REPORT_H
#define CHARGE_RC_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "rc_wire.h"

#define RC_LIST_MAX 1000  /* findings listed per kind */
#define RC_DUP_IDS_MAX 16 /* charge ids listed per duplicate */

enum rc_orphan_reason {
	RC_ORPHAN_NO_RECORD,     /* no record under the charge's key */
	RC_ORPHAN_EXPIRED,       /* a record past its expires_ms */
	RC_ORPHAN_FAILED,        /* the record says failed */
	RC_ORPHAN_UNKNOWN,       /* the record is still unknown */
	RC_ORPHAN_OTHER_REQUEST, /* the record is another request's */
	RC_ORPHAN_OTHER_CHARGE,  /* the record names another charge */
};

enum rc_phantom_reason {
	RC_PHANTOM_NO_CHARGE,     /* the provider has no such charge */
	RC_PHANTOM_MONEY,         /* it holds it with another amount/currency */
	RC_PHANTOM_NOT_SUCCEEDED, /* it holds it, not succeeded */
	RC_PHANTOM_OTHER_REQUEST, /* it holds it for another request */
};

struct rc_orphan {
	struct rc_charge c;
	enum rc_orphan_reason why;
};

struct rc_phantom {
	char principal[PRINCIPAL_MAX + 1];
	char key[IDEM_KEY_MAX + 1];
	char request[WIRE_KEY_LEN + 1];
	char id[RC_ID_MAX]; /* the charge the record names */
	long long amount;
	char currency[RC_CURRENCY_MAX];
	long long created_ms; /* the record's */
	enum rc_phantom_reason why;
};

struct rc_duplicate {
	uint64_t req;
	char request[WIRE_KEY_LEN + 1];
	char principal[PRINCIPAL_MAX + 1];
	char key[IDEM_KEY_MAX + 1];
	long long charges; /* how many the provider holds */
	char ids[RC_DUP_IDS_MAX][RC_ID_MAX];
	int nids;
};

struct rc_counts {
	long long charges;    /* listed in the window */
	long long succeeded;  /* ... of which succeeded */
	long long failed;     /* ... declined (no money taken) */
	long long other;      /* ... neither (pending) */
	long long matched;    /* succeeded, a completed record names them */
	long long in_flight;  /* succeeded, the record still in progress */
	long long foreign;    /* without the responder's metadata */
	long long unverified; /* a record's body unreadable: by request only */
	long long records;    /* record names SCAN returned */
	long long records_checked; /* completed, created in the window */
	long long records_matched; /* ... whose charge the provider holds */
	long long lookups; /* charges asked for by id (outside the list) */
	long long orphans, phantoms, duplicates;
	long long duplicate_charges; /* charges in the duplicates */
};

struct rc_report {
	long long since_s, until_s; /* the window, Unix seconds, inclusive */
	long long now_ms;           /* when the run started */
	long long duration_ms;
	struct rc_counts n;
	struct rc_orphan *orphans; /* RC_LIST_MAX each, malloc'd */
	size_t norphans;
	struct rc_phantom *phantoms;
	size_t nphantoms;
	struct rc_duplicate *dups;
	size_t ndups;
};

/* 0, or -1 on ENOMEM. */
int rc_report_init(struct rc_report *r);
void rc_report_free(struct rc_report *r); /* NULL-safe */

/* Counts one orphan and lists it while there is room. */
void rc_report_orphan(struct rc_report *r, const struct rc_charge *c,
    enum rc_orphan_reason why);
void rc_report_phantom(struct rc_report *r, const struct rc_phantom *p);

/*
 * Lists a duplicate for req (its details are filled by the caller), while
 * there is room; NULL when there is none. Counting is the caller's.
 */
struct rc_duplicate *rc_report_add_duplicate(struct rc_report *r, uint64_t req);

/* The duplicate listed for req, or NULL. */
struct rc_duplicate *rc_report_duplicate(struct rc_report *r, uint64_t req);

/*
 * Takes the orphans that belong to a duplicate off the list (is_dup says
 * which requests are duplicated) and `counted` off n.orphans (how many
 * orphans the duplicates hold, listed or not): the duplicate reports them.
 */
void rc_report_orphans_to_duplicates(struct rc_report *r,
    int (*is_dup)(uint64_t req, void *arg), void *arg, long long counted);

/* 1 when nothing was found: no orphan, phantom or duplicate. */
int rc_report_clean(const struct rc_report *r);

/* The labels of the reasons, as the JSON and the table say them. */
const char *rc_orphan_reason_label(enum rc_orphan_reason why);
const char *rc_phantom_reason_label(enum rc_phantom_reason why);

/* The bytes rc_printable() needs for a string of n bytes, NUL included. */
#define RC_PRINT_MAX(n) (4 * ((n)-1) + 1)

/*
 * s for a terminal, into buf[buflen] (cut at a whole escape): \n \r \t
 * \\ and \xNN for every other byte outside printable ASCII, so that a
 * string from the provider or Redis can neither end a line of the table
 * nor send a control sequence. Returns buf.
 */
const char *rc_printable(const char *s, char *buf, size_t buflen);

/* The table for people (every string through rc_printable). 0, or -1
 * when the write failed. */
int rc_report_text(const struct rc_report *r, FILE *f);

/* One JSON object and a newline (docs/reconcile.schema.json). 0 or -1. */
int rc_report_json(const struct rc_report *r, FILE *f);

/*
 * The node-exporter textfile of the run: ok 1 with the counts, or ok 0
 * (a run that could not finish: r may be NULL) with only its time. 0 or -1.
 */
int rc_report_prometheus(const struct rc_report *r, int ok, long long now_ms,
    FILE *f);

#endif
