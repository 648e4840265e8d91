/*
 * test_settle.c - the settle decision (src/provider/settle.c) checked
 * exhaustively against a reference model written here, apart from it.
 *
 * Every sequence of up to 5 deliveries over every kind a delivery can come
 * to (a charge that is ours or not, a decline with or without the failed
 * charge's id, a refused request, 401, 403, 404, idempotency_error, 409,
 * 429, 5xx, a reset before or after sending, a timeout, a certificate
 * refused), fresh or taken over from an unknown record, is run through the
 * real classification (wire_classify, wire_parse_charge, settle_is_ours)
 * and the real fold. Then, for the sequences that end unknown, every probe
 * outcome at every timing. The model says what may be true at the
 * provider; the decision must never say "nothing was charged" when a
 * charge may exist, never take a charge not proven ours, and never leave a
 * definitive outcome unknown.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "provider_wire.h"
#include "settle.h"

/* What a delivery came to, as the wire and the socket saw it. */
enum kind {
	K_CHARGE_OURS,
	K_CHARGE_OTHER_AMOUNT,
	K_CHARGE_OTHER_REQUEST,
	K_DECLINE_ID,
	K_DECLINE_NOID,
	K_REJECTED_400,
	K_401,
	K_403,
	K_404,
	K_IDEMPOTENCY_ERROR,
	K_409,
	K_429,
	K_500,
	K_503,
	K_RESET_BEFORE, /* no connection: not a byte sent */
	K_RESET_AFTER,  /* the connection broke after the request went out */
	K_TIMEOUT,
	K_TLS,
	K_N
};

static const char *const kind_names[K_N] = { "charge-ours",
	"charge-other-amount", "charge-other-request", "decline-id",
	"decline-noid", "400", "401", "403", "404", "idempotency_error", "409",
	"429", "500", "503", "reset-before", "reset-after", "timeout", "tls" };

/* --- the model, written from the contract (docs/API.md §17.3) ----------- */

/* May this delivery have executed a charge for the request? */
static int
model_may_execute(enum kind k)
{
	switch (k) {
	case K_CHARGE_OTHER_AMOUNT:
	case K_CHARGE_OTHER_REQUEST:
	case K_409:
	case K_500:
	case K_503:
	case K_RESET_AFTER:
	case K_TIMEOUT: return 1;
	default: return 0;
	}
}

/* Is this delivery's answer the provider's final word for the request? */
static int
model_charged(enum kind k)
{
	return k == K_CHARGE_OURS;
}

static int
model_declined(enum kind k)
{
	return k == K_DECLINE_ID || k == K_DECLINE_NOID;
}

static int
model_refused(enum kind k)
{
	return k == K_REJECTED_400 || k == K_401 || k == K_403 || k == K_404 ||
	    k == K_IDEMPOTENCY_ERROR;
}

/* --- the real classification of each kind ------------------------------- */

#define DKEY                                                                   \
	"charge_0000000000000000000000000000000000000000000000000000000000000000"

static const struct settle_expect expect = { DKEY, 1999, "usd" };

static enum settle_class
classify(enum kind k)
{
	static const char ours[] =
	    "{\"id\":\"ch_1\",\"object\":\"charge\",\"amount\":1999,"
	    "\"currency\":\"usd\",\"created\":1764000000,\"status\":"
	    "\"succeeded\",\"metadata\":{\"charge_request\":\"" DKEY "\"}}";
	static const char other_amount[] =
	    "{\"id\":\"ch_2\",\"object\":\"charge\",\"amount\":1,"
	    "\"currency\":\"jpy\",\"created\":1764000000,\"status\":"
	    "\"succeeded\",\"metadata\":{\"charge_request\":\"" DKEY "\"}}";
	static const char other_request[] =
	    "{\"id\":\"ch_3\",\"object\":\"charge\",\"amount\":1999,"
	    "\"currency\":\"usd\",\"created\":1764000000,\"status\":"
	    "\"succeeded\",\"metadata\":{\"charge_principal\":\"acme\"}}";
	static const char decl_id[] =
	    "{\"error\":{\"type\":\"card_error\",\"code\":\"card_declined\","
	    "\"decline_code\":\"insufficient_funds\",\"charge\":\"ch_d\"}}";
	static const char decl_noid[] =
	    "{\"error\":{\"type\":\"card_error\",\"code\":\"card_declined\"}}";
	static const char invalid[] = "{\"error\":{\"type\":"
	                              "\"invalid_request_error\"}}";
	static const char idem[] =
	    "{\"error\":{\"type\":\"idempotency_error\"}}";
	char type[PROVIDER_CODE_MAX], code[PROVIDER_CODE_MAX];
	struct wire_attempt a = { 0, NULL, NULL, -1 };
	struct provider_result r;
	struct settle_seen seen;
	const char *body = NULL;
	struct wire_verdict v;

	memset(&r, 0, sizeof(r));
	switch (k) {
	case K_RESET_BEFORE:
	case K_TLS: return SC_NOT_SENT; /* provider_http.c: transport_class */
	case K_RESET_AFTER:
	case K_TIMEOUT: return SC_MAYBE;
	case K_CHARGE_OURS: body = ours; /* fall through */
	case K_CHARGE_OTHER_AMOUNT:
		if (body == NULL)
			body = other_amount;
		/* fall through */
	case K_CHARGE_OTHER_REQUEST:
		if (body == NULL)
			body = other_request;
		a.status = 200;
		v = wire_classify(&a);
		assert_int_equal(v.settle, SC_CHARGE);
		assert_int_equal(wire_parse_charge(body, strlen(body), &r), 0);
		seen.request = r.seen_request;
		seen.amount = r.seen_amount;
		seen.currency = r.seen_currency;
		return settle_is_ours(&expect, &seen) ? SC_CHARGE : SC_NOT_OURS;
	case K_DECLINE_ID:
		body = decl_id;
		a.status = 402;
		break;
	case K_DECLINE_NOID:
		body = decl_noid;
		a.status = 402;
		break;
	case K_REJECTED_400:
		body = invalid;
		a.status = 400;
		break;
	case K_401:
		body = invalid;
		a.status = 401;
		break;
	case K_403: a.status = 403; break; /* a WAF's HTML */
	case K_404: a.status = 404; break;
	case K_IDEMPOTENCY_ERROR:
		body = idem;
		a.status = 400;
		break;
	case K_409: a.status = 409; break;
	case K_429: a.status = 429; break;
	case K_500: a.status = 500; break;
	case K_503: a.status = 503; break;
	case K_N: break;
	}
	if (body != NULL &&
	    wire_parse_error(body, strlen(body), a.status, type, code, &r) ==
	        0) {
		a.err_type = type;
		a.err_code = code;
	}
	v = wire_classify(&a);
	if (v.settle == SC_DECLINE)
		assert_int_equal(r.outcome, PROV_DECLINED);
	return v.settle;
}

/* --- the exhaustive runs ------------------------------------------------ */

static enum settle_class cls[K_N];
static unsigned long cases;

/*
 * One sequence of n deliveries; the call stops at the first verdict that
 * is not SV_RETRY (the HTTP client does), or settle_end after the last.
 * Checks the verdict against the model over the deliveries made. Returns
 * the verdict and sets *made.
 */
static enum settle_verdict
run_sequence(const enum kind *seq, int n, int resumed, int *made)
{
	struct settle_fold f;
	enum settle_verdict v = SV_RETRY;
	int i, maybe = resumed, charged = 0, declined = 0, refused = 0;
	int definitive = 0; /* the model's final word, at the stop */
	int stopped;

	settle_begin(&f, resumed);
	for (i = 0; i < n && v == SV_RETRY; i++) {
		v = settle_attempt(&f, cls[seq[i]]);
		if (model_charged(seq[i]))
			charged = definitive = 1;
		else if (model_declined(seq[i]))
			declined = definitive = 1;
		else if (model_refused(seq[i]) && !maybe)
			refused = definitive = 1;
		maybe |= model_may_execute(seq[i]);
	}
	*made = i;
	stopped = v != SV_RETRY;
	if (v == SV_RETRY)
		v = settle_end(&f);
	cases++;
	/* never "nothing was charged" while a charge may exist */
	if (v == SV_FAILED && (maybe || charged))
		fail_msg(
		    "failed while a charge may exist (%d deliveries, resumed %d, first %s)",
		    i, resumed, kind_names[seq[0]]);
	/* never a charge not proven ours */
	if (v == SV_COMPLETED && !charged)
		fail_msg(
		    "completed without a charge proven ours (%d deliveries, first %s)",
		    i, kind_names[seq[0]]);
	/* never a definitive outcome left unknown, nor another one */
	if (definitive) {
		enum settle_verdict want = charged ? SV_COMPLETED
		    : declined                     ? SV_DECLINED
		                                   : SV_FAILED;

		(void)refused;
		if (v != want)
			fail_msg(
			    "definitive outcome %s answered %s (%d deliveries, resumed %d, last %s)",
			    settle_verdict_name(want), settle_verdict_name(v),
			    i, resumed, kind_names[seq[i - 1]]);
	}
	/* the call stops at the first definitive answer, not later */
	if (definitive && !stopped)
		fail_msg("went on after a definitive answer");
	/* a call that gives up unknown early says why (an alert) */
	if (stopped && v == SV_UNKNOWN && f.mismatches == 0 &&
	    f.refused_after_ambiguity == 0)
		fail_msg("stopped unknown without an alert");
	return v;
}

/* Every probe outcome at every timing after a call that ended unknown. */
static void
run_probes(int maybe)
{
	static const enum settle_probe probes[] = { PROBE_FOUND,
		PROBE_FOUND_DECLINED, PROBE_NONE, PROBE_NOT_OURS,
		PROBE_INCOMPLETE };
	/* quiet 10 000, timeout 1 000: sent before, at and after 11 000 */
	static const long long sent[] = { 9000, 10500, 10999, 11000, 20000 };
	const long long quiet = 10000, timeout = 1000;
	size_t p, t;

	for (p = 0; p < sizeof(probes) / sizeof(probes[0]); p++)
		for (t = 0; t < sizeof(sent) / sizeof(sent[0]); t++) {
			enum settle_verdict v =
			    settle_probe(probes[p], sent[t], quiet, timeout);
			int can_execute = sent[t] < quiet + timeout;

			cases++;
			if (v == SV_RETRY)
				fail_msg("a probe answered retry");
			if (v == SV_FAILED &&
			    (probes[p] != PROBE_NONE || can_execute))
				fail_msg(
				    "probe %zu at %lld: failed while a charge may exist",
				    p, sent[t]);
			if (v == SV_COMPLETED && probes[p] != PROBE_FOUND)
				fail_msg(
				    "probe %zu: completed without our charge",
				    p);
			if (probes[p] == PROBE_FOUND && v != SV_COMPLETED)
				fail_msg("our charge found, answered %s",
				    settle_verdict_name(v));
			if (probes[p] == PROBE_FOUND_DECLINED &&
			    v != SV_DECLINED)
				fail_msg("our decline found, answered %s",
				    settle_verdict_name(v));
			if (probes[p] == PROBE_NONE && !can_execute &&
			    v != SV_FAILED)
				fail_msg("absence proven, answered %s",
				    settle_verdict_name(v));
			/* a probe with no time known proves no absence */
			if (settle_probe(probes[p], sent[t], 0, timeout) ==
			    SV_FAILED)
				fail_msg("absence without a quiet time");
		}
	(void)maybe;
}

static void
test_sequences(void **state)
{
	enum kind seq[5];
	unsigned long total, c;
	int n, i, resumed, made;

	(void)state;
	for (i = 0; i < K_N; i++)
		cls[i] = classify((enum kind)i);
	cases = 0;
	for (n = 1; n <= 5; n++) {
		total = 1;
		for (i = 0; i < n; i++)
			total *= K_N;
		for (c = 0; c < total; c++) {
			unsigned long x = c;

			for (i = 0; i < n; i++) {
				seq[i] = (enum kind)(x % K_N);
				x /= K_N;
			}
			for (resumed = 0; resumed <= 1; resumed++) {
				enum settle_verdict v =
				    run_sequence(seq, n, resumed, &made);

				/* probes after the short ones that end unknown */
				if (v == SV_UNKNOWN && n <= 2)
					run_probes(1);
			}
		}
	}
	print_message("settle: %lu cases checked against the model\n", cases);
	assert_true(cases > 4000000UL);
}

/* The step: never a re-send after the execute window; the probe's wait. */
static void
test_step_timings(void **state)
{
	struct settle_clock c;
	long long now, wait, w;
	unsigned long n = 0;

	(void)state;
	c.created_ms = 1000000;
	c.window_ms = 60000;
	c.timeout_ms = 5000;
	c.deadline_ms = 12000;
	for (c.quiet_ms = 0; c.quiet_ms <= 1200000; c.quiet_ms += 7000)
		for (now = 990000; now < 1200000; now += 1000) {
			enum settle_action a;

			c.now_ms = now;
			a = settle_step(&c, &wait);
			n++;
			if (now >= c.created_ms + c.window_ms &&
			    a == SETTLE_RESEND)
				fail_msg("re-send %lld ms after the request",
				    now - c.created_ms);
			if (now < c.created_ms + c.window_ms &&
			    a != SETTLE_RESEND)
				fail_msg("no re-send within the window");
			if (a == SETTLE_RESEND && wait != 0)
				fail_msg("a re-send that waits");
			w = settle_quiet_ms(&c) + c.timeout_ms - now;
			if (a == SETTLE_PROBE &&
			    wait != (w > 0 && w <= c.timeout_ms ? w : 0))
				fail_msg("probe wait %lld, want %lld", wait, w);
			if (settle_quiet_ms(&c) < c.quiet_ms ||
			    settle_quiet_ms(&c) < c.created_ms + c.deadline_ms)
				fail_msg("quiet before a delivery's end");
		}
	/* an age not known: never a re-send, never a proven absence */
	c.created_ms = 0;
	c.now_ms = 5;
	assert_int_equal(settle_step(&c, &wait), SETTLE_PROBE);
	assert_int_equal(settle_quiet_ms(&c), 0);
	print_message("settle: %lu step timings checked\n", n);
}

/* The proof of a charge: every field must match. */
static void
test_is_ours(void **state)
{
	struct settle_seen s = { DKEY, 1999, "usd" };

	(void)state;
	assert_int_equal(settle_is_ours(&expect, &s), 1);
	s.amount = 1998;
	assert_int_equal(settle_is_ours(&expect, &s), 0);
	s.amount = 1999;
	s.currency = "eur";
	assert_int_equal(settle_is_ours(&expect, &s), 0);
	s.currency = "usd";
	s.request = "charge_1";
	assert_int_equal(settle_is_ours(&expect, &s), 0);
	s.request = NULL;
	assert_int_equal(settle_is_ours(&expect, &s), 0);
	s.request = "";
	assert_int_equal(settle_is_ours(&expect, &s), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sequences),
		cmocka_unit_test(test_step_timings),
		cmocka_unit_test(test_is_ours),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
