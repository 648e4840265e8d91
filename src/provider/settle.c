/*
 * settle.c - the settle decision: the attempts of one request folded into
 * what they proved, the verdict of a read-only probe, and the step an
 * unknown record takes (re-send within the execute window, probe after
 * it). Pure; checked exhaustively against a model written apart from it
 * (tests/unit/test_settle.c).
 */
#include <string.h>

#include "settle.h"

void
settle_begin(struct settle_fold *f, int resumed)
{
	memset(f, 0, sizeof(*f));
	f->ambiguous = resumed != 0;
}

enum settle_verdict
settle_attempt(struct settle_fold *f, enum settle_class c)
{
	f->attempts++;
	switch (c) {
	case SC_CHARGE: return SV_COMPLETED;
	case SC_DECLINE: return SV_DECLINED;
	case SC_NOT_OURS:
		/* the provider answers for another charge: it may hold ours */
		f->ambiguous = 1;
		f->mismatches++;
		return SV_UNKNOWN;
	case SC_REJECTED:
		if (!f->ambiguous)
			return SV_FAILED; /* refused before anything executed */
		f->refused_after_ambiguity++;
		return SV_UNKNOWN;
	case SC_MAYBE: f->ambiguous = 1; return SV_RETRY;
	case SC_KEY_USED:
		/* an earlier execution under the key: never "failed" */
		f->ambiguous = 1;
		f->key_used++;
		return SV_UNKNOWN;
	case SC_NOT_SENT:
	case SC_LATER: return SV_RETRY;
	}
	f->ambiguous = 1; /* not a class: assume the worst */
	return SV_UNKNOWN;
}

enum settle_verdict
settle_end(const struct settle_fold *f)
{
	(void)f;
	/*
	 * Nothing proven: unknown, also when no delivery may have executed
	 * (a refused connection, a 429 to the end): the probe proves absence
	 * later, read-only.
	 */
	return SV_UNKNOWN;
}

long long
settle_execute_ms(long long timeout_ms, long long execute_max_ms)
{
	return execute_max_ms > timeout_ms ? execute_max_ms : timeout_ms;
}

enum settle_verdict
settle_probe(enum settle_probe p, long long sent_ms, long long quiet_ms,
    long long execute_ms)
{
	switch (p) {
	case PROBE_FOUND: return SV_COMPLETED;
	case PROBE_FOUND_DECLINED: return SV_DECLINED;
	case PROBE_NONE:
		if (quiet_ms > 0 && execute_ms >= 0 &&
		    sent_ms >= quiet_ms + execute_ms)
			return SV_FAILED;
		return SV_UNKNOWN; /* a delivery may still execute */
	case PROBE_NOT_OURS:
	case PROBE_INCOMPLETE: break;
	}
	return SV_UNKNOWN;
}

long long
settle_quiet_ms(const struct settle_clock *c)
{
	long long q = c->created_ms + c->deadline_ms;

	if (c->created_ms < 1)
		return 0; /* not known: absence is never proven */
	return c->quiet_ms > q ? c->quiet_ms : q;
}

enum settle_action
settle_step(const struct settle_clock *c, long long *wait_ms)
{
	long long w;

	*wait_ms = 0;
	/* a request whose age is not known is never sent again */
	if (c->created_ms > 0 && c->now_ms < c->created_ms + c->window_ms)
		return SETTLE_RESEND;
	if (c->created_ms < 1)
		return SETTLE_PROBE;
	w = settle_quiet_ms(c) + c->execute_ms - c->now_ms;
	if (w > 0 && w <= c->timeout_ms)
		*wait_ms = w;
	return SETTLE_PROBE;
}

void
settle_list_range(long long created_ms, long long quiet_ms,
    long long execute_ms, long long off_ms, long long margin_ms,
    long long *gte_s, long long *lte_s)
{
	long long lo = created_ms + off_ms - margin_ms;
	long long hi = quiet_ms + execute_ms + off_ms + margin_ms;

	*gte_s = lo > 0 ? lo / 1000 : 0;
	*lte_s = hi > 0 ? hi / 1000 + 1 : 0;
}

int
settle_clock_proves(int known, long long measured_ms, long long used_ms,
    long long margin_ms, long long allowance_ms)
{
	long long d = measured_ms - used_ms;

	if (allowance_ms == 0)
		return used_ms == 0; /* not measured: taken to agree */
	return known && measured_ms <= allowance_ms &&
	    measured_ms >= -allowance_ms &&
	    d <= margin_ms - SETTLE_DATE_RES_MS &&
	    d >= -(margin_ms - SETTLE_DATE_RES_MS);
}

int
settle_is_ours(const struct settle_expect *e, const struct settle_seen *s)
{
	return e->request != NULL && s->request != NULL &&
	    strcmp(e->request, s->request) == 0 && s->amount == e->amount &&
	    e->currency != NULL && s->currency != NULL &&
	    strcmp(e->currency, s->currency) == 0;
}

const char *
settle_verdict_name(enum settle_verdict v)
{
	switch (v) {
	case SV_RETRY: return "retry";
	case SV_COMPLETED: return "completed";
	case SV_DECLINED: return "declined";
	case SV_FAILED: return "failed";
	case SV_UNKNOWN: return "unknown";
	}
	return "unknown";
}
