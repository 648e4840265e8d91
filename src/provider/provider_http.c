/*
 * provider_http.c - POST /v1/charges (and the probe's GET of the list)
 * with the native HTTP/1.1 client (http1.c): one pool of kept-alive
 * connections per loop, through the proxy of the environment when one
 * applies (http1_proxy.c).
 *
 * What one attempt costs is kept low (a fresh charge through the provider
 * should cost little more CPU than one with the in-process simulation):
 * the constant header lines are built once; a request is one write.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <unistd.h>

#include "clock.h"
#include "http1.h"
#include "log.h"
#include "metrics.h"
#include "provider_http.h"
#include "provider_wire.h"
#include "timefmt.h"
#include "wire_url.h"
#include "util.h"

#define CHARGES_PATH "/v1/charges"
#define LIST_PATH "/v1/charges?"
#define SEARCH_PATH "/v1/charges/search?"
#define KEY_HDR "Idempotency-Key: "
#define RID_HDR "X-Request-Id: "
#define TRACE_HDR "traceparent: "
#define PROVIDER_RID_MAX 96    /* bytes of the provider's Request-Id logged */
#define PROBE_PAGES_MAX 1000   /* pages of one probe: 100 000 charges */
#define BODY_MAX (1024 * 1024) /* bytes of a provider's answer */
#define ATTEMPT_MIN_MS 50      /* an attempt with less time left: none */

struct http_call;

struct http_provider;

struct http_provider {
	uv_loop_t *loop;
	const struct config *cfg;
	char base[URL_MAX_LEN]; /* scheme://host:port, or http://localhost */
	char unix_path[URL_MAX_LEN]; /* "" unless unix: */
	char auth[300];              /* Authorization: Bearer ... */
	LIST_HEAD(, http_call) calls;
	uint64_t rng; /* the backoff's jitter */
	struct h1_pool *h1;
	char h1_prefix[URL_MAX_LEN]; /* the path before /v1/charges */
	size_t h1_prefixlen;
	char h1_hdr_post[400], h1_hdr_get[300]; /* constant header lines */
	/* the provider's clock less ours, from the last answer's Date */
	int skew_known;
	long long skew_ms;
};

/* Where one call is (see call_set_state). */
enum http_call_state {
	HC_NEW,     /* made, no attempt yet */
	HC_ATTEMPT, /* a transfer in flight */
	HC_BACKOFF, /* waiting before the next attempt */
	HC_DONE,    /* its callback had the result; closing */
	HC_NSTATES
};

#define B(s) (1u << (s))
/* call_set_state's map: http_call_allowed[from] has bit `to`. */
static const unsigned http_call_allowed[HC_NSTATES] = {
	[HC_NEW] = B(HC_ATTEMPT) | B(HC_DONE),
	/* ATTEMPT to ATTEMPT: a probe's next page */
	[HC_ATTEMPT] = B(HC_ATTEMPT) | B(HC_BACKOFF) | B(HC_DONE),
	[HC_BACKOFF] = B(HC_ATTEMPT) | B(HC_DONE),
	[HC_DONE] = 0,
};
#undef B

struct http_call {
	enum http_call_state state; /* only call_set_state changes it */
	struct http_provider *hp;
	provider_cb *cb;
	void *arg;
	char dkey[WIRE_KEY_LEN + 1];
	char currency[PROVIDER_CURRENCY_MAX];
	struct settle_expect expect; /* what proves a charge ours */
	struct settle_fold fold;     /* the attempts so far */
	char *form;                  /* POST body; NULL for a probe */
	size_t formlen;
	char target[URL_MAX_LEN + 256]; /* the request target: prefix + path */
	long long deadline_us;
	/* a probe: the list over [gte, lte], page by page */
	int probe;
	long long gte, lte;      /* Unix seconds */
	long long quiet_ms;      /* no delivery went out after it */
	long long probe_sent_ms; /* when the first page was asked for */
	int pages;
	int probe_mismatch; /* a page named us with another amount */
	/* the provider's clock less ours, as the range took it */
	long long used_off_ms;
	int searching;   /* the probe's first part: the search for our key */
	int search_sent; /* the probe's first read went out */
	long long resume_lte;   /* the list goes on from here (0: the top) */
	long long last_created; /* the last list page's last charge */
	int list_pages;         /* list pages read */
	int probe_skew_known;   /* a page's Date measured the clock */
	long long probe_skew_ms;
	long long
	    resend_until_ms; /* no delivery starts from then on; 0: none */
	char after[PROVIDER_ID_MAX];
	struct h1_req *req; /* the attempt in flight, or NULL */
	char key_hdr[sizeof(KEY_HDR) + WIRE_KEY_LEN + 2]; /* the line, "\r\n" */
	/* the request's id and trace: logged, and sent on as two lines */
	char rid[REQUEST_ID_MAX + 1];
	char trace_id[TRACE_ID_HEX + 1];
	char trace_hdr[sizeof(RID_HDR) + REQUEST_ID_MAX + sizeof(TRACE_HDR) +
	    TRACEPARENT_LEN + 4];
	char prov_rid[PROVIDER_RID_MAX]; /* the attempt's Request-Id, escaped */
	char *body;                      /* the answer being read */
	size_t body_len, body_cap;
	int should_retry; /* Stripe-Should-Retry: 1, 0, -1 */
	int replayed_now; /* this attempt's answer: Idempotent-Replayed: true */
	long long date_ms; /* this attempt's answer's Date (Unix ms); 0: none */
	uv_timer_t backoff;
	int backoff_open;
	struct provider_result res;
	LIST_ENTRY(http_call) entry;
};

/* --- one attempt --------------------------------------------------------- */

/* One header of the answer, as the native client hands it over. */
static void
on_h1_header(void *arg, const char *name, size_t nlen, const char *value,
    size_t vlen)
{
	static const char retry[] = "Stripe-Should-Retry";
	static const char replayed[] = "Idempotent-Replayed";
	static const char prid[] = "Request-Id";
	struct http_call *c = arg;
	long long ms;

	if (nlen == 4 && strncasecmp(name, "Date", 4) == 0) {
		if (timefmt_http_date_parse(value, vlen, &ms) == 0)
			c->date_ms = ms;
	} else if (nlen == sizeof(prid) - 1 &&
	    strncasecmp(name, prid, nlen) == 0) {
		(void)log_escape(c->prov_rid, sizeof(c->prov_rid), value, vlen);
	} else if (nlen == sizeof(replayed) - 1 &&
	    strncasecmp(name, replayed, nlen) == 0) {
		if (vlen >= 4 && strncasecmp(value, "true", 4) == 0) {
			c->replayed_now = 1;
			if (c->res.attempts == 1)
				c->res.replayed = 1;
		}
	} else if (nlen == sizeof(retry) - 1 &&
	    strncasecmp(name, retry, nlen) == 0) {
		if (vlen >= 4 && strncasecmp(value, "true", 4) == 0)
			c->should_retry = 1;
		else if (vlen >= 5 && strncasecmp(value, "false", 5) == 0)
			c->should_retry = 0;
	}
}

/* A piece of the answer's body: kept (up to BODY_MAX), or -1: aborted. */
static int
on_h1_body(void *arg, const char *p, size_t len)
{
	struct http_call *c = arg;

	if (len > BODY_MAX - c->body_len)
		return -1; /* too long: the attempt fails (ambiguous) */
	if (util_grow(&c->body, &c->body_cap, c->body_len + len + 1, 4096,
	        BODY_MAX + 1) != 0)
		return -1;
	memcpy(c->body + c->body_len, p, len);
	c->body_len += len;
	c->body[c->body_len] = '\0';
	return 0;
}

static void attempt_start(struct http_call *c);
static long long probe_progress(const struct http_call *c);
static void call_settle(struct http_call *c, enum settle_verdict v);

static void
on_backoff_closed(uv_handle_t *h)
{
	struct http_call *c = h->data;

	free(c->form);
	free(c->body);
	free(c);
}

static void
attempt_cleanup(struct http_call *c)
{
	if (c->req != NULL) {
		h1_cancel(c->req);
		c->req = NULL;
	}
}

static void
call_set_state(struct http_call *c, enum http_call_state to)
{
	(void)http_call_allowed; /* read by the asserts only */
	assert(c->state < HC_NSTATES && to < HC_NSTATES);
	assert((http_call_allowed[c->state] & (1u << to)) != 0);
	/* one attempt in flight at a time: none when another starts */
	assert(to != HC_ATTEMPT || c->req == NULL);
	c->state = to;
}

/* The call is over: the caller learns res, then the call is freed. */
static void
call_done(struct http_call *c)
{
	attempt_cleanup(c);
	call_set_state(c, HC_DONE);
	LIST_REMOVE(c, entry);
	c->cb(&c->res, c->arg);
	uv_close((uv_handle_t *)&c->backoff, on_backoff_closed);
}

static void
on_backoff_due(uv_timer_t *t)
{
	attempt_start(t->data);
}

/* Retries after the backoff, or ends unknown when the deadline comes first. */
static void
attempt_retry(struct http_call *c)
{
	struct http_provider *hp = c->hp;
	long pause_ms;
	long long left_ms;

	/* xorshift64: jitter only, no secret */
	hp->rng ^= hp->rng << 13;
	hp->rng ^= hp->rng >> 7;
	hp->rng ^= hp->rng << 17;
	pause_ms =
	    wire_backoff_ms(c->res.attempts, (double)(hp->rng % 1000) / 1000.0);
	left_ms = (c->deadline_us - now_mono_us()) / 1000;
	if (left_ms - pause_ms < ATTEMPT_MIN_MS) {
		call_settle(c, c->probe ? SV_UNKNOWN : settle_end(&c->fold));
		return;
	}
	call_set_state(c, HC_BACKOFF);
	(void)uv_timer_start(&c->backoff, on_backoff_due, (uint64_t)pause_ms,
	    0);
}

/*
 * What an attempt without an answer proves: the certificate refused (or
 * the CA file unreadable), the proxy's tunnel refused, or no connection
 * and no byte of the request written, prove nothing was delivered. A
 * connect or TLS timeout, a reset or an answer cut short may follow a
 * delivery, and count as one.
 */
static enum settle_class
h1_class(enum h1_err e, int sends)
{
	if (e == H1_TLS_VERIFY || e == H1_TLS_CA || e == H1_PROXY)
		return SC_NOT_SENT;
	if ((e == H1_CONNECT || e == H1_RESOLVE) && sends == 0)
		return SC_NOT_SENT;
	return SC_MAYBE;
}

/* What one attempt came to. */
struct xfer {
	long status;          /* the answer's; 0: none (why says why) */
	enum settle_class sc; /* what an attempt without an answer proves */
	int tls_refused;      /* the certificate, or the CA file */
	int sends;            /* deliveries in it */
	const char *why;      /* an attempt without an answer: what it was */
};

/* The call ends with what the settle module decided. */
static void
call_settle(struct http_call *c, enum settle_verdict v)
{
	switch (v) {
	case SV_COMPLETED: c->res.outcome = PROV_SUCCEEDED; break;
	case SV_DECLINED: c->res.outcome = PROV_DECLINED; break;
	case SV_FAILED:
		c->res.outcome = c->probe ? PROV_ABSENT : PROV_ERROR;
		break;
	case SV_RETRY:
	case SV_UNKNOWN:
		c->res.outcome = PROV_UNKNOWN;
		if (c->probe)
			c->res.probe_lte = probe_progress(c);
		break;
	}
	c->res.mismatches = c->fold.mismatches + (c->probe_mismatch ? 1 : 0);
	c->res.refused_after_ambiguity = c->fold.refused_after_ambiguity;
	if (c->res.mismatches > 0) {
		metrics_inc(MC_PROVIDER_MISMATCH);
		log_error(NULL,
		    "provider-mismatch: a charge that is not this request's (downstream key %.20s...): not recorded, the outcome stays unknown",
		    c->dkey);
	}
	if (c->res.refused_after_ambiguity > 0) {
		metrics_inc(MC_PROVIDER_REFUSED_AMBIGUOUS);
		log_error(NULL,
		    "provider refused a delivery after one that may have executed (%s): the outcome stays unknown",
		    c->res.why);
	}
	call_done(c);
}

/*
 * The search found none of ours on its last page: the list follows, over
 * the part of the time the search may not show yet (provider_search_lag_s
 * before the search to the latest a delivery can have landed).
 */
static void
probe_search_done(struct http_call *c)
{
	const struct config *cfg = c->hp->cfg;

	c->searching = 0;
	c->after[0] = '\0';
	settle_list_range(c->probe_sent_ms -
	        1000LL * cfg->provider_search_lag_s,
	    c->quiet_ms > 0 ? c->quiet_ms : now_wall_ms(),
	    settle_execute_ms(cfg->provider_timeout_ms,
	        cfg->provider_execute_max_ms),
	    c->used_off_ms, SETTLE_RANGE_MARGIN_MS, &c->gte, &c->lte);
	/* an earlier read proved the part above empty: on from there */
	if (c->resume_lte > 0 && c->resume_lte < c->lte)
		c->lte = c->resume_lte;
}

/*
 * A probe that ends unknown: where the next one goes on from. The part of
 * the list read (above the last page's last charge's created; that second
 * is read again, for the charges it shares with the next page) counts
 * only when every page was asked for after no delivery can still execute
 * and on a clock that proves; else what the earlier reads proved stands.
 */
static long long
probe_progress(const struct http_call *c)
{
	const struct config *cfg = c->hp->cfg;

	/* a charge naming us with another amount: never read past it */
	if (c->searching || c->probe_mismatch || c->list_pages == 0 ||
	    c->last_created <= 0 || c->last_created >= c->lte ||
	    c->quiet_ms <= 0 ||
	    c->probe_sent_ms < c->quiet_ms +
	            settle_execute_ms(cfg->provider_timeout_ms,
	                cfg->provider_execute_max_ms) ||
	    !settle_clock_proves(c->probe_skew_known, c->probe_skew_ms,
	        c->used_off_ms, SETTLE_RANGE_MARGIN_MS,
	        1000LL * cfg->provider_clock_skew_max_s))
		return c->resume_lte;
	return c->last_created;
}

/*
 * Whether this probe's "none" can prove absence as far as clocks go
 * (settle_clock_proves); if not, counted and logged.
 */
static int
probe_clock_proves(struct http_call *c)
{
	const struct config *cfg = c->hp->cfg;

	if (settle_clock_proves(c->probe_skew_known, c->probe_skew_ms,
	        c->used_off_ms, SETTLE_RANGE_MARGIN_MS,
	        1000LL * cfg->provider_clock_skew_max_s))
		return 1;
	metrics_inc(MC_PROVIDER_CLOCK_SKEW);
	if (!c->probe_skew_known)
		log_warn(NULL,
		    "provider: its list had no Date header: its clock is not known, so its 'none' proves nothing (provider_clock_skew_max_s)");
	else
		log_warn(NULL,
		    "provider: its clock is %lld ms from ours (the list's range took %lld ms; provider_clock_skew_max_s %d s): its 'none' proves nothing",
		    c->probe_skew_ms, c->used_off_ms,
		    cfg->provider_clock_skew_max_s);
	return 0;
}

/* One page of a probe came back (status 200): next page, or the verdict. */
static void
probe_page_done(struct http_call *c)
{
	enum settle_probe p;
	int more = 0, search = c->searching;

	p = search
	    ? wire_parse_search(c->body != NULL ? c->body : "", c->body_len,
	          &c->expect, &c->res, &more, c->after)
	    : wire_parse_list(c->body != NULL ? c->body : "", c->body_len,
	          &c->expect, &c->res, &more, c->after, &c->last_created);
	c->list_pages += !search && p != PROBE_INCOMPLETE;
	if (p == PROBE_NOT_OURS) {
		c->probe_mismatch = 1;
		p = PROBE_NONE; /* go on: ours may still come */
	}
	if (p == PROBE_NONE && search && !more) {
		probe_search_done(c); /* then the list, from its first page */
		more = c->lte >= c->gte; /* none left to read: done */
	}
	if (p == PROBE_NONE && more) {
		if (++c->pages >= PROBE_PAGES_MAX ||
		    (c->after[0] == '\0' && search == c->searching)) {
			(void)snprintf(c->res.why, sizeof(c->res.why),
			    "list: more than %d pages", PROBE_PAGES_MAX);
			call_settle(c, SV_UNKNOWN);
			return;
		}
		c->res.attempts = 0; /* a page is not a failed attempt */
		attempt_start(c);
		return;
	}
	if (p == PROBE_NONE && c->probe_mismatch)
		p = PROBE_NOT_OURS;
	if (p == PROBE_NONE && !probe_clock_proves(c))
		p = PROBE_INCOMPLETE;
	(void)snprintf(c->res.why, sizeof(c->res.why), "list: %s",
	    p == PROBE_FOUND || p == PROBE_FOUND_DECLINED ? "found"
	        : p == PROBE_NONE                         ? "none"
	                                                  : "not settled");
	call_settle(c,
	    settle_probe(p, c->probe_sent_ms, c->quiet_ms,
	        settle_execute_ms(c->hp->cfg->provider_timeout_ms,
	            c->hp->cfg->provider_execute_max_ms)));
}

/* res.why of an answer: "200 ok", "402 declined card_declined". */
static void
attempt_why(struct http_call *c, long status, const char *label,
    const char *code)
{
	struct util_buf b;

	util_buf_init(&b, c->res.why, sizeof(c->res.why));
	util_buf_ll(&b, status);
	util_buf_put(&b, " ", 1);
	util_buf_str(&b, label);
	if (code[0] != '\0') {
		util_buf_put(&b, " ", 1);
		util_buf_str(&b, code);
	}
}

/*
 * The provider's clock, from the answer's Date: its second less ours when
 * it came (the offset is that, up to a second and the answer's trip more).
 */
static void
clock_measure(struct http_call *c)
{
	struct http_provider *hp = c->hp;

	if (c->date_ms <= 0)
		return;
	hp->skew_ms = c->date_ms - now_wall_ms();
	hp->skew_known = 1;
	if (c->probe) {
		c->probe_skew_known = 1;
		c->probe_skew_ms = hp->skew_ms;
	}
}

/*
 * A charge's created (the provider's second when it executed, before it
 * answered) against the Date measured: a created later than the Date
 * allows means the Date is not the clock the charges are stamped with;
 * the offset is then not known (no absence proven) until the next answer.
 */
static void
clock_check_created(struct http_call *c, long long created_s)
{
	struct http_provider *hp = c->hp;
	long long lower = created_s * 1000 - now_wall_ms();

	if (created_s <= 0 || !hp->skew_known ||
	    lower <= hp->skew_ms + SETTLE_DATE_RES_MS)
		return;
	hp->skew_known = 0;
	log_warn(NULL,
	    "provider: a charge created %lld ms ahead of our clock, its Date said %lld ms: the provider's clock is not known",
	    lower, hp->skew_ms);
}

/* What one finished transfer came to, by the table of provider_wire.c. */
static void
attempt_done(struct http_call *c, const struct xfer *x)
{
	struct wire_answer a = { x->status, c->body, c->body_len,
		c->should_retry, c->replayed_now };
	struct wire_attempt none = { 0, NULL, NULL, -1 };
	char code[PROVIDER_CODE_MAX] = "";
	enum settle_class sc = x->sc;
	enum settle_verdict sv;
	struct wire_verdict v;
	long status = x->status;
	int ok = x->why == NULL;

	attempt_cleanup(c);
	if (ok)
		clock_measure(c);
	/* this attempt's answer alone: nothing of an earlier one survives */
	if (ok && !c->probe)
		sc = wire_answer_class(&a, &c->expect, &c->res, &v, code);
	else {
		/* a probe's page is read by probe_page_done */
		none.status = ok ? status : 0;
		wire_result_clear(&c->res);
		v = wire_classify(&none);
	}
	metrics_provider_attempt(v.attempt);
	if (!ok)
		(void)snprintf(c->res.why, sizeof(c->res.why), "%s", x->why);
	else
		attempt_why(c, status, v.label, code);
	log_event(LL_INFO, c->rid, c->trace_id,
	    "provider: attempt %d: %s, Request-Id %s", c->res.attempts,
	    c->res.why, c->prov_rid[0] != '\0' ? c->prov_rid : "-");
	/*
	 * A certificate we do not trust: nothing was delivered, and every
	 * retry would meet the same certificate. Unknown at once (the record
	 * waits for the retry or the completer, after the fix).
	 */
	if (x->tls_refused) {
		log_error(NULL,
		    "provider: %s (provider_ca_file, provider_tls_verify)",
		    c->res.why);
		(void)settle_attempt(&c->fold, sc);
		call_settle(c, settle_end(&c->fold));
		return;
	}
	if (c->probe) {
		if (ok && status == 200) {
			probe_page_done(c);
			return;
		}
		attempt_retry(c); /* the page again, within the deadline */
		return;
	}
	if (sc == SC_CHARGE || sc == SC_DECLINE)
		clock_check_created(c, c->res.created);
	if (v.cls == WIRE_BUG)
		log_error(NULL,
		    "provider: downstream key %.20s... was used earlier with other parameters (idempotency_error): that delivery may have executed, the outcome stays unknown",
		    c->dkey);
	else if (v.cls == WIRE_REJECTED)
		log_warn(NULL, "provider refused the delivery: %s", c->res.why);
	/* sent more than once: the earlier one may have executed */
	if (x->sends > 1)
		(void)settle_attempt(&c->fold, SC_MAYBE);
	sv = settle_attempt(&c->fold, sc);
	if (sv != SV_RETRY) {
		call_settle(c, sv);
		return;
	}
	attempt_retry(c);
}

/* The attempt's request is over (the client frees it after). */
static void
on_h1_done(void *arg, const struct h1_result *r)
{
	struct http_call *c = arg;
	struct xfer x = { 0, SC_MAYBE, 0, 0, NULL };

	c->req = NULL;
	if (r->err == H1_OK)
		x.status = r->status;
	else {
		x.sc = h1_class(r->err, r->sends);
		x.why = r->why;
		x.tls_refused = r->err == H1_TLS_VERIFY || r->err == H1_TLS_CA;
	}
	x.sends = r->sends;
	attempt_done(c, &x);
}

/* One attempt: its request to the pool; 0 or -1. */
static int
attempt_h1(struct http_call *c)
{
	struct http_provider *hp = c->hp;
	long long left_ms = (c->deadline_us - now_mono_us()) / 1000;
	long timeout_ms = hp->cfg->provider_timeout_ms;
	const char *hdrs[] = { c->probe ? hp->h1_hdr_get : hp->h1_hdr_post,
		c->key_hdr, c->trace_hdr, NULL };

	if (left_ms < timeout_ms)
		timeout_ms = (long)left_ms;
	c->req = h1_request(hp->h1, c->probe ? "GET" : "POST", c->target, hdrs,
	    c->probe ? NULL : c->form, c->probe ? 0 : c->formlen, timeout_ms,
	    on_h1_header, on_h1_body, on_h1_done, c);
	return c->req != NULL ? 0 : -1;
}

/*
 * A probe's page target: the search for our key (page c->after), or the
 * list over [gte, lte] after c->after. 0 or -1.
 */
static int
probe_target(struct http_call *c)
{
	char q[3 * PROVIDER_ID_MAX + 256];

	if (c->searching
	        ? wire_search_query(c->dkey, c->after, q, sizeof(q)) < 0
	        : wire_list_query(c->gte, c->lte, c->after, q, sizeof(q)) < 0)
		return -1;
	return (size_t)snprintf(c->target, sizeof(c->target), "%s%s%s",
	           c->hp->h1_prefix, c->searching ? SEARCH_PATH : LIST_PATH,
	           q) >= sizeof(c->target)
	    ? -1
	    : 0;
}

static void
attempt_start(struct http_call *c)
{
	/*
	 * A backoff that ended late leaves no time, and a re-send of an
	 * unknown outcome never starts past the execute window: no attempt,
	 * the call ends with what the attempts so far proved.
	 */
	if ((c->deadline_us - now_mono_us()) / 1000 < ATTEMPT_MIN_MS ||
	    (c->resend_until_ms > 0 && now_wall_ms() >= c->resend_until_ms)) {
		call_settle(c, c->probe ? SV_UNKNOWN : settle_end(&c->fold));
		return;
	}
	call_set_state(c, HC_ATTEMPT);
	c->body_len = 0;
	c->should_retry = -1;
	c->replayed_now = 0;
	c->date_ms = 0;
	c->prov_rid[0] = '\0';
	c->res.attempts++;
	if (c->probe && !c->search_sent) {
		c->probe_sent_ms = now_wall_ms(); /* the probe's first read */
		c->search_sent = 1;
	}
	if ((c->probe && probe_target(c) != 0) || attempt_h1(c) != 0) {
		(void)snprintf(c->res.why, sizeof(c->res.why),
		    "cannot start a request");
		call_settle(c, c->probe ? SV_UNKNOWN : settle_end(&c->fold));
	}
}

/* --- the provider --------------------------------------------------------- */

/* The request's id and trace into c: kept for the log, and the header
 * lines that send them on ("" when the call has none). */
static void
call_trace(struct http_call *c, const struct provider_call *call)
{
	struct util_buf b;

	util_buf_init(&b, c->trace_hdr, sizeof(c->trace_hdr));
	if (call->request_id != NULL &&
	    strlen(call->request_id) < sizeof(c->rid)) {
		memcpy(c->rid, call->request_id, strlen(call->request_id) + 1);
		util_buf_str(&b, RID_HDR);
		util_buf_str(&b, c->rid);
		util_buf_str(&b, "\r\n");
	}
	if (call->trace_id != NULL &&
	    strlen(call->trace_id) < sizeof(c->trace_id))
		memcpy(c->trace_id, call->trace_id, strlen(call->trace_id) + 1);
	if (call->traceparent != NULL &&
	    strlen(call->traceparent) == TRACEPARENT_LEN) {
		util_buf_str(&b, TRACE_HDR);
		util_buf_str(&b, call->traceparent);
		util_buf_str(&b, "\r\n");
	}
}

static int
http_start(void *impl, const struct provider_call *call, provider_cb *cb,
    void *arg)
{
	struct http_provider *hp = impl;
	struct http_call *c;

	if (strlen(call->params->currency) >= PROVIDER_CURRENCY_MAX ||
	    (c = calloc(1, sizeof(*c))) == NULL)
		return -1;
	c->hp = hp;
	c->cb = cb;
	c->arg = arg;
	c->probe = call->probe;
	c->resend_until_ms = call->probe ? 0 : call->resend_until_ms;
	c->res.outcome = PROV_UNKNOWN;
	c->deadline_us = call->deadline_us;
	settle_begin(&c->fold, call->resume);
	if (wire_downstream_key(hp->cfg->provider_secret, call->principal,
	        call->key, call->keylen, call->fingerprint, c->dkey) != 0)
		goto fail;
	memcpy(c->currency, call->params->currency,
	    strlen(call->params->currency) + 1);
	c->expect.request = c->dkey;
	c->expect.amount = call->params->amount;
	c->expect.currency = c->currency;
	memcpy(c->key_hdr, KEY_HDR, sizeof(KEY_HDR) - 1);
	memcpy(c->key_hdr + sizeof(KEY_HDR) - 1, c->dkey, WIRE_KEY_LEN);
	memcpy(c->key_hdr + sizeof(KEY_HDR) - 1 + WIRE_KEY_LEN, "\r\n", 3);
	call_trace(c, call);
	if (c->probe) {
		/* every charge a delivery of this request could have made */
		c->quiet_ms = call->quiet_ms;
		c->res.quiet_ms = call->quiet_ms; /* a read moves no quiet */
		/* the range on the provider's clock, as last measured */
		c->used_off_ms =
		    hp->cfg->provider_clock_skew_max_s > 0 && hp->skew_known
		    ? hp->skew_ms
		    : 0;
		/*
		 * with a search: it first (every run's charge, whatever Redis
		 * lost), then the list over what it may not show yet
		 * (probe_search_done); else the list from the first claim
		 */
		c->searching = hp->cfg->provider_search_lag_s > 0;
		c->resume_lte = call->probe_lte;
		settle_list_range(call->created_ms,
		    call->quiet_ms > 0 ? call->quiet_ms : now_wall_ms(),
		    settle_execute_ms(hp->cfg->provider_timeout_ms,
		        hp->cfg->provider_execute_max_ms),
		    c->used_off_ms, SETTLE_RANGE_MARGIN_MS, &c->gte, &c->lte);
		if (c->resume_lte > 0 && c->resume_lte < c->lte)
			c->lte = c->resume_lte; /* the part above: read */
	} else {
		if ((c->form = wire_form_body(call, c->dkey, &c->formlen)) ==
		    NULL)
			goto fail;
		/* the prefix fits with room to spare (provider_http_new) */
		memcpy(c->target, hp->h1_prefix, hp->h1_prefixlen);
		memcpy(c->target + hp->h1_prefixlen, CHARGES_PATH,
		    sizeof(CHARGES_PATH));
	}
	(void)uv_timer_init(hp->loop, &c->backoff);
	c->backoff.data = c;
	LIST_INSERT_HEAD(&hp->calls, c, entry);
	attempt_start(c);
	return 0;
fail:
	free(c->form);
	free(c);
	return -1;
}

static void
http_free(void *impl)
{
	struct http_provider *hp = impl;
	struct http_call *c;

	while ((c = LIST_FIRST(&hp->calls)) != NULL) {
		(void)uv_timer_stop(&c->backoff);
		c->res.outcome = PROV_UNKNOWN;
		(void)snprintf(c->res.why, sizeof(c->res.why), "shutting down");
		call_done(c);
	}
	/* closes the kept connections; freed once the loop closed its handles */
	h1_pool_free(hp->h1);
	free(hp);
}

/* The header lines that carry the API key: hp->auth, then both requests'. */
static int
http_headers_set(struct http_provider *hp, const char *key)
{
	char auth[sizeof(hp->auth)], post[sizeof(hp->h1_hdr_post)];
	char get[sizeof(hp->h1_hdr_get)];

	if ((size_t)snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
	        key) >= sizeof(auth) ||
	    (size_t)snprintf(post, sizeof(post),
	        "%s\r\nContent-Type: application/x-www-form-urlencoded\r\n",
	        auth) >= sizeof(post) ||
	    (size_t)snprintf(get, sizeof(get), "%s\r\n", auth) >= sizeof(get))
		return -1;
	memcpy(hp->auth, auth, sizeof(auth));
	memcpy(hp->h1_hdr_post, post, sizeof(post));
	memcpy(hp->h1_hdr_get, get, sizeof(get));
	return 0;
}

static int
http_set_api_key(void *impl, const char *key)
{
	return http_headers_set(impl, key);
}

static const struct provider_ops http_ops = { http_start, http_free,
	http_set_api_key };

/* Splits provider_url into the base URL and a unix socket path. 0 or -1. */
static int
url_split(const char *url, char *base, size_t baselen, char *unix_path,
    size_t pathlen)
{
	size_t n = strlen(url);

	while (n > 0 && url[n - 1] == '/')
		n--;
	unix_path[0] = '\0';
	if (strncmp(url, "unix:", 5) == 0) {
		if ((size_t)snprintf(unix_path, pathlen, "%s", url + 5) >=
		    pathlen)
			return -1;
		(void)snprintf(base, baselen, "http://localhost");
		return 0;
	}
	if (n >= baselen)
		return -1;
	memcpy(base, url, n);
	base[n] = '\0';
	return 0;
}

/*
 * The pool for hp->base (http://HOST[:PORT][/PREFIX],
 * https://..., or a unix socket), and its constant header lines. 0 or -1.
 */
static int
h1_setup(struct http_provider *hp, char *errstr, size_t errlen)
{
	const struct config *cfg = hp->cfg;
	struct h1_target t;
	struct h1_proxy px;
	char host[256] = "";
	const char *path;
	int rc = 0;

	memset(&t, 0, sizeof(t));
	if (wire_url_split(hp->base, host, sizeof(host), &t.port, &t.tls,
	        &path) != 0 ||
	    (hp->unix_path[0] == '\0' && host[0] == '\0'))
		goto bad;
	(void)snprintf(hp->h1_prefix, sizeof(hp->h1_prefix), "%s", path);
	hp->h1_prefixlen = strlen(hp->h1_prefix);
	t.host = host;
	t.unix_path = hp->unix_path;
	t.ca_file = cfg->provider_ca_file;
	t.verify = cfg->provider_tls_verify;
	t.connect_timeout_ms = cfg->provider_connect_timeout_ms;
	t.max_idle_s = PROVIDER_MAXAGE_CONN_S;
	t.idle_max = PROVIDER_CONNS_KEPT;
	/* a unix socket never goes through a proxy */
	if (hp->unix_path[0] == '\0' &&
	    (rc = h1_proxy_env(t.tls, host, &px, errstr, errlen)) < 0)
		return -1;
	t.proxy = rc == 1 ? &px : NULL;
	if (rc == 1)
		log_info(NULL, "provider: through the proxy %s:%d", px.host,
		    px.port);
	if (http_headers_set(hp, cfg->provider_api_key) != 0)
		goto bad;
	hp->h1 = h1_pool_new(hp->loop, &t, errstr, errlen);
	return hp->h1 != NULL ? 0 : -1;
bad:
	util_err(errstr, errlen,
	    "provider_url: %s is not http(s)://HOST[:PORT]", hp->base);
	return -1;
}

struct provider *
provider_http_new(uv_loop_t *loop, const struct config *cfg, char *errstr,
    size_t errlen)
{
	struct http_provider *hp = NULL;
	struct provider *p = NULL;

	if ((p = calloc(1, sizeof(*p))) == NULL ||
	    (hp = calloc(1, sizeof(*hp))) == NULL) {
		util_err(errstr, errlen, "provider: out of memory");
		goto fail;
	}
	hp->loop = loop;
	hp->cfg = cfg;
	hp->rng = (uint64_t)now_mono_us() ^ (uint64_t)(uintptr_t)hp;
	if (hp->rng == 0)
		hp->rng = 1;
	LIST_INIT(&hp->calls);
	if (url_split(cfg->provider_url, hp->base, sizeof(hp->base),
	        hp->unix_path, sizeof(hp->unix_path)) != 0) {
		util_err(errstr, errlen, "provider_url: too long");
		goto fail;
	}
	if (h1_setup(hp, errstr, errlen) != 0)
		goto fail;
	p->ops = &http_ops;
	p->impl = hp;
	return p;
fail:
	free(hp);
	free(p);
	return NULL;
}
