/*
 * rc_report.c - the findings of one reconciliation and their three forms.
 */
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "rc_report.h"
#include "timefmt.h"

static const char *const orphan_labels[] = {
	[RC_ORPHAN_NO_RECORD] = "no-record",
	[RC_ORPHAN_EXPIRED] = "record-expired",
	[RC_ORPHAN_FAILED] = "record-failed",
	[RC_ORPHAN_UNKNOWN] = "record-unknown",
	[RC_ORPHAN_OTHER_REQUEST] = "record-of-another-request",
	[RC_ORPHAN_OTHER_CHARGE] = "record-names-another-charge",
};

static const char *const phantom_labels[] = {
	[RC_PHANTOM_NO_CHARGE] = "no-such-charge",
	[RC_PHANTOM_MONEY] = "amount-or-currency-differs",
	[RC_PHANTOM_NOT_SUCCEEDED] = "charge-not-succeeded",
	[RC_PHANTOM_OTHER_REQUEST] = "charge-of-another-request",
};

const char *
rc_orphan_reason_label(enum rc_orphan_reason why)
{
	return orphan_labels[why];
}

const char *
rc_phantom_reason_label(enum rc_phantom_reason why)
{
	return phantom_labels[why];
}

int
rc_report_init(struct rc_report *r)
{
	memset(r, 0, sizeof(*r));
	return 0;
}

void
rc_report_free(struct rc_report *r)
{
	if (r == NULL)
		return;
	free(r->orphans);
	free(r->phantoms);
	free(r->dups);
	memset(r, 0, sizeof(*r));
}

/*
 * Room for one more of n items of size sz in *v, which holds 16, then
 * twice as many at each power of two, at most RC_LIST_MAX: the new item,
 * zeroed, or NULL (full, or ENOMEM: counted, not listed).
 */
static void *
list_slot(void **v, size_t *n, size_t sz)
{
	size_t cap = 0;
	void *p;

	if (*n >= RC_LIST_MAX)
		return NULL;
	if (*n == 0)
		cap = 16;
	else if (*n >= 16 && (*n & (*n - 1)) == 0)
		cap = *n * 2 > RC_LIST_MAX ? RC_LIST_MAX : *n * 2;
	if (cap > 0) {
		if ((p = realloc(*v, cap * sz)) == NULL)
			return NULL;
		*v = p;
	}
	p = (char *)*v + *n * sz;
	memset(p, 0, sz);
	(*n)++;
	return p;
}

void
rc_report_orphan(struct rc_report *r, const struct rc_charge *c,
    enum rc_orphan_reason why)
{
	struct rc_orphan *o;

	r->n.orphans++;
	o = list_slot((void **)&r->orphans, &r->norphans, sizeof(*o));
	if (o == NULL)
		return;
	o->c = *c;
	o->why = why;
}

void
rc_report_phantom(struct rc_report *r, const struct rc_phantom *p)
{
	struct rc_phantom *q;

	r->n.phantoms++;
	q = list_slot((void **)&r->phantoms, &r->nphantoms, sizeof(*q));
	if (q != NULL)
		*q = *p;
}

struct rc_duplicate *
rc_report_add_duplicate(struct rc_report *r, uint64_t req)
{
	struct rc_duplicate *d;

	d = list_slot((void **)&r->dups, &r->ndups, sizeof(*d));
	if (d != NULL)
		d->req = req;
	return d;
}

struct rc_duplicate *
rc_report_duplicate(struct rc_report *r, uint64_t req)
{
	size_t i;

	for (i = 0; i < r->ndups; i++)
		if (r->dups[i].req == req)
			return &r->dups[i];
	return NULL;
}

void
rc_report_orphans_to_duplicates(struct rc_report *r,
    int (*is_dup)(uint64_t req, void *arg), void *arg, long long counted)
{
	size_t i, w = 0;

	for (i = 0; i < r->norphans; i++) {
		const struct rc_charge *c = &r->orphans[i].c;

		if (c->request[0] != '\0' &&
		    is_dup(rc_request_hash(c->request), arg))
			continue;
		r->orphans[w++] = r->orphans[i];
	}
	r->norphans = w;
	r->n.orphans -= counted;
	if (r->n.orphans < 0)
		r->n.orphans = 0;
}

int
rc_report_clean(const struct rc_report *r)
{
	return r->n.orphans == 0 && r->n.phantoms == 0 && r->n.duplicates == 0;
}

/* --- the table ------------------------------------------------------------ */

const char *
rc_printable(const char *s, char *buf, size_t buflen)
{
	static const char hexd[] = "0123456789abcdef";
	size_t o = 0;
	char e[5];
	int n;

	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		n = 2;
		e[0] = '\\';
		if (c == '\n' || c == '\r' || c == '\t' || c == '\\')
			e[1] = c == '\n' ? 'n'
			    : c == '\r'  ? 'r'
			    : c == '\t'  ? 't'
			                 : '\\';
		else if (c < 0x20 || c >= 0x7f) {
			e[1] = 'x';
			e[2] = hexd[c >> 4];
			e[3] = hexd[c & 0xf];
			n = 4;
		} else {
			e[0] = (char)c;
			n = 1;
		}
		if (o + (size_t)n >= buflen)
			break; /* whole escapes only */
		memcpy(buf + o, e, (size_t)n);
		o += (size_t)n;
	}
	buf[o] = '\0';
	return buf;
}

static const char *
when(long long ms, char out[RFC3339_MS_LEN + 1])
{
	if (timefmt_rfc3339_ms(ms, out, RFC3339_MS_LEN + 1) != 0)
		(void)snprintf(out, RFC3339_MS_LEN + 1, "%lld", ms);
	else if (strcmp(out + 19, ".000Z") == 0)
		memcpy(out + 19, "Z", 2); /* whole seconds */
	return out;
}

static void
text_counts(const struct rc_report *r, FILE *f)
{
	const struct rc_counts *n = &r->n;
	char a[RFC3339_MS_LEN + 1], b[RFC3339_MS_LEN + 1];

	fprintf(f, "charge-reconcile: window %s .. %s (%lld s)\n\n",
	    when(r->since_s * 1000, a), when(r->until_s * 1000, b),
	    r->until_s - r->since_s + 1);
	fprintf(f, "%-28s %10lld   succeeded %lld, declined %lld, other %lld\n",
	    "charges listed", n->charges, n->succeeded, n->failed, n->other);
	fprintf(f, "%-28s %10lld\n", "  matched to their record", n->matched);
	fprintf(f, "%-28s %10lld\n", "  record still in progress",
	    n->in_flight);
	fprintf(f, "%-28s %10lld\n", "  not the responder's", n->foreign);
	if (n->unverified > 0)
		fprintf(f, "%-28s %10lld\n", "  matched by request only",
		    n->unverified);
	fprintf(f, "%-28s %10lld   of %lld records scanned\n",
	    "completed records in window", n->records_checked, n->records);
	fprintf(f, "%-28s %10lld   %lld asked for by id\n",
	    "  charge found as recorded", n->records_matched, n->lookups);
	fprintf(f, "\n%-28s %10lld\n", "orphans", n->orphans);
	fprintf(f, "%-28s %10lld\n", "phantoms", n->phantoms);
	fprintf(f, "%-28s %10lld   %lld charges\n", "duplicates", n->duplicates,
	    n->duplicate_charges);
}

static void
text_findings(const struct rc_report *r, FILE *f)
{
	char p[RC_PRINT_MAX(PRINCIPAL_MAX + 1)],
	    k[RC_PRINT_MAX(IDEM_KEY_MAX + 1)];
	char id[RC_PRINT_MAX(RC_ID_MAX)], cur[RC_PRINT_MAX(RC_CURRENCY_MAX)];
	char t[RFC3339_MS_LEN + 1];
	size_t i;
	int j;

	if (r->n.orphans > 0) {
		fprintf(f,
		    "\nORPHANS: money taken, the client may have been told otherwise\n");
		fprintf(f, "%-30s %10s %-4s %-20s %-16s %-24s %s\n", "charge",
		    "amount", "cur", "created", "principal", "idempotency key",
		    "reason");
		for (i = 0; i < r->norphans; i++) {
			const struct rc_orphan *o = &r->orphans[i];

			fprintf(f, "%-30s %10lld %-4s %-20s %-16s %-24s %s\n",
			    rc_printable(o->c.id, id, sizeof(id)), o->c.amount,
			    rc_printable(o->c.currency, cur, sizeof(cur)),
			    when(o->c.created * 1000, t),
			    rc_printable(o->c.principal, p, sizeof(p)),
			    rc_printable(o->c.key, k, sizeof(k)),
			    rc_orphan_reason_label(o->why));
		}
	}
	if (r->n.phantoms > 0) {
		fprintf(f,
		    "\nPHANTOMS: a completed record whose charge the provider does not hold as recorded\n");
		fprintf(f, "%-16s %-24s %-30s %10s %-4s %-20s %s\n",
		    "principal", "idempotency key", "charge", "amount", "cur",
		    "record created", "reason");
		for (i = 0; i < r->nphantoms; i++) {
			const struct rc_phantom *q = &r->phantoms[i];

			fprintf(f, "%-16s %-24s %-30s %10lld %-4s %-20s %s\n",
			    rc_printable(q->principal, p, sizeof(p)),
			    rc_printable(q->key, k, sizeof(k)),
			    rc_printable(q->id, id, sizeof(id)), q->amount,
			    rc_printable(q->currency, cur, sizeof(cur)),
			    when(q->created_ms, t),
			    rc_phantom_reason_label(q->why));
		}
	}
	if (r->n.duplicates > 0) {
		fprintf(f,
		    "\nDUPLICATES: more than one charge for one request\n");
		for (i = 0; i < r->ndups; i++) {
			const struct rc_duplicate *d = &r->dups[i];

			fprintf(f, "%s  principal %s  key %s: %lld charges:",
			    rc_printable(d->request, id, sizeof(id)),
			    rc_printable(d->principal, p, sizeof(p)),
			    rc_printable(d->key, k, sizeof(k)), d->charges);
			for (j = 0; j < d->nids; j++)
				fprintf(f, " %s",
				    rc_printable(d->ids[j], id, sizeof(id)));
			fprintf(f, "\n");
		}
	}
	if ((long long)r->norphans < r->n.orphans ||
	    (long long)r->nphantoms < r->n.phantoms ||
	    (long long)r->ndups < r->n.duplicates)
		fprintf(f, "\n(listed: the first %d of each kind)\n",
		    RC_LIST_MAX);
}

int
rc_report_text(const struct rc_report *r, FILE *f)
{
	text_counts(r, f);
	text_findings(r, f);
	fprintf(f, "\n%s\n",
	    rc_report_clean(r)
	        ? "clean: every charge has its record, every record its charge"
	        : "NOT CLEAN: see above");
	return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}

/* --- JSON ----------------------------------------------------------------- */

static int
add_num(cJSON *o, const char *name, long long v)
{
	return cJSON_AddNumberToObject(o, name, (double)v) != NULL ? 0 : -1;
}

static int
add_str(cJSON *o, const char *name, const char *v)
{
	return cJSON_AddStringToObject(o, name, v) != NULL ? 0 : -1;
}

static int
add_time(cJSON *o, const char *name, long long ms)
{
	char t[RFC3339_MS_LEN + 1];

	return add_str(o, name, when(ms, t));
}

static cJSON *
json_counts(const struct rc_counts *n)
{
	cJSON *o = cJSON_CreateObject();
	int rc = 0;

	if (o == NULL)
		return NULL;
	rc |= add_num(o, "charges", n->charges);
	rc |= add_num(o, "succeeded", n->succeeded);
	rc |= add_num(o, "declined", n->failed);
	rc |= add_num(o, "other", n->other);
	rc |= add_num(o, "matched", n->matched);
	rc |= add_num(o, "in_flight", n->in_flight);
	rc |= add_num(o, "foreign", n->foreign);
	rc |= add_num(o, "matched_by_request_only", n->unverified);
	rc |= add_num(o, "records_scanned", n->records);
	rc |= add_num(o, "records_checked", n->records_checked);
	rc |= add_num(o, "records_matched", n->records_matched);
	rc |= add_num(o, "charges_asked_by_id", n->lookups);
	rc |= add_num(o, "orphans", n->orphans);
	rc |= add_num(o, "phantoms", n->phantoms);
	rc |= add_num(o, "duplicates", n->duplicates);
	rc |= add_num(o, "duplicate_charges", n->duplicate_charges);
	if (rc != 0) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static cJSON *
json_orphan(const struct rc_orphan *x)
{
	cJSON *o = cJSON_CreateObject();
	int rc = 0;

	if (o == NULL)
		return NULL;
	rc |= add_str(o, "charge", x->c.id);
	rc |= add_num(o, "amount", x->c.amount);
	rc |= add_str(o, "currency", x->c.currency);
	rc |= add_time(o, "created", x->c.created * 1000);
	rc |= add_str(o, "principal", x->c.principal);
	rc |= add_str(o, "idempotency_key", x->c.key);
	rc |= x->c.request[0] != '\0'
	    ? add_str(o, "request", x->c.request)
	    : (cJSON_AddNullToObject(o, "request") == NULL ? -1 : 0);
	rc |= add_str(o, "reason", rc_orphan_reason_label(x->why));
	if (rc != 0) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static cJSON *
json_phantom(const struct rc_phantom *x)
{
	cJSON *o = cJSON_CreateObject();
	int rc = 0;

	if (o == NULL)
		return NULL;
	rc |= add_str(o, "principal", x->principal);
	rc |= add_str(o, "idempotency_key", x->key);
	rc |= add_str(o, "request", x->request);
	rc |= add_str(o, "charge", x->id);
	rc |= add_num(o, "amount", x->amount);
	rc |= add_str(o, "currency", x->currency);
	rc |= add_time(o, "record_created", x->created_ms);
	rc |= add_str(o, "reason", rc_phantom_reason_label(x->why));
	if (rc != 0) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

static cJSON *
json_duplicate(const struct rc_duplicate *x)
{
	cJSON *o = cJSON_CreateObject(), *ids;
	int rc = 0, j;

	if (o == NULL)
		return NULL;
	rc |= add_str(o, "request", x->request);
	rc |= add_str(o, "principal", x->principal);
	rc |= add_str(o, "idempotency_key", x->key);
	rc |= add_num(o, "count", x->charges);
	if ((ids = cJSON_AddArrayToObject(o, "charges")) == NULL)
		rc = -1;
	for (j = 0; rc == 0 && j < x->nids; j++) {
		cJSON *s = cJSON_CreateString(x->ids[j]);

		if (s == NULL || !cJSON_AddItemToArray(ids, s)) {
			cJSON_Delete(s);
			rc = -1;
		}
	}
	if (rc != 0) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* Adds n items made by mk from v (of size sz) as array name of o. */
static int
json_list(cJSON *o, const char *name, const void *v, size_t n, size_t sz,
    cJSON *(*mk)(const void *))
{
	cJSON *a = cJSON_AddArrayToObject(o, name), *it;
	size_t i;

	if (a == NULL)
		return -1;
	for (i = 0; i < n; i++) {
		if ((it = mk((const char *)v + i * sz)) == NULL)
			return -1;
		if (!cJSON_AddItemToArray(a, it)) {
			cJSON_Delete(it);
			return -1;
		}
	}
	return 0;
}

static cJSON *
mk_orphan(const void *p)
{
	return json_orphan(p);
}

static cJSON *
mk_phantom(const void *p)
{
	return json_phantom(p);
}

static cJSON *
mk_duplicate(const void *p)
{
	return json_duplicate(p);
}

int
rc_report_json(const struct rc_report *r, FILE *f)
{
	cJSON *root = cJSON_CreateObject(), *w, *counts;
	char *text = NULL;
	int rc = -1;

	if (root == NULL)
		return -1;
	if ((w = cJSON_AddObjectToObject(root, "window")) == NULL ||
	    add_time(w, "since", r->since_s * 1000) != 0 ||
	    add_time(w, "until", r->until_s * 1000) != 0 ||
	    add_time(root, "run_at", r->now_ms) != 0 ||
	    add_num(root, "duration_ms", r->duration_ms) != 0 ||
	    cJSON_AddBoolToObject(root, "clean", rc_report_clean(r)) == NULL ||
	    (counts = json_counts(&r->n)) == NULL)
		goto done;
	if (!cJSON_AddItemToObject(root, "counts", counts)) {
		cJSON_Delete(counts);
		goto done;
	}
	if (json_list(root, "orphans", r->orphans, r->norphans,
	        sizeof(r->orphans[0]), mk_orphan) != 0 ||
	    json_list(root, "phantoms", r->phantoms, r->nphantoms,
	        sizeof(r->phantoms[0]), mk_phantom) != 0 ||
	    json_list(root, "duplicates", r->dups, r->ndups, sizeof(r->dups[0]),
	        mk_duplicate) != 0 ||
	    cJSON_AddBoolToObject(root, "truncated",
	        (long long)r->norphans < r->n.orphans ||
	            (long long)r->nphantoms < r->n.phantoms ||
	            (long long)r->ndups < r->n.duplicates) == NULL)
		goto done;
	if ((text = cJSON_PrintUnformatted(root)) == NULL)
		goto done;
	fprintf(f, "%s\n", text);
	rc = fflush(f) == 0 && !ferror(f) ? 0 : -1;
done:
	free(text);
	cJSON_Delete(root);
	return rc;
}

/* --- the textfile collector ----------------------------------------------- */

static void
prom_head(FILE *f, const char *name, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

int
rc_report_prometheus(const struct rc_report *r, int ok, long long now_ms,
    FILE *f)
{
	const struct rc_counts *n;

	prom_head(f, "charge_reconcile_success",
	    "1 when the last run read the whole window from the provider and Redis, else 0.");
	fprintf(f, "charge_reconcile_success %d\n", ok ? 1 : 0);
	prom_head(f, "charge_reconcile_last_run_timestamp_seconds",
	    "When the last run ended (Unix seconds).");
	fprintf(f, "charge_reconcile_last_run_timestamp_seconds %.3f\n",
	    (double)now_ms / 1000.0);
	if (!ok || r == NULL)
		return fflush(f) == 0 && !ferror(f) ? 0 : -1;
	n = &r->n;
	prom_head(f, "charge_reconcile_window_start_seconds",
	    "The start of the window reconciled (Unix seconds).");
	fprintf(f, "charge_reconcile_window_start_seconds %lld\n", r->since_s);
	prom_head(f, "charge_reconcile_window_end_seconds",
	    "The end of the window reconciled (Unix seconds).");
	fprintf(f, "charge_reconcile_window_end_seconds %lld\n", r->until_s);
	prom_head(f, "charge_reconcile_duration_seconds",
	    "How long the last run took.");
	fprintf(f, "charge_reconcile_duration_seconds %.3f\n",
	    (double)r->duration_ms / 1000.0);
	prom_head(f, "charge_reconcile_findings",
	    "What the last run found: orphans, phantoms, duplicates (0 when clean).");
	fprintf(f, "charge_reconcile_findings{kind=\"orphan\"} %lld\n",
	    n->orphans);
	fprintf(f, "charge_reconcile_findings{kind=\"phantom\"} %lld\n",
	    n->phantoms);
	fprintf(f, "charge_reconcile_findings{kind=\"duplicate\"} %lld\n",
	    n->duplicates);
	prom_head(f, "charge_reconcile_charges",
	    "The provider's charges in the window, by status.");
	fprintf(f, "charge_reconcile_charges{status=\"succeeded\"} %lld\n",
	    n->succeeded);
	fprintf(f, "charge_reconcile_charges{status=\"failed\"} %lld\n",
	    n->failed);
	fprintf(f, "charge_reconcile_charges{status=\"other\"} %lld\n",
	    n->other);
	prom_head(f, "charge_reconcile_matched",
	    "Succeeded charges of the window whose completed record names them.");
	fprintf(f, "charge_reconcile_matched %lld\n", n->matched);
	prom_head(f, "charge_reconcile_records_checked",
	    "Completed records created in the window, each checked against the provider.");
	fprintf(f, "charge_reconcile_records_checked %lld\n",
	    n->records_checked);
	return fflush(f) == 0 && !ferror(f) ? 0 : -1;
}
