/*
 * rc_run.c - one reconciliation, top to bottom: the charges page by page
 * (orphans), the table sorted (duplicates), the records batch by batch
 * (phantoms). See rc_run.h for the rules and the memory bound.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "digest.h"
#include "idem.h"
#include "provider_sync.h"
#include "provider_wire.h"
#include "rc_run.h"
#include "rc_table.h"
#include "redis.h"
#include "redis_sync.h"
#include "util.h"

/* The fields of a record it reads (docs/API.md §18.1), in this order. */
static const char *const rec_fields[] = { "state", "fingerprint", "created_ms",
	"expires_ms", "body", "body_file", "body_len", "body_sha256" };

enum {
	RCF_STATE,
	RCF_FINGERPRINT,
	RCF_CREATED_MS,
	RCF_EXPIRES_MS,
	RCF_BODY,
	RCF_BODY_FILE,
	RCF_BODY_LEN,
	RCF_BODY_SHA256,
	RCF_N
};

#define RC_SPILL_READ_MAX 134217728 /* 128 MiB: a spilled body at most */

/* A charge of a listed duplicate: its id's name, the duplicate's index. */
struct dup_id {
	uint64_t id;
	size_t dup;
};

struct run {
	const struct config *cfg;
	const struct rc_options *o;
	struct rc_report *r;
	struct provider_sync *pv;
	struct redis_sync *rd;
	struct rc_table t;
	struct rc_charge *page; /* RC_PAGE_LIMIT */
	char (*rkeys)[IDEM_RKEY_MAX];
	struct dup_id *dup_ids; /* the listed duplicates' charges, by id */
	size_t ndup_ids;
	long long pages;
	size_t npage; /* the charges of the page walk_page read */
	int more;     /* ... and its has_more */
	char *err;
	size_t errlen;
};

/* --- a record -------------------------------------------------------------- */

/* The field's string (NUL-terminated), or NULL when nil. */
static const char *
field(const struct redis_reply *rep, int i)
{
	const struct redis_reply *f = redis_reply_at(rep, (size_t)i);
	size_t len;

	return redis_reply_type(f) == REDIS_R_STRING ? redis_reply_str(f, &len)
	                                             : NULL;
}

static long long
field_ll(const struct redis_reply *rep, int i)
{
	const char *s = field(rep, i);
	unsigned long long v;

	if (s == NULL ||
	    util_decimal(s, strlen(s), 9000000000000000ULL, &v) != UTIL_DEC_OK)
		return 0;
	return (long long)v;
}

/*
 * The charge a completed record names, from its inline body or its spill
 * file (verified against body_len and body_sha256). 1 when known, 0 when
 * the body cannot be read here (a spill directory of another host).
 */
static int
record_charge(const struct run *x, const struct redis_reply *rep,
    char id[RC_ID_MAX], long long *amount, char currency[RC_CURRENCY_MAX])
{
	const struct redis_reply *b = redis_reply_at(rep, RCF_BODY);
	const char *file = field(rep, RCF_BODY_FILE);
	const char *sha = field(rep, RCF_BODY_SHA256);
	char path[2 * PATH_MAX_LEN], hex[2 * SHA256_LEN + 1], e[128];
	const char *inline_body;
	char *buf = NULL;
	size_t len = 0;
	int known = 0;

	if (redis_reply_type(b) == REDIS_R_STRING &&
	    (inline_body = redis_reply_str(b, &len)) != NULL)
		return rc_body_charge(inline_body, len, id, amount, currency) ==
		    0;
	if (file == NULL || strchr(file, '/') != NULL ||
	    (size_t)snprintf(path, sizeof(path), "%s/%s", x->cfg->spill_dir,
	        file) >= sizeof(path))
		return 0;
	if (util_read_file(path, RC_SPILL_READ_MAX, &buf, &len, e, sizeof(e)) !=
	    0)
		return 0;
	if ((long long)len == field_ll(rep, RCF_BODY_LEN) && sha != NULL &&
	    digest_sha256_hex(buf, len, hex) == 0 && strcmp(hex, sha) == 0)
		known = rc_body_charge(buf, len, id, amount, currency) == 0;
	free(buf);
	return known;
}

/* The downstream key of the record rkey holds with fingerprint fp. 0/-1. */
static int
record_request(const struct run *x, const char *principal, const char *key,
    size_t keylen, const char *fp, char out[WIRE_KEY_LEN + 1])
{
	if (fp == NULL || strlen(fp) != SHA256_HEX_LEN)
		return -1;
	return wire_downstream_key(x->cfg->provider_secret, principal, key,
	    keylen, fp, out);
}

/* --- the charges ----------------------------------------------------------- */

enum verdict { V_MATCHED, V_IN_FLIGHT, V_ORPHAN };

/*
 * What the record (rep: the HMGET of its fields) says of succeeded charge
 * c. req receives the record's downstream key when it is completed ("" if
 * not): a charge without charge_request in its metadata (made by an older
 * responder) joins the table under the request its record proves.
 */
static enum verdict
classify(struct run *x, const struct rc_charge *c,
    const struct redis_reply *rep, enum rc_orphan_reason *why,
    char req[WIRE_KEY_LEN + 1])
{
	const char *state = field(rep, RCF_STATE);
	char id[RC_ID_MAX], cur[RC_CURRENCY_MAX];
	long long amount, expires;
	int known;

	req[0] = '\0';
	*why = RC_ORPHAN_NO_RECORD;
	if (state == NULL)
		return V_ORPHAN;
	if (strcmp(state, "in_progress") == 0)
		return V_IN_FLIGHT;
	if (strcmp(state, "completed") != 0) {
		*why = strcmp(state, "failed") == 0 ? RC_ORPHAN_FAILED
		                                    : RC_ORPHAN_UNKNOWN;
		return V_ORPHAN;
	}
	expires = field_ll(rep, RCF_EXPIRES_MS);
	if (expires > 0 && expires <= x->r->now_ms) {
		*why = RC_ORPHAN_EXPIRED;
		return V_ORPHAN;
	}
	if (record_request(x, c->principal, c->key, c->keylen,
	        field(rep, RCF_FINGERPRINT), req) != 0)
		req[0] = '\0';
	if (c->request[0] != '\0' && strcmp(req, c->request) != 0) {
		*why = RC_ORPHAN_OTHER_REQUEST;
		return V_ORPHAN;
	}
	known = record_charge(x, rep, id, &amount, cur);
	if (known && strcmp(id, c->id) != 0) {
		*why = RC_ORPHAN_OTHER_CHARGE;
		return V_ORPHAN;
	}
	if (!known)
		x->r->n.unverified++;
	return V_MATCHED;
}

/* The first walk's page: counts, orphans, the table. 0 or -1. */
static int
visit_charges(struct run *x, size_t n)
{
	const char *keys[RC_PAGE_LIMIT] = { NULL };
	size_t lens[RC_PAGE_LIMIT] = { 0 }, m = 0, i;
	int slot[RC_PAGE_LIMIT], rc = -1, added;
	struct redis_reply *reps[RC_PAGE_LIMIT];
	struct rc_counts *cn = &x->r->n;
	enum rc_orphan_reason why;
	long len;

	for (i = 0; i < n; i++) {
		const struct rc_charge *c = &x->page[i];

		slot[i] = -1;
		cn->charges++;
		if (c->status == RC_CHARGE_SUCCEEDED)
			cn->succeeded++;
		else if (c->status == RC_CHARGE_FAILED)
			cn->failed++;
		else
			cn->other++;
		if (c->principal[0] == '\0') {
			cn->foreign++;
			continue;
		}
		if (c->status != RC_CHARGE_SUCCEEDED)
			continue;
		len = idem_key_name(x->rkeys[m], IDEM_RKEY_MAX,
		    x->cfg->key_prefix, c->principal, c->key, c->keylen);
		if (len < 0) {
			cn->foreign++;
			continue;
		}
		keys[m] = x->rkeys[m];
		lens[m] = (size_t)len;
		slot[i] = (int)m++;
	}
	if (redis_sync_hmget(x->rd, keys, lens, m, rec_fields, RCF_N, reps,
	        x->err, x->errlen) != 0)
		return -1;
	for (i = 0; i < n; i++) {
		const struct rc_charge *c = &x->page[i];
		char proven[WIRE_KEY_LEN + 1] = "";
		const char *req = c->request;
		int orphan = 0;

		if (slot[i] >= 0) {
			const struct redis_reply *rep = reps[slot[i]];

			if (redis_sync_error(rep) != NULL) {
				util_err(x->err, x->errlen, "Redis: %s: %s",
				    keys[slot[i]], redis_sync_error(rep));
				goto done;
			}
			switch (classify(x, c, rep, &why, proven)) {
			case V_MATCHED:
				cn->matched++;
				if (req[0] == '\0')
					req = proven;
				break;
			case V_IN_FLIGHT: cn->in_flight++; break;
			case V_ORPHAN:
				orphan = 1;
				rc_report_orphan(x->r, c, why);
				break;
			}
		}
		if (req[0] == '\0')
			continue;
		if ((added = rc_table_add(&x->t, c, req, orphan)) != 0) {
			util_err(x->err, x->errlen,
			    added == -1
			        ? "more than %zu charges in the window: narrow it (--since, --until) or raise --max-charges"
			        : "out of memory after %zu charges",
			    x->t.n);
			goto done;
		}
	}
	rc = 0;
done:
	for (i = 0; i < m; i++)
		redis_sync_free(reps[i]);
	return rc;
}

static int
dup_id_cmp(const void *a, const void *b)
{
	const struct dup_id *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * The second walk's page: the charges of the listed duplicates, found by
 * their ids (x->dup_ids, sorted), with or without charge_request.
 */
static int
visit_duplicates(struct run *x, size_t n)
{
	struct dup_id key, *hit;
	struct rc_duplicate *d;
	size_t i;

	for (i = 0; i < n; i++) {
		const struct rc_charge *c = &x->page[i];

		key.id = rc_id_hash(c->id, strlen(c->id));
		hit = bsearch(&key, x->dup_ids, x->ndup_ids,
		    sizeof(x->dup_ids[0]), dup_id_cmp);
		if (hit == NULL)
			continue;
		d = &x->r->dups[hit->dup];
		if (d->request[0] == '\0' && c->request[0] != '\0')
			memcpy(d->request, c->request, sizeof(d->request));
		if (d->principal[0] == '\0' && c->principal[0] != '\0') {
			memcpy(d->principal, c->principal,
			    sizeof(d->principal));
			memcpy(d->key, c->key, sizeof(d->key));
		}
		if (d->nids < RC_DUP_IDS_MAX)
			memcpy(d->ids[d->nids++], c->id, RC_ID_MAX);
	}
	return 0;
}

/* One page of the list after the cursor: fetched, parsed, visited; its
 * size in x->npage and has_more in x->more. 0 or -1 with x->err. */
static int
walk_page(struct run *x, int (*visit)(struct run *x, size_t n),
    const char *phase, const char *after, char *path, size_t pathlen)
{
	const char *body;
	size_t len, n;
	long status;
	int more;

	if (rc_list_path(x->o->since_s, x->o->until_s, after, path, pathlen) <
	    0) {
		util_err(x->err, x->errlen, "a charge id is too long");
		return -1;
	}
	if (provider_sync_get(x->pv, path, &body, &len, &status, x->err,
	        x->errlen) != 0)
		return -1;
	if (status != 200) {
		util_err(x->err, x->errlen,
		    "provider: GET /v1/charges answered %ld%s: %.200s", status,
		    status == 401 ? " (provider_api_key refused)"
		        : status == 404
		        ? " (no list of charges: GET /v1/charges)"
		        : "",
		    body);
		return -1;
	}
	if (rc_page_parse(body, len, x->page, RC_PAGE_LIMIT, &n, &more, x->err,
	        x->errlen) != 0)
		return -1;
	if (n == 0 && more) {
		util_err(x->err, x->errlen,
		    "provider: an empty page with has_more");
		return -1;
	}
	if (visit(x, n) != 0)
		return -1;
	x->pages++;
	x->npage = n;
	x->more = more;
	if (x->o->progress != NULL)
		x->o->progress(x->r, phase, x->o->progress_arg);
	return 0;
}

/*
 * The starting_after cursors one walk used, by rc_id_hash (0 stands for
 * empty, so a hash of 0 is kept as 1): open addressing, at most half full.
 * Two ids of one hash (1 in 10^10 at 10^5 pages) read as a cycle.
 */
struct cursors {
	uint64_t *slot;
	size_t cap, n; /* cap: 0 or a power of two */
};

/* Adds h: 0 when new, 1 when it was there, -1 out of memory. */
static int
cursors_add(struct cursors *c, uint64_t h)
{
	size_t i, j;

	h = h != 0 ? h : 1;
	if (2 * (c->n + 1) > c->cap) {
		size_t cap = c->cap != 0 ? 2 * c->cap : 64;
		uint64_t *v = calloc(cap, sizeof(*v));

		if (v == NULL)
			return -1;
		for (i = 0; i < c->cap; i++) {
			if (c->slot[i] == 0)
				continue;
			for (j = c->slot[i] & (cap - 1); v[j] != 0;
			     j = (j + 1) & (cap - 1))
				;
			v[j] = c->slot[i];
		}
		free(c->slot);
		c->slot = v;
		c->cap = cap;
	}
	for (j = h & (c->cap - 1); c->slot[j] != 0; j = (j + 1) & (c->cap - 1))
		if (c->slot[j] == h)
			return 1;
	c->slot[j] = h;
	c->n++;
	return 0;
}

/*
 * Where the list goes after the page of n charges: the next cursor into
 * after. 0, or -1 with x->err when it would read past max_pages or return
 * to a cursor it used (a cycle: has_more for ever).
 */
static int
walk_next(struct run *x, struct cursors *seen, long long pages, size_t n,
    char after[RC_ID_MAX])
{
	const char *last = x->page[n - 1].id;
	int known;

	if (pages >= x->o->max_pages) {
		util_err(x->err, x->errlen,
		    "provider: the list has more than %lld pages in the window (--max-pages): narrow it (--since, --until) or raise --max-pages",
		    x->o->max_pages);
		return -1;
	}
	if ((known = cursors_add(seen, rc_id_hash(last, strlen(last)))) < 0) {
		util_err(x->err, x->errlen, "out of memory");
		return -1;
	}
	if (known) {
		util_err(x->err, x->errlen,
		    "provider: the list returns to charge %s after %lld pages (a cycle in starting_after): its pages cannot be read to the end",
		    last, pages);
		return -1;
	}
	memcpy(after, last, RC_ID_MAX);
	return 0;
}

/*
 * Every page of the list over the window, newest first, each handed to
 * visit; at most max_pages, no cursor twice. 0 or -1 with x->err.
 */
static int
walk(struct run *x, int (*visit)(struct run *x, size_t n), const char *phase)
{
	char after[RC_ID_MAX] = "", path[2 * RC_ID_MAX + 128];
	struct cursors seen = { NULL, 0, 0 };
	long long pages = 0;
	int rc = -1;

	for (;;) {
		if (walk_page(x, visit, phase, after, path, sizeof(path)) < 0)
			break;
		pages++;
		if (!x->more) {
			rc = 0;
			break;
		}
		if (walk_next(x, &seen, pages, x->npage, after) != 0)
			break;
	}
	free(seen.slot);
	return rc;
}
static int
is_dup(uint64_t req, void *arg)
{
	const struct run *x = arg;
	size_t n;

	(void)rc_table_find(&x->t, req, &n);
	return n > 1;
}

/* The table sorted: the duplicates, and their charges named. 0 or -1. */
static int
duplicates(struct run *x)
{
	uint64_t *reqs = NULL;
	long long charges, orphans;
	size_t found, i;
	int rc = -1;

	rc_table_sort(&x->t);
	if ((reqs = malloc(RC_LIST_MAX * sizeof(*reqs))) == NULL) {
		util_err(x->err, x->errlen, "out of memory");
		return -1;
	}
	found =
	    rc_table_duplicates(&x->t, reqs, RC_LIST_MAX, &charges, &orphans);
	x->r->n.duplicates = (long long)found;
	x->r->n.duplicate_charges = charges;
	/* the listed duplicates, and the ids of their charges */
	if (found > 0 &&
	    (x->dup_ids = malloc((size_t)charges * sizeof(*x->dup_ids))) ==
	        NULL) {
		util_err(x->err, x->errlen, "out of memory");
		goto done;
	}
	for (i = 0; i < found && i < RC_LIST_MAX; i++) {
		struct rc_duplicate *d = rc_report_add_duplicate(x->r, reqs[i]);
		const struct rc_entry *e;
		size_t n, j;

		if (d == NULL)
			break;
		e = rc_table_find(&x->t, reqs[i], &n);
		d->charges = (long long)n;
		for (j = 0; j < n; j++) {
			x->dup_ids[x->ndup_ids].id = e[j].id;
			x->dup_ids[x->ndup_ids++].dup = x->r->ndups - 1;
		}
	}
	if (x->ndup_ids > 1)
		qsort(x->dup_ids, x->ndup_ids, sizeof(x->dup_ids[0]),
		    dup_id_cmp);
	rc_report_orphans_to_duplicates(x->r, is_dup, x, orphans);
	rc = found > 0 ? walk(x, visit_duplicates, "duplicates") : 0;
done:
	free(reqs);
	return rc;
}

/* --- the records ----------------------------------------------------------- */

/* c, asked for by id, against the record: a phantom's reason, or -1. */
static int
judge_charge(const struct rc_charge *c, const char *req, long long amount,
    const char *currency)
{
	if (c->request[0] != '\0' && strcmp(c->request, req) != 0)
		return RC_PHANTOM_OTHER_REQUEST;
	if (c->amount != amount || strcmp(c->currency, currency) != 0)
		return RC_PHANTOM_MONEY;
	if (c->status != RC_CHARGE_SUCCEEDED)
		return RC_PHANTOM_NOT_SUCCEEDED;
	return -1;
}

/*
 * The charge of the completed record p (id, amount, currency filled)
 * outside the table: GET /v1/charges/<id>. A phantom's reason, -1 when
 * found as recorded, -2 on failure (x->err).
 */
static int
ask_by_id(struct run *x, const struct rc_phantom *p)
{
	char path[3 * RC_ID_MAX + 16];
	struct rc_charge c;
	const char *body;
	long status;
	size_t len;

	x->r->n.lookups++;
	if (rc_charge_path(p->id, path, sizeof(path)) < 0) {
		util_err(x->err, x->errlen, "a charge id is too long");
		return -2;
	}
	if (provider_sync_get(x->pv, path, &body, &len, &status, x->err,
	        x->errlen) != 0)
		return -2;
	if (status == 404)
		return RC_PHANTOM_NO_CHARGE;
	if (status != 200) {
		util_err(x->err, x->errlen,
		    "provider: GET /v1/charges/%s answered %ld: %.200s", p->id,
		    status, body);
		return -2;
	}
	if (rc_charge_parse(body, len, &c, x->err, x->errlen) != 0)
		return -2;
	return judge_charge(&c, p->request, p->amount, p->currency);
}

/* One record (its name and HMGET reply): a phantom or not. 0 or -1. */
static int
check_record(struct run *x, const char *name, const struct redis_reply *rep)
{
	const char *state = field(rep, RCF_STATE);
	long long created = field_ll(rep, RCF_CREATED_MS);
	const struct rc_entry *e;
	struct rc_phantom p;
	size_t keylen, ne, i;
	uint64_t h;
	int why = -1;

	if (state == NULL || strcmp(state, "completed") != 0 ||
	    created < x->o->since_s * 1000 ||
	    created > x->o->until_s * 1000 + 999)
		return 0;
	memset(&p, 0, sizeof(p));
	if (idem_key_split(name, x->cfg->key_prefix, p.principal, p.key,
	        &keylen) != 0 ||
	    record_request(x, p.principal, p.key, keylen,
	        field(rep, RCF_FINGERPRINT), p.request) != 0)
		return 0; /* not a record's name, or no fingerprint */
	x->r->n.records_checked++;
	p.created_ms = created;
	e = rc_table_find(&x->t, rc_request_hash(p.request), &ne);
	if (!record_charge(x, rep, p.id, &p.amount, p.currency)) {
		/* the body is elsewhere: the request's charge must exist */
		x->r->n.unverified++;
		for (i = 0; i < ne; i++)
			if ((e[i].flags & RC_F_STATUS) == RC_CHARGE_SUCCEEDED) {
				x->r->n.records_matched++;
				break;
			}
		return 0;
	}
	h = rc_id_hash(p.id, strlen(p.id));
	for (i = 0; i < ne && e[i].id != h; i++)
		;
	if (i < ne) {
		if ((e[i].flags & RC_F_STATUS) != RC_CHARGE_SUCCEEDED)
			why = RC_PHANTOM_NOT_SUCCEEDED;
		else if (!rc_entry_same_money(&e[i], p.amount, p.currency))
			why = RC_PHANTOM_MONEY;
	} else if ((why = ask_by_id(x, &p)) == -2)
		return -1;
	if (why < 0) {
		x->r->n.records_matched++;
		return 0;
	}
	p.why = (enum rc_phantom_reason)why;
	rc_report_phantom(x->r, &p);
	return 0;
}

/* SCAN over every record, one batch at a time. 0 or -1. */
static int
records(struct run *x)
{
	char pattern[2 * KEY_PREFIX_MAX + 16];
	const char *keys[4 * RC_SCAN_COUNT];
	size_t lens[4 * RC_SCAN_COUNT], n, i, off;
	struct redis_reply *names = NULL, *reps[4 * RC_SCAN_COUNT];
	struct redis_sync_scan it;
	int more, rc = 0;

	if (redis_sync_match(x->cfg->key_prefix, pattern, sizeof(pattern)) <
	    0) {
		util_err(x->err, x->errlen, "key_prefix: too long");
		return -1;
	}
	redis_sync_scan_init(&it);
	do {
		more = redis_sync_scan(x->rd, &it, pattern, RC_SCAN_COUNT,
		    &names, x->err, x->errlen);
		if (more < 0)
			return -1;
		/* SCAN may return more than COUNT: in slices */
		for (off = 0; rc == 0 && off < redis_reply_len(names);
		     off += n) {
			n = redis_reply_len(names) - off;
			if (n > 4 * RC_SCAN_COUNT)
				n = 4 * RC_SCAN_COUNT;
			for (i = 0; i < n; i++) {
				keys[i] = redis_reply_str(redis_reply_at(names,
				                              off + i),
				    &lens[i]);
				if (keys[i] == NULL) {
					keys[i] = ""; /* not a name: none */
					lens[i] = 0;
				}
			}
			if (redis_sync_hmget(x->rd, keys, lens, n, rec_fields,
			        RCF_N, reps, x->err, x->errlen) != 0) {
				rc = -1;
				break;
			}
			for (i = 0; i < n; i++) {
				x->r->n.records++;
				if (rc == 0 &&
				    redis_reply_type(reps[i]) ==
				        REDIS_R_ARRAY &&
				    check_record(x, keys[i], reps[i]) != 0)
					rc = -1;
				redis_sync_free(reps[i]);
			}
		}
		redis_sync_free(names);
		names = NULL;
		if (x->o->progress != NULL)
			x->o->progress(x->r, "records", x->o->progress_arg);
	} while (rc == 0 && more > 0);
	return rc;
}

/* --- the run --------------------------------------------------------------- */

int
rc_run(const struct config *cfg, const struct rc_options *o,
    struct rc_report *r, char *errstr, size_t errlen)
{
	struct run x;
	int rc = -1;

	memset(&x, 0, sizeof(x));
	x.cfg = cfg;
	x.o = o;
	x.r = r;
	x.err = errstr;
	x.errlen = errlen;
	r->since_s = o->since_s;
	r->until_s = o->until_s;
	r->now_ms = now_wall_ms();
	rc_table_init(&x.t, o->max_charges);
	if ((x.page = calloc(RC_PAGE_LIMIT, sizeof(*x.page))) == NULL ||
	    (x.rkeys = calloc(RC_PAGE_LIMIT, sizeof(*x.rkeys))) == NULL) {
		util_err(errstr, errlen, "out of memory");
		goto done;
	}
	if ((x.pv = provider_sync_open(cfg, errstr, errlen)) == NULL ||
	    (x.rd = redis_sync_open(&cfg->redis, cfg->redis_timeout_ms, errstr,
	         errlen)) == NULL)
		goto done;
	if (walk(&x, visit_charges, "charges") != 0 || duplicates(&x) != 0 ||
	    records(&x) != 0)
		goto done;
	rc = 0;
done:
	r->duration_ms = now_wall_ms() - r->now_ms;
	redis_sync_close(x.rd);
	provider_sync_close(x.pv);
	rc_table_free(&x.t);
	free(x.dup_ids);
	free(x.rkeys);
	free(x.page);
	return rc;
}
