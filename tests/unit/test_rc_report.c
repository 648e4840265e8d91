/*
 * test_rc_report.c - the findings and their three forms: the table, the
 * JSON (its members and escapes), the textfile for Prometheus (a result,
 * a failed run); lists capped with exact counts; orphans handed to the
 * duplicates.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "rc_report.h"

#define REQ                                                                    \
	"charge_00000000000000070000000000000000000000000000000000000000000000ff"

/* What f wrote (f from open_memstream): the caller frees it. */
static char *
render(int (*fn)(const struct rc_report *, FILE *), const struct rc_report *r)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	assert_int_equal(fn(r, f), 0);
	assert_int_equal(fclose(f), 0);
	return buf;
}

static struct rc_charge
orphan_charge(int i)
{
	struct rc_charge c;

	memset(&c, 0, sizeof(c));
	(void)snprintf(c.id, sizeof(c.id), "ch_%d", i);
	c.amount = 1999;
	(void)snprintf(c.currency, sizeof(c.currency), "usd");
	c.created = 1795461284;
	(void)snprintf(c.principal, sizeof(c.principal), "demo");
	(void)snprintf(c.key, sizeof(c.key), "order-%d\x1b[2J\"", i);
	c.keylen = strlen(c.key);
	return c;
}

static void
fill(struct rc_report *r)
{
	struct rc_charge c = orphan_charge(1);
	struct rc_phantom p;
	struct rc_duplicate *d;

	assert_int_equal(rc_report_init(r), 0);
	r->since_s = 1795374884;
	r->until_s = 1795461284;
	r->now_ms = 1795461284123LL;
	r->duration_ms = 42;
	r->n.charges = 10;
	r->n.succeeded = 9;
	r->n.failed = 1;
	r->n.matched = 7;
	rc_report_orphan(r, &c, RC_ORPHAN_NO_RECORD);
	memset(&p, 0, sizeof(p));
	(void)snprintf(p.principal, sizeof(p.principal), "demo");
	(void)snprintf(p.key, sizeof(p.key), "ghost");
	(void)snprintf(p.request, sizeof(p.request), REQ);
	(void)snprintf(p.id, sizeof(p.id), "ch_gh\nclean: ost");
	p.amount = 4200;
	(void)snprintf(p.currency, sizeof(p.currency), "us\rd");
	p.created_ms = 1795461284567LL;
	p.why = RC_PHANTOM_NO_CHARGE;
	rc_report_phantom(r, &p);
	d = rc_report_add_duplicate(r, 7);
	assert_non_null(d);
	(void)snprintf(d->request, sizeof(d->request), REQ);
	(void)snprintf(d->principal, sizeof(d->principal), "demo");
	(void)snprintf(d->key, sizeof(d->key), "dup");
	d->charges = 2;
	(void)snprintf(d->ids[d->nids++], RC_ID_MAX, "ch_x");
	(void)snprintf(d->ids[d->nids++], RC_ID_MAX, "ch_\x9by");
	r->n.duplicates = 1;
	r->n.duplicate_charges = 2;
}

static void
test_text(void **state)
{
	struct rc_report r;
	char *s;

	(void)state;
	fill(&r);
	s = render(rc_report_text, &r);
	assert_non_null(strstr(s,
	    "window 2026-11-22T19:14:44Z .. "
	    "2026-11-23T19:14:44Z (86401 s)"));
	assert_non_null(strstr(s, "ORPHANS"));
	assert_non_null(strstr(s, "no-record"));
	/* a key's control bytes never reach the terminal */
	assert_null(strchr(s, '\x1b'));
	assert_non_null(strstr(s, "order-1\\x1b[2J\""));
	/* nor do the provider's strings: ids, currencies (issue 37) */
	assert_null(strchr(s, '\r'));
	assert_non_null(strstr(s, "ch_gh\\nclean: ost"));
	assert_non_null(strstr(s, "us\\rd"));
	assert_non_null(strstr(s, "ch_x ch_\\x9by"));
	assert_non_null(strstr(s, "2026-11-23T19:14:44.567Z"));
	assert_non_null(strstr(s, "no-such-charge"));
	assert_non_null(strstr(s,
	    REQ "  principal demo  key dup: 2 charges: "
	        "ch_x ch_\\x9by"));
	assert_non_null(strstr(s, "NOT CLEAN"));
	free(s);
	rc_report_free(&r);
	assert_int_equal(rc_report_init(&r), 0);
	s = render(rc_report_text, &r);
	assert_null(strstr(s, "ORPHANS"));
	assert_non_null(strstr(s, "\nclean: "));
	free(s);
	rc_report_free(&r);
	rc_report_free(NULL);
}

/* rc_printable: each escape, and a full buffer cut at a whole escape */
static void
test_printable(void **state)
{
	char b[RC_PRINT_MAX(8)], small[6];

	(void)state;
	assert_int_equal(sizeof(b), 29);
	assert_string_equal(rc_printable("a\n\r\t\\\x1b\x7f\xff", b, sizeof(b)),
	    "a\\n\\r\\t\\\\\\x1b\\x7f\\xff");
	/* the worst case fits: 7 bytes of \xNN */
	assert_string_equal(rc_printable("\x01\x01\x01\x01\x01\x01\x01", b,
	                        sizeof(b)),
	    "\\x01\\x01\\x01\\x01\\x01\\x01\\x01");
	assert_string_equal(rc_printable("abcd\x01", small, sizeof(small)),
	    "abcd");
	assert_string_equal(rc_printable("abcde", small, sizeof(small)),
	    "abcde");
	assert_string_equal(rc_printable("a\nb", small, sizeof(small)),
	    "a\\nb");
	assert_string_equal(rc_printable("", small, sizeof(small)), "");
}

static void
test_json(void **state)
{
	struct rc_report r;
	const cJSON *o;
	cJSON *doc;
	char *s;

	(void)state;
	fill(&r);
	s = render(rc_report_json, &r);
	assert_true(s[strlen(s) - 1] == '\n');
	assert_non_null(doc = cJSON_Parse(s));
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(doc, "clean")));
	assert_false(cJSON_IsTrue(cJSON_GetObjectItem(doc, "truncated")));
	o = cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "window"), "since");
	assert_string_equal(o->valuestring, "2026-11-22T19:14:44Z");
	assert_string_equal(cJSON_GetObjectItem(doc, "run_at")->valuestring,
	    "2026-11-23T19:14:44.123Z");
	o = cJSON_GetObjectItem(doc, "counts");
	assert_int_equal(cJSON_GetObjectItem(o, "orphans")->valueint, 1);
	assert_int_equal(cJSON_GetObjectItem(o, "declined")->valueint, 1);
	o = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "orphans"), 0);
	assert_string_equal(cJSON_GetObjectItem(o, "idempotency_key")
	                        ->valuestring,
	    "order-1\x1b[2J\"");
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "request")));
	assert_string_equal(cJSON_GetObjectItem(o, "reason")->valuestring,
	    "no-record");
	o = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "duplicates"), 0);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "charges")),
	    2);
	/* escapes, not raw control bytes */
	assert_null(strchr(s, '\x1b'));
	cJSON_Delete(doc);
	free(s);
	rc_report_free(&r);
}

static int
dup7(uint64_t req, void *arg)
{
	(void)arg;
	return req == 7;
}

static void
test_cap_and_duplicates(void **state)
{
	struct rc_report r;
	struct rc_charge c;
	cJSON *doc;
	char *s;
	int i;

	(void)state;
	assert_int_equal(rc_report_init(&r), 0);
	for (i = 0; i < RC_LIST_MAX + 5; i++) {
		c = orphan_charge(i);
		if (i < 3)
			(void)snprintf(c.request, sizeof(c.request), REQ);
		rc_report_orphan(&r, &c, RC_ORPHAN_FAILED);
	}
	assert_int_equal(r.n.orphans, RC_LIST_MAX + 5);
	assert_int_equal(r.norphans, RC_LIST_MAX);
	s = render(rc_report_json, &r);
	assert_non_null(doc = cJSON_Parse(s));
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(doc, "truncated")));
	cJSON_Delete(doc);
	free(s);
	/* the three orphans of request 7 go to its duplicate */
	rc_report_orphans_to_duplicates(&r, dup7, NULL, 3);
	assert_int_equal(r.n.orphans, RC_LIST_MAX + 2);
	assert_int_equal(r.norphans, RC_LIST_MAX - 3);
	assert_string_equal(r.orphans[0].c.id, "ch_3");
	rc_report_free(&r);
}

static void
test_prometheus(void **state)
{
	struct rc_report r;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	(void)state;
	fill(&r);
	f = open_memstream(&buf, &len);
	assert_int_equal(rc_report_prometheus(&r, 1, 1795461290000LL, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(buf, "\ncharge_reconcile_success 1\n"));
	assert_non_null(strstr(buf,
	    "\ncharge_reconcile_last_run_timestamp_seconds 1795461290.000\n"));
	assert_non_null(
	    strstr(buf, "\ncharge_reconcile_findings{kind=\"orphan\"} 1\n"));
	assert_non_null(
	    strstr(buf, "\ncharge_reconcile_findings{kind=\"duplicate\"} 1\n"));
	assert_non_null(
	    strstr(buf, "# TYPE charge_reconcile_findings gauge\n"));
	assert_non_null(strstr(buf, "\ncharge_reconcile_matched 7\n"));
	free(buf);
	buf = NULL;
	/* a run that could not finish: its time, no counts */
	f = open_memstream(&buf, &len);
	assert_int_equal(rc_report_prometheus(NULL, 0, 1795461290000LL, f), 0);
	assert_int_equal(fclose(f), 0);
	assert_non_null(strstr(buf, "\ncharge_reconcile_success 0\n"));
	assert_null(strstr(buf, "findings"));
	free(buf);
	rc_report_free(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_printable),
		cmocka_unit_test(test_json),
		cmocka_unit_test(test_cap_and_duplicates),
		cmocka_unit_test(test_prometheus),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
