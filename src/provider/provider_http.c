/*
 * provider_http.c - POST /v1/charges with libcurl's multi-socket interface
 * on libuv (curl_uv.c: the sockets and the timeout on the loop). One multi
 * handle per loop owns the kept-alive connections.
 *
 * What one attempt costs is kept low (a fresh charge through the provider
 * should cost little more CPU than one with the in-process simulation):
 * easy handles are reused from a per-loop pool with the options that never
 * change set once; the headers are a constant list behind two per-call
 * nodes (Authorization, Idempotency-Key); the charges URL is parsed once.
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

#include <curl/curl.h>

#include "clock.h"
#include "curl_uv.h"
#include "http1.h"
#include "log.h"
#include "metrics.h"
#include "provider_http.h"
#include "provider_wire.h"
#include "util.h"

#define CHARGES_PATH "/v1/charges"
#define LIST_PATH "/v1/charges?"
#define PROBE_PAGES_MAX 1000 /* pages of one probe: 100 000 charges */
#define PROBE_SKEW_S 60      /* the provider's clock against ours, either way */
#define BODY_MAX (1024 * 1024) /* bytes of a provider's answer */
#define ATTEMPT_MIN_MS 50      /* an attempt with less time left: none */
#define EASY_POOL_MAX 64       /* idle easy handles kept per loop */

struct http_call;

struct http_provider;

struct http_provider {
	uv_loop_t *loop;
	const struct config *cfg;
	struct curl_uv *cu;     /* the multi handle on the loop */
	char base[URL_MAX_LEN]; /* scheme://host:port, or http://localhost */
	char unix_path[URL_MAX_LEN]; /* "" unless unix: */
	char auth[300];              /* Authorization: Bearer ... */
	int proxy_off;               /* 1: no proxy variable at start */
	struct curl_slist *hdr_post; /* Expect:, Content-Type: (constant) */
	struct curl_slist *hdr_get;  /* Expect: (constant) */
	CURLU *charges_url;          /* base + CHARGES_PATH, parsed once */
	CURL *idle[EASY_POOL_MAX];   /* easy handles between transfers */
	size_t idle_n;
	LIST_HEAD(, http_call) calls;
	uint64_t rng; /* the backoff's jitter */
	/* the native client (http1.c), when provider_client is native */
	struct h1_pool *h1;
	char h1_prefix[URL_MAX_LEN]; /* the path before /v1/charges */
	char h1_hdr_post[400], h1_hdr_get[300]; /* constant header lines */
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
	char url[URL_MAX_LEN + 256];
	long long deadline_us;
	/* a probe: the list over [gte, lte], page by page */
	int probe;
	long long gte, lte;      /* Unix seconds */
	long long quiet_ms;      /* no delivery went out after it */
	long long probe_sent_ms; /* when the first page was asked for */
	int pages;
	int probe_mismatch; /* a page named us with another amount */
	long long
	    resend_until_ms; /* no delivery starts from then on; 0: none */
	int sends; /* requests libcurl sent in this transfer (its own re-send counts) */
	char after[PROVIDER_ID_MAX];
	CURL *easy;         /* the attempt in flight, or NULL */
	struct h1_req *req; /* the native client's attempt in flight, or NULL */
	/* Authorization, Idempotency-Key, then the provider's constant list */
	struct curl_slist hdr_auth, hdr_key;
	char key_hdr[WIRE_KEY_LEN + 32];
	char *body; /* the answer being read */
	size_t body_len, body_cap;
	int should_retry; /* Stripe-Should-Retry: 1, 0, -1 */
	uv_timer_t backoff;
	int backoff_open;
	struct provider_result res;
	LIST_ENTRY(http_call) entry;
};

static int proxy_env_unset(void);

int
provider_http_global_init(const struct config *cfg)
{
	/* the native client needs no global set-up (OpenSSL's is its own) */
	if (cfg->provider_url[0] == '\0')
		return 0;
	if (strcmp(cfg->provider_client, "native") == 0)
		return 0;
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

/* --- one attempt --------------------------------------------------------- */

static size_t
on_curl_body(char *p, size_t size, size_t n, void *arg)
{
	struct http_call *c = arg;
	size_t len = size * n;

	if (len > BODY_MAX - c->body_len)
		return 0; /* too long: the transfer fails (ambiguous) */
	if (util_grow(&c->body, &c->body_cap, c->body_len + len + 1, 4096,
	        BODY_MAX + 1) != 0)
		return 0;
	memcpy(c->body + c->body_len, p, len);
	c->body_len += len;
	c->body[c->body_len] = '\0';
	return len;
}

/* One header of the answer, as the native client hands it over. */
static void
on_h1_header(void *arg, const char *name, size_t nlen, const char *value,
    size_t vlen)
{
	static const char retry[] = "Stripe-Should-Retry";
	static const char replayed[] = "Idempotent-Replayed";
	struct http_call *c = arg;

	if (nlen == sizeof(replayed) - 1 &&
	    strncasecmp(name, replayed, nlen) == 0) {
		if (c->res.attempts == 1 && vlen >= 4 &&
		    strncasecmp(value, "true", 4) == 0)
			c->res.replayed = 1;
	} else if (nlen == sizeof(retry) - 1 &&
	    strncasecmp(name, retry, nlen) == 0) {
		if (vlen >= 4 && strncasecmp(value, "true", 4) == 0)
			c->should_retry = 1;
		else if (vlen >= 5 && strncasecmp(value, "false", 5) == 0)
			c->should_retry = 0;
	}
}

static int
on_h1_body(void *arg, const char *p, size_t len)
{
	return on_curl_body((char *)p, 1, len, arg) == len ? 0 : -1;
}

static size_t
on_curl_header(char *p, size_t size, size_t n, void *arg)
{
	static const char name[] = "Stripe-Should-Retry:";
	static const char replayed[] = "Idempotent-Replayed: true";
	struct http_call *c = arg;
	size_t len = size * n, i = sizeof(name) - 1;

	/* the first delivery of this call replayed: an earlier call executed */
	if (c->res.attempts == 1 && len >= sizeof(replayed) - 1 &&
	    strncasecmp(p, replayed, sizeof(replayed) - 1) == 0)
		c->res.replayed = 1;
	if (len >= i && strncasecmp(p, name, i) == 0) {
		while (i < len && (p[i] == ' ' || p[i] == '\t'))
			i++;
		if (len - i >= 4 && strncasecmp(p + i, "true", 4) == 0)
			c->should_retry = 1;
		else if (len - i >= 5 && strncasecmp(p + i, "false", 5) == 0)
			c->should_retry = 0;
	}
	return len;
}

static void attempt_start(struct http_call *c);
static void call_settle(struct http_call *c, enum settle_verdict v);

/*
 * Called by libcurl each time it is about to send the request, its own
 * re-send included: after a kept connection died it sends a POST again on
 * a fresh one within the same transfer, and the first may have executed.
 */
static int
on_curl_prereq(void *arg, char *conn_primary_ip, char *conn_local_ip,
    int conn_primary_port, int conn_local_port)
{
	struct http_call *c = arg;

	(void)conn_primary_ip;
	(void)conn_local_ip;
	(void)conn_primary_port;
	(void)conn_local_port;
	if (c != NULL)
		c->sends++;
	return CURL_PREREQFUNC_OK;
}

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
	struct http_provider *hp = c->hp;

	if (c->req != NULL) {
		h1_cancel(c->req);
		c->req = NULL;
	}
	if (c->easy == NULL)
		return;
	curl_uv_remove(hp->cu, c->easy);
	/* no pointer into the call stays behind in a pooled handle */
	(void)curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, NULL);
	(void)curl_easy_setopt(c->easy, CURLOPT_PRIVATE, NULL);
	(void)curl_easy_setopt(c->easy, CURLOPT_PREREQDATA, NULL);
	if (hp->idle_n < EASY_POOL_MAX)
		hp->idle[hp->idle_n++] = c->easy;
	else
		curl_easy_cleanup(c->easy);
	c->easy = NULL;
}

static void
call_set_state(struct http_call *c, enum http_call_state to)
{
	(void)http_call_allowed; /* read by the asserts only */
	assert(c->state < HC_NSTATES && to < HC_NSTATES);
	assert((http_call_allowed[c->state] & (1u << to)) != 0);
	/* one attempt in flight at a time: none when another starts */
	assert(to != HC_ATTEMPT || (c->easy == NULL && c->req == NULL));
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
 * What a transfer that got no HTTP answer proves: nothing reached the
 * provider when the certificate was refused, or when no connection could
 * be made and libcurl never got to send the request (sends: its
 * CURLOPT_PREREQFUNCTION calls; it re-sends on a fresh connection after a
 * kept one died, and the first may have arrived). Anything else may have
 * executed.
 */
static enum settle_class
transport_class(CURLcode rc, int sends)
{
	if (rc == CURLE_PEER_FAILED_VERIFICATION ||
	    rc == CURLE_SSL_CACERT_BADFILE)
		return SC_NOT_SENT;
	if ((rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST) &&
	    sends == 0)
		return SC_NOT_SENT;
	return SC_MAYBE;
}

/*
 * The same facts from the native client: the certificate refused (or the
 * CA file unreadable), or no connection and no byte of the request
 * written, prove nothing was delivered. A connect or TLS timeout, a reset
 * or an answer cut short may follow a delivery, and count as one (as
 * libcurl's results did).
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

/* What one transfer came to, whichever client made it. */
struct xfer {
	long status;          /* the answer's; 0: none (why says why) */
	enum settle_class sc; /* what a transfer without an answer proves */
	int tls_refused;      /* the certificate, or the CA file */
	int sends;            /* deliveries in it (re-sends included) */
	const char *why;      /* a transfer without an answer: what it was */
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
	case SV_UNKNOWN: c->res.outcome = PROV_UNKNOWN; break;
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

/* One page of a probe came back (status 200): next page, or the verdict. */
static void
probe_page_done(struct http_call *c)
{
	enum settle_probe p;
	int more = 0;

	p = wire_parse_list(c->body != NULL ? c->body : "", c->body_len,
	    &c->expect, &c->res, &more, c->after);
	if (p == PROBE_NOT_OURS) {
		c->probe_mismatch = 1;
		p = PROBE_NONE; /* go on: ours may still come */
	}
	if (p == PROBE_NONE && more) {
		if (++c->pages >= PROBE_PAGES_MAX || c->after[0] == '\0') {
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
	(void)snprintf(c->res.why, sizeof(c->res.why), "list: %s",
	    p == PROBE_FOUND || p == PROBE_FOUND_DECLINED ? "found"
	        : p == PROBE_NONE                         ? "none"
	                                                  : "not settled");
	call_settle(c,
	    settle_probe(p, c->probe_sent_ms, c->quiet_ms,
	        c->hp->cfg->provider_timeout_ms));
}

/* What one finished transfer came to, by the table of provider_wire.c. */
static void
attempt_done(struct http_call *c, const struct xfer *x)
{
	struct wire_attempt a = { 0, NULL, NULL, -1 };
	char type[PROVIDER_CODE_MAX] = "", code[PROVIDER_CODE_MAX] = "";
	struct settle_seen seen;
	enum settle_class sc;
	enum settle_verdict sv;
	struct wire_verdict v;
	long status = x->status;
	int ok = x->why == NULL;

	sc = ok ? SC_MAYBE : x->sc;
	attempt_cleanup(c);
	a.status = ok ? status : 0;
	a.should_retry = c->should_retry;
	if (a.status != 200 && a.status != 0 && c->body != NULL &&
	    wire_parse_error(c->body, c->body_len, a.status, type, code,
	        &c->res) == 0) {
		a.err_type = type;
		a.err_code = code;
	}
	v = wire_classify(&a);
	metrics_provider_attempt(v.attempt);
	if (!ok)
		(void)snprintf(c->res.why, sizeof(c->res.why), "%s", x->why);
	else
		(void)snprintf(c->res.why, sizeof(c->res.why), "%ld %s%s%s",
		    status, v.label, code[0] != '\0' ? " " : "", code);
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
		if (a.status == 200) {
			probe_page_done(c);
			return;
		}
		attempt_retry(c); /* the page again, within the deadline */
		return;
	}
	if (ok)
		sc = v.settle;
	if (sc == SC_CHARGE) {
		if (c->body == NULL ||
		    wire_parse_charge(c->body, c->body_len, &c->res) != 0)
			sc = SC_MAYBE; /* a 200 that is no charge */
		else {
			seen.request = c->res.seen_request;
			seen.amount = c->res.seen_amount;
			seen.currency = c->res.seen_currency;
			if (!settle_is_ours(&c->expect, &seen))
				sc = SC_NOT_OURS;
		}
	}
	if (sc == SC_DECLINE && c->res.outcome != PROV_DECLINED)
		sc = SC_MAYBE; /* a 402 without an error object */
	if (v.cls == WIRE_BUG)
		log_error(NULL,
		    "provider: downstream key %.20s... was used with other parameters (idempotency_error): a bug",
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

/* A transfer is over (curl_uv.c): the attempt it was comes to an end. */
static void
on_transfer_done(CURL *easy, CURLcode result, void *arg)
{
	struct http_call *c = NULL;
	struct xfer x = { 0, SC_MAYBE, 0, 0, NULL };

	(void)arg;
	(void)curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&c);
	if (c == NULL)
		return;
	if (result == CURLE_OK)
		(void)curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE,
		    &x.status);
	else {
		x.sc = transport_class(result, c->sends);
		x.why = curl_easy_strerror(result);
		x.tls_refused = result == CURLE_PEER_FAILED_VERIFICATION ||
		    result == CURLE_SSL_CACERT_BADFILE;
	}
	x.sends = c->sends;
	attempt_done(c, &x);
}

/* The native client's request is over (it frees the request after). */
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

/* One attempt through the native client; 0 or -1. */
static int
attempt_h1(struct http_call *c)
{
	struct http_provider *hp = c->hp;
	long long left_ms = (c->deadline_us - now_mono_us()) / 1000;
	long timeout_ms = hp->cfg->provider_timeout_ms;
	char target[URL_MAX_LEN + 256], hdrs[600];
	const char *path;

	if (left_ms < timeout_ms)
		timeout_ms = (long)left_ms;
	/* the path of c->url, after the base */
	path = c->url + strlen(hp->base);
	if ((size_t)snprintf(target, sizeof(target), "%s%s", hp->h1_prefix,
	        path) >= sizeof(target) ||
	    (size_t)snprintf(hdrs, sizeof(hdrs), "%s%s\r\n",
	        c->probe ? hp->h1_hdr_get : hp->h1_hdr_post,
	        c->key_hdr) >= sizeof(hdrs))
		return -1;
	c->req = h1_request(hp->h1, c->probe ? "GET" : "POST", target, hdrs,
	    c->probe ? NULL : c->form, c->probe ? 0 : c->formlen, timeout_ms,
	    on_h1_header, on_h1_body, on_h1_done, c);
	return c->req != NULL ? 0 : -1;
}

/* The options every attempt shares, set once per easy handle; 0 or -1. */
static int
easy_setup(struct http_provider *hp, CURL *e)
{
	const struct config *cfg = hp->cfg;
	int rc = 0;

	if (hp->unix_path[0] != '\0')
		rc |= curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH,
		    hp->unix_path);
	rc |= curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_curl_body);
	rc |= curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_curl_prereq);
	rc |= curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_curl_header);
	rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	rc |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)cfg->provider_connect_timeout_ms);
	rc |= curl_easy_setopt(e, CURLOPT_MAXAGE_CONN,
	    (long)PROVIDER_MAXAGE_CONN_S);
	rc |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	rc |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER,
	    cfg->provider_tls_verify ? 1L : 0L);
	rc |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST,
	    cfg->provider_tls_verify ? 2L : 0L);
	if (cfg->provider_ca_file[0] != '\0' &&
	    strcmp(cfg->provider_ca_file, "none") != 0)
		rc |=
		    curl_easy_setopt(e, CURLOPT_CAINFO, cfg->provider_ca_file);
	rc |= curl_uv_easy_setup(hp->cu, e);
	if (hp->proxy_off) {
		/* no proxy variable was set: none looked up per transfer */
		rc |= curl_easy_setopt(e, CURLOPT_PROXY, "");
		rc |= curl_easy_setopt(e, CURLOPT_NOPROXY, "");
	}
	return rc == 0 ? 0 : -1;
}

/* An easy handle from the pool, or a new one; NULL on ENOMEM. */
static CURL *
easy_take(struct http_provider *hp)
{
	CURL *e;

	if (hp->idle_n > 0)
		return hp->idle[--hp->idle_n];
	if ((e = curl_easy_init()) != NULL && easy_setup(hp, e) != 0) {
		curl_easy_cleanup(e);
		e = NULL;
	}
	return e;
}

/* Sets the options of one attempt; 0 or -1. */
static int
attempt_setup(struct http_call *c)
{
	const struct config *cfg = c->hp->cfg;
	struct http_provider *hp = c->hp;
	long long left_ms = (c->deadline_us - now_mono_us()) / 1000;
	long timeout_ms = cfg->provider_timeout_ms;
	CURL *e = c->easy;
	int rc = 0;

	if (left_ms < timeout_ms)
		timeout_ms = (long)left_ms;
	/* libcurl reads the list during the transfer; the call outlives it */
	c->hdr_auth.data = hp->auth;
	c->hdr_auth.next = &c->hdr_key;
	c->hdr_key.data = c->key_hdr;
	c->hdr_key.next = c->probe ? hp->hdr_get : hp->hdr_post;
	/*
	 * The charges URL is parsed once (CURLOPT_CURLU, read by libcurl at
	 * every transfer); a search's URL is a string. CURLOPT_URL is set
	 * too: the handle's URL for everything else libcurl reports.
	 */
	rc |= curl_easy_setopt(e, CURLOPT_CURLU,
	    c->probe ? NULL : hp->charges_url);
	rc |= curl_easy_setopt(e, CURLOPT_URL, c->url);
	rc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, &c->hdr_auth);
	if (!c->probe) {
		rc |= curl_easy_setopt(e, CURLOPT_POST, 1L);
		rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->form);
		rc |= curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE,
		    (long)c->formlen);
	} else {
		rc |= curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	}
	rc |= curl_easy_setopt(e, CURLOPT_PRIVATE, c);
	rc |= curl_easy_setopt(e, CURLOPT_PREREQDATA, c);
	rc |= curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
	rc |= curl_easy_setopt(e, CURLOPT_HEADERDATA, c);
	rc |= curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
	return rc == 0 ? 0 : -1;
}

/* A probe's page URL: the list over [gte, lte] after c->after. 0 or -1. */
static int
probe_url(struct http_call *c)
{
	char q[256];

	return wire_list_query(c->gte, c->lte, c->after, q, sizeof(q)) < 0 ||
	        (size_t)snprintf(c->url, sizeof(c->url), "%s%s%s", c->hp->base,
	            LIST_PATH, q) >= sizeof(c->url)
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
	c->sends = 0;
	c->res.attempts++;
	if (c->probe && c->pages == 0)
		c->probe_sent_ms = now_wall_ms(); /* the list's moment */
	if (c->hp->h1 != NULL) {
		if ((c->probe && probe_url(c) != 0) || attempt_h1(c) != 0) {
			(void)snprintf(c->res.why, sizeof(c->res.why),
			    "cannot start a request");
			call_settle(c,
			    c->probe ? SV_UNKNOWN : settle_end(&c->fold));
		}
		return;
	}
	if ((c->probe && probe_url(c) != 0) ||
	    (c->easy = easy_take(c->hp)) == NULL || attempt_setup(c) != 0 ||
	    curl_uv_add(c->hp->cu, c->easy) != 0) {
		(void)snprintf(c->res.why, sizeof(c->res.why),
		    "cannot start a transfer");
		attempt_cleanup(c);
		call_settle(c, c->probe ? SV_UNKNOWN : settle_end(&c->fold));
	}
}

/* --- the provider --------------------------------------------------------- */

static int
http_start(void *impl, const struct provider_call *call, provider_cb *cb,
    void *arg)
{
	struct http_provider *hp = impl;
	struct http_call *c;

	if (strlen(call->currency) >= PROVIDER_CURRENCY_MAX ||
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
	memcpy(c->currency, call->currency, strlen(call->currency) + 1);
	c->expect.request = c->dkey;
	c->expect.amount = call->amount;
	c->expect.currency = c->currency;
	(void)snprintf(c->key_hdr, sizeof(c->key_hdr), "Idempotency-Key: %s",
	    c->dkey);
	if (c->probe) {
		/* every charge a delivery of this request could have made */
		c->quiet_ms = call->quiet_ms;
		c->gte = call->created_ms / 1000 - PROBE_SKEW_S;
		c->lte = (call->quiet_ms > 0 ? call->quiet_ms : now_wall_ms()) /
		        1000 +
		    hp->cfg->provider_timeout_ms / 1000 + 1 + PROBE_SKEW_S;
		if (c->gte < 0)
			c->gte = 0;
	} else {
		if ((c->form = wire_form_body(call->canon, call->canonlen,
		         call->principal, call->key, call->keylen, c->dkey,
		         &c->formlen)) == NULL)
			goto fail;
		(void)snprintf(c->url, sizeof(c->url), "%s%s", hp->base,
		    CHARGES_PATH);
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
	while (hp->idle_n > 0)
		curl_easy_cleanup(hp->idle[--hp->idle_n]);
	/* closes the kept connections; freed once the loop closed its handles */
	curl_uv_free(hp->cu);
	h1_pool_free(hp->h1);
	curl_slist_free_all(hp->hdr_post);
	curl_slist_free_all(hp->hdr_get);
	curl_url_cleanup(hp->charges_url);
	free(hp);
}

static const struct provider_ops http_ops = { http_start, http_free };

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
 * 1 when none of the variables libcurl takes a proxy from is set. The
 * environment does not change after start, so libcurl need not look it up
 * again for every transfer (CURLOPT_PROXY ""); a deployment that sets one
 * keeps libcurl's own lookup, no_proxy included.
 */
static int
proxy_env_unset(void)
{
	static const char *const names[] = { "http_proxy", "HTTP_PROXY",
		"https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY" };
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (getenv(names[i]) != NULL)
			return 0;
	return 1;
}

/*
 * The native client's pool for hp->base (http://HOST[:PORT][/PREFIX],
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
	if ((size_t)snprintf(hp->h1_hdr_post, sizeof(hp->h1_hdr_post),
	        "%s\r\nContent-Type: application/x-www-form-urlencoded\r\n",
	        hp->auth) >= sizeof(hp->h1_hdr_post) ||
	    (size_t)snprintf(hp->h1_hdr_get, sizeof(hp->h1_hdr_get), "%s\r\n",
	        hp->auth) >= sizeof(hp->h1_hdr_get))
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
	char url[URL_MAX_LEN + sizeof(CHARGES_PATH)];

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
	        hp->unix_path, sizeof(hp->unix_path)) != 0 ||
	    (size_t)snprintf(hp->auth, sizeof(hp->auth),
	        "Authorization: Bearer %s",
	        cfg->provider_api_key) >= sizeof(hp->auth)) {
		util_err(errstr, errlen, "provider_url: too long");
		goto fail;
	}
	hp->proxy_off = proxy_env_unset();
	/* the native client, through a proxy from the environment too */
	if (strcmp(cfg->provider_client, "native") == 0) {
		if (h1_setup(hp, errstr, errlen) != 0)
			goto fail;
		p->ops = &http_ops;
		p->impl = hp;
		return p;
	}
	/*
	 * Parsed with the flags libcurl parses a CURLOPT_URL with. A URL it
	 * refuses stays a string: every transfer fails on it, as before.
	 */
	(void)snprintf(url, sizeof(url), "%s%s", hp->base, CHARGES_PATH);
	if ((hp->charges_url = curl_url()) != NULL &&
	    curl_url_set(hp->charges_url, CURLUPART_URL, url,
	        CURLU_GUESS_SCHEME | CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
		curl_url_cleanup(hp->charges_url);
		hp->charges_url = NULL;
	}
	/* no Expect: 100-continue, no Accept: */
	if ((hp->hdr_get = curl_slist_append(NULL, "Expect:")) == NULL ||
	    curl_slist_append(hp->hdr_get, "Accept:") == NULL ||
	    (hp->hdr_post = curl_slist_append(NULL, "Expect:")) == NULL ||
	    curl_slist_append(hp->hdr_post, "Accept:") == NULL ||
	    curl_slist_append(hp->hdr_post,
	        "Content-Type: application/x-www-form-urlencoded") == NULL) {
		util_err(errstr, errlen, "provider: out of memory");
		goto fail;
	}
	if ((hp->cu = curl_uv_new(loop, PROVIDER_CONNS_KEPT, on_transfer_done,
	         hp)) == NULL) {
		util_err(errstr, errlen, "provider: curl_multi_init failed");
		goto fail;
	}
	p->ops = &http_ops;
	p->impl = hp;
	return p;
fail:
	if (hp != NULL) {
		curl_uv_free(hp->cu);
		curl_slist_free_all(hp->hdr_post);
		curl_slist_free_all(hp->hdr_get);
		curl_url_cleanup(hp->charges_url);
	}
	free(hp);
	free(p);
	return NULL;
}
