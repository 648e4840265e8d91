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
	K_CHARGE_FOREIGN_FAILED, /* a 200 with another request's failed charge */
	K_402_NOBODY,            /* a 402 without an error object */
	K_REPLAY_400, /* a saved refusal replayed (Idempotent-Replayed) */
	K_REPLAY_500, /* a saved 500 replayed */
	K_N
};

static const char *const kind_names[K_N] = { "charge-ours",
	"charge-other-amount", "charge-other-request", "decline-id",
	"decline-noid", "400", "401", "403", "404", "idempotency_error", "409",
	"429", "500", "503", "reset-before", "reset-after", "timeout", "tls",
	"charge-foreign-failed", "402-nobody", "replay-400", "replay-500" };

/* --- the model, written from the contract (docs/API.md §17.3) ----------- */

/* May this delivery have executed a charge for the request? */
static int
model_may_execute(enum kind k)
{
	switch (k) {
	case K_CHARGE_OTHER_AMOUNT:
	case K_CHARGE_OTHER_REQUEST:
	case K_CHARGE_FOREIGN_FAILED:
	case K_402_NOBODY: /* no word on what happened */
	/* an execution under the key (provider.md §21-22): may have charged */
	case K_IDEMPOTENCY_ERROR:
	case K_REPLAY_400:
	case K_REPLAY_500:
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
	return k == K_REJECTED_400 || k == K_401 || k == K_403 || k == K_404;
}

/* --- the real classification of each kind ------------------------------- */

#define DKEY                                                                   \
	"charge_0000000000000000000000000000000000000000000000000000000000000000"

static const struct settle_expect expect = { DKEY, 1999, "usd" };

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
static const char foreign_failed[] =
    "{\"id\":\"ch_f\",\"object\":\"charge\",\"amount\":1999,"
    "\"currency\":\"usd\",\"created\":1764000000,\"status\":\"failed\","
    "\"failure_code\":\"card_declined\",\"outcome\":{\"reason\":"
    "\"stolen_card\"},\"metadata\":{\"charge_request\":\"charge_other\"}}";
static const char decl_id[] =
    "{\"error\":{\"type\":\"card_error\",\"code\":\"card_declined\","
    "\"decline_code\":\"insufficient_funds\",\"charge\":\"ch_d\"}}";
static const char decl_noid[] =
    "{\"error\":{\"type\":\"card_error\",\"code\":\"card_declined\"}}";
static const char invalid[] = "{\"error\":{\"type\":"
                              "\"invalid_request_error\"}}";
static const char idem[] = "{\"error\":{\"type\":\"idempotency_error\"}}";
static const char api_error[] = "{\"error\":{\"type\":\"api_error\"}}";

/*
 * The answer of a kind as the socket hands it over: status (0: none), body,
 * Idempotent-Replayed. For the kinds without an answer: *sc, what the
 * transport proves (provider_http.c: h1_class).
 */
static long
kind_answer(enum kind k, struct wire_answer *a, enum settle_class *sc)
{
	memset(a, 0, sizeof(*a));
	a->should_retry = -1;
	*sc = SC_MAYBE;
	switch (k) {
	case K_RESET_BEFORE:
	case K_TLS: *sc = SC_NOT_SENT; return 0;
	case K_RESET_AFTER:
	case K_TIMEOUT: return 0;
	case K_CHARGE_OURS: a->body = ours; break;
	case K_CHARGE_OTHER_AMOUNT: a->body = other_amount; break;
	case K_CHARGE_OTHER_REQUEST: a->body = other_request; break;
	case K_CHARGE_FOREIGN_FAILED: a->body = foreign_failed; break;
	case K_DECLINE_ID: a->body = decl_id; break;
	case K_DECLINE_NOID: a->body = decl_noid; break;
	case K_402_NOBODY: a->body = "<html>declined</html>"; break;
	case K_REJECTED_400:
	case K_401: a->body = invalid; break;
	case K_REPLAY_400:
		a->body = invalid;
		a->replayed = 1;
		break;
	case K_REPLAY_500:
		a->body = api_error;
		a->replayed = 1;
		break;
	case K_IDEMPOTENCY_ERROR: a->body = idem; break;
	case K_403: a->body = "<html>403</html>"; break; /* a WAF's page */
	case K_404:
	case K_409:
	case K_429:
	case K_500:
	case K_503:
	case K_N: break;
	}
	switch (k) {
	case K_CHARGE_OURS:
	case K_CHARGE_OTHER_AMOUNT:
	case K_CHARGE_OTHER_REQUEST:
	case K_CHARGE_FOREIGN_FAILED: a->status = 200; break;
	case K_DECLINE_ID:
	case K_DECLINE_NOID:
	case K_402_NOBODY: a->status = 402; break;
	case K_REJECTED_400:
	case K_REPLAY_400:
	case K_IDEMPOTENCY_ERROR: a->status = 400; break;
	case K_401: a->status = 401; break;
	case K_403: a->status = 403; break;
	case K_404: a->status = 404; break;
	case K_409: a->status = 409; break;
	case K_429: a->status = 429; break;
	case K_500:
	case K_REPLAY_500: a->status = 500; break;
	case K_503: a->status = 503; break;
	default: break;
	}
	if (a->body != NULL)
		a->len = strlen(a->body);
	return a->status;
}

/*
 * The real classification of one delivery (provider_http.c's attempt_done:
 * wire_answer_class, or the transport's class), into res as the call keeps
 * it from one attempt to the next.
 */
static enum settle_class
classify_into(enum kind k, struct provider_result *r)
{
	char code[PROVIDER_CODE_MAX];
	struct wire_answer a;
	struct wire_verdict v;
	enum settle_class sc;

	if (kind_answer(k, &a, &sc) == 0) {
		wire_result_clear(r);
		return sc;
	}
	sc = wire_answer_class(&a, &expect, r, &v, code);
	if (sc == SC_DECLINE)
		assert_int_equal(r->outcome, PROV_DECLINED);
	return sc;
}

static enum settle_class
classify(enum kind k)
{
	struct provider_result r;

	memset(&r, 0, sizeof(r));
	return classify_into(k, &r);
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
	    f.refused_after_ambiguity == 0 && f.key_used == 0)
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
	/*
	 * quiet 10 000, a 409 seen at 9 500 (before the quiet: every 409 is
	 * seen before the record's quiet), timeout 1 000, execute max 4 000:
	 * a probe sent before, at and after 14 000 (never at 10 500 + 1 000,
	 * where the old rule of one timeout concluded)
	 */
	static const long long sent[] = { 9000, 10500, 11000, 13500, 13999,
		14000, 20000 };
	const long long quiet = 10000, last409 = 9500;
	const long long execute = settle_execute_ms(1000, 4000);
	size_t p, t;

	for (p = 0; p < sizeof(probes) / sizeof(probes[0]); p++)
		for (t = 0; t < sizeof(sent) / sizeof(sent[0]); t++) {
			enum settle_verdict v =
			    settle_probe(probes[p], sent[t], quiet, execute);
			/* the model: a delivery sent by the quiet, or the one a 409 saw, executes until */
			int can_execute =
			    sent[t] < quiet + 4000 || sent[t] < last409 + 4000;

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
			if (settle_probe(probes[p], sent[t], 0, execute) ==
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

/*
 * Each attempt is classified from its own answer alone (issue 36, 4): after
 * every sequence of up to 3 earlier answers kept in the same result, a
 * delivery's class and what the result then says (outcome, charge id,
 * decline code, created) are what they are after a fresh result.
 */
static void
test_own_answer(void **state)
{
	struct provider_result shared, fresh;
	enum kind seq[4];
	unsigned long total, c, n_checked = 0;
	int n, i;

	(void)state;
	for (n = 2; n <= 4; n++) {
		total = 1;
		for (i = 0; i < n; i++)
			total *= K_N;
		for (c = 0; c < total; c++) {
			unsigned long x = c;
			enum settle_class got, want;

			for (i = 0; i < n; i++) {
				seq[i] = (enum kind)(x % K_N);
				x /= K_N;
			}
			memset(&shared, 0, sizeof(shared));
			memset(&fresh, 0, sizeof(fresh));
			for (i = 0; i < n - 1; i++)
				(void)classify_into(seq[i], &shared);
			got = classify_into(seq[n - 1], &shared);
			want = classify_into(seq[n - 1], &fresh);
			n_checked++;
			if (got != want || shared.outcome != fresh.outcome ||
			    strcmp(shared.charge_id, fresh.charge_id) != 0 ||
			    shared.created != fresh.created ||
			    (shared.decline_code == NULL) !=
			        (fresh.decline_code == NULL) ||
			    (shared.decline_code != NULL &&
			        strcmp(shared.decline_code,
			            fresh.decline_code) != 0))
				fail_msg(
				    "%s after %s: class %d (alone %d), charge '%s' (alone '%s')",
				    kind_names[seq[n - 1]],
				    kind_names[seq[n - 2]], got, want,
				    shared.charge_id, fresh.charge_id);
		}
	}
	print_message("settle: %lu answers after others checked\n", n_checked);
}

/*
 * The clock and range rules (issue 36, 1): for every offset of the
 * provider's clock the Date may have shown (its second, the answer's trip:
 * the truth up to SETTLE_DATE_RES_MS - 1 ms later than measured), every
 * offset the range was shifted by, every allowance, and every moment a
 * delivery could have executed (from the claim to the quiet plus the
 * execute time): whenever settle_clock_proves says a "none" proves
 * absence, the range held the charge that delivery would have made. And
 * an offset not measured, or beyond the allowance, never proves.
 */
static void
test_clock_range(void **state)
{
	static const long long errs[] = { 0, 1, 999, 1000, 1500, 1999 };
	static const long long allowances[] = { 0, 30000, 60000, 3600000 };
	const long long created = 1764000000123LL, quiet = created + 14500;
	const long long execute = 20000, margin = SETTLE_RANGE_MARGIN_MS;
	unsigned long n = 0, proved = 0;
	long long m, used, t, gte, lte;
	size_t e, a;

	(void)state;
	for (m = -400000; m <= 400000; m += 3371)
		for (used = m - 90000; used <= m + 90000; used += 7919) {
			settle_list_range(created, quiet, execute, used, margin,
			    &gte, &lte);
			for (a = 0;
			     a < sizeof(allowances) / sizeof(*allowances);
			     a++) {
				long long al = allowances[a];
				int ok =
				    settle_clock_proves(1, m, used, margin, al);

				n++;
				if (settle_clock_proves(0, m, used, margin,
				        al) &&
				    al != 0)
					fail_msg(
					    "an offset not measured proved");
				if (ok && al != 0 && (m > al || m < -al))
					fail_msg(
					    "offset %lld beyond %lld proved", m,
					    al);
				if (al == 0 && used != 0 && ok)
					fail_msg("not measured, shifted range");
				if (!ok)
					continue;
				proved++;
				/* allowance 0: the clocks taken to agree */
				for (e = 0; e < sizeof(errs) / sizeof(*errs);
				     e++) {
					long long truth =
					    al == 0 ? 0 : m + errs[e];

					if (al == 0 &&
					    (m < -(margin -
					             SETTLE_DATE_RES_MS) ||
					        m > margin -
					                SETTLE_DATE_RES_MS))
						break; /* outside the stated assumption */
					for (t = created; t <= quiet + execute;
					     t += 997) {
						long long c =
						    (t + truth) / 1000;

						if (c < gte || c > lte)
							fail_msg(
							    "offset %lld (measured %lld, range at %lld): a charge at %lld s outside [%lld, %lld]",
							    truth, m, used, c,
							    gte, lte);
					}
				}
			}
		}
	assert_true(proved > 1000);
	print_message("settle: %lu clock cases checked (%lu proving)\n", n,
	    proved);
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
	c.execute_ms = 20000;
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
			w = settle_quiet_ms(&c) + c.execute_ms - now;
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
		cmocka_unit_test(test_own_answer),
		cmocka_unit_test(test_clock_range),
		cmocka_unit_test(test_step_timings),
		cmocka_unit_test(test_is_ours),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
