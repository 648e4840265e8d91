/*
 * webhook.c - events, deliveries, a min-heap of their next attempts, and
 * one short HTTP/1.1 exchange per attempt (Connection: close).
 */
#include "webhook.h"

#include <errno.h>
#include <inttypes.h>
#include <llhttp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "form.h"

#define WH_EVENT_ID_LEN 28 /* "evt_" + 24 hex */
#define WH_ERROR_LEN 64
#define WH_HOST_MAX 300

enum wh_state {
	WH_PENDING,   /* waiting for its next attempt */
	WH_IN_FLIGHT, /* an attempt runs */
	WH_DELIVERED, /* a 2xx answer */
	WH_FAILED,    /* every attempt failed */
	WH_DROPPED,   /* the drop fault: never sent */
	WH_ABANDONED, /* evicted or stopped before it was delivered */
};

static const char *const state_names[] = {
	[WH_PENDING] = "pending",
	[WH_IN_FLIGHT] = "in_flight",
	[WH_DELIVERED] = "delivered",
	[WH_FAILED] = "failed",
	[WH_DROPPED] = "dropped",
	[WH_ABANDONED] = "abandoned",
};

struct wh_endpoint {
	const char *url; /* as configured */
	bool is_unix;
	char *sock; /* unix: the socket's path */
	struct sockaddr_storage addr;
	char *path;
	char host[WH_HOST_MAX]; /* the Host header */
};

struct wh_attempt {
	int64_t at_ms; /* Unix ms at its start */
	int status;    /* HTTP status, 0 when there was no answer */
	unsigned ms;   /* its duration */
	char error[WH_ERROR_LEN];
};

struct wh_event;
struct wh_conn;

struct wh_delivery {
	struct wh_event *ev;
	size_t endpoint;
	bool duplicate;
	unsigned delay_ms; /* the shuffle fault's extra wait */
	enum wh_state state;
	uint64_t due; /* loop ms of the next attempt */
	uint64_t seq; /* heap ties: first queued, first sent */
	size_t heap_ix;
	struct wh_attempt *attempts;
	unsigned n_attempts;
	struct wh_conn *conn; /* while in flight */
};

struct wh_event {
	TAILQ_ENTRY(wh_event) entry; /* oldest first */
	char id[WH_EVENT_ID_LEN + 1];
	char charge[SIM_CHARGE_ID_LEN + 1];
	const char *type;
	int64_t created;
	char *body;
	size_t body_len;
	struct wh_delivery **d;
	size_t n_d;
};

struct wh_conn {
	union {
		uv_handle_t handle;
		uv_stream_t stream;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} h;
	uv_connect_t creq;
	uv_write_t wreq;
	uv_timer_t timer;
	llhttp_t parser;
	struct sim_webhooks *w;
	struct wh_delivery *d; /* NULL once the attempt is over */
	struct sim_buf req;
	uint64_t started;
	bool complete; /* the answer was read whole */
	int closes;    /* handles still to close */
};

struct sim_webhooks {
	const struct sim_webhook_config *cfg;
	uv_loop_t *loop;
	uv_timer_t tick; /* the heap's earliest attempt */
	llhttp_settings_t settings;
	struct wh_endpoint ep[SIM_MAX_WEBHOOK_URLS];
	size_t n_ep;
	TAILQ_HEAD(, wh_event) events;
	size_t n_events;
	struct wh_delivery **heap;
	size_t heap_n;
	size_t heap_cap;
	size_t in_flight;
	uint64_t seq;
	struct sim_rng fault_rng; /* seeded: drop, dup, shuffle */
	struct sim_rng id_rng;    /* random: event ids */
	bool stopping;
	bool fresh; /* events queued since the last commit */
	/* counts since start */
	unsigned long n_created;
	unsigned long n_deliveries;
	unsigned long n_attempts;
	unsigned long n_delivered;
	unsigned long n_failed;
	unsigned long n_dropped;
	unsigned long n_duplicated;
	unsigned long n_shuffled;
	unsigned long n_evicted;
	unsigned long n_abandoned;
};

static void pump(struct sim_webhooks *w);

/* --- endpoints ------------------------------------------------------------ */

/* Parses url into ep (NULL: only checks); false with a message. */
static bool
endpoint_parse(const char *url, struct wh_endpoint *ep, char *err,
    size_t errlen)
{
	const char *a, *slash, *colon, *sep;
	char host[WH_HOST_MAX];
	struct sockaddr_storage ss;
	size_t alen;
	long port = 80;
	char *end;
	int r;

	if (strncmp(url, "unix:", 5) == 0) {
		a = url + 5;
		/* SOCKET[:/PATH]: the last ":/" starts the path */
		sep = NULL;
		for (colon = a; (colon = strstr(colon, ":/")) != NULL; colon++)
			sep = colon;
		alen = sep ? (size_t)(sep - a) : strlen(a);
		if (alen == 0 || alen >= 108) {
			snprintf(err, errlen,
			    "%s: unix:SOCKET[:/PATH] with a socket path of 1 to 107 bytes",
			    url);
			return false;
		}
		if (ep != NULL) {
			ep->is_unix = true;
			ep->sock = sim_xmemdup(a, alen);
			ep->path = sim_xmemdup(sep ? sep + 1 : "/",
			    sep ? strlen(sep + 1) : 1);
			snprintf(ep->host, sizeof(ep->host), "localhost");
		}
		return true;
	}
	if (strncmp(url, "http://", 7) != 0) {
		snprintf(err, errlen,
		    "%s: not http://HOST[:PORT][/PATH] or unix:SOCKET[:/PATH] (https is not spoken: the endpoint is local)",
		    url);
		return false;
	}
	a = url + 7;
	slash = strchr(a, '/');
	alen = slash ? (size_t)(slash - a) : strlen(a);
	if (alen == 0 || alen >= sizeof(host)) {
		snprintf(err, errlen, "%s: no host", url);
		return false;
	}
	memcpy(host, a, alen);
	host[alen] = '\0';
	colon = strrchr(host, ':');
	if (colon != NULL && (host[0] != '[' || colon > strchr(host, ']'))) {
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (errno != 0 || end == colon + 1 || *end != '\0' ||
		    port < 1 || port > 65535) {
			snprintf(err, errlen, "%s: bad port", url);
			return false;
		}
		host[colon - host] = '\0';
	}
	memset(&ss, 0, sizeof(ss));
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		host[strlen(host) - 1] = '\0';
		r = uv_ip6_addr(host + 1, (int)port,
		    (struct sockaddr_in6 *)&ss);
	} else if (strcmp(host, "localhost") == 0) {
		r = uv_ip4_addr("127.0.0.1", (int)port,
		    (struct sockaddr_in *)&ss);
	} else {
		r = uv_ip4_addr(host, (int)port, (struct sockaddr_in *)&ss);
	}
	if (r != 0) {
		snprintf(err, errlen,
		    "%s: the host must be an IPv4 or [IPv6] address or localhost",
		    url);
		return false;
	}
	if (ep != NULL) {
		ep->is_unix = false;
		ep->addr = ss;
		ep->path =
		    sim_xmemdup(slash ? slash : "/", slash ? strlen(slash) : 1);
		snprintf(ep->host, sizeof(ep->host), "%.*s", (int)alen, a);
	}
	return true;
}

bool
sim_webhook_url_check(const char *url, char *err, size_t errlen)
{
	return endpoint_parse(url, NULL, err, errlen);
}

/* --- the heap of next attempts ------------------------------------------- */

static bool
before(const struct wh_delivery *a, const struct wh_delivery *b)
{
	return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void
heap_set(struct sim_webhooks *w, size_t i, struct wh_delivery *d)
{
	w->heap[i] = d;
	d->heap_ix = i;
}

static void
heap_up(struct sim_webhooks *w, size_t i)
{
	struct wh_delivery *d = w->heap[i];

	while (i > 0 && before(d, w->heap[(i - 1) / 2])) {
		heap_set(w, i, w->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(w, i, d);
}

static void
heap_down(struct sim_webhooks *w, size_t i)
{
	struct wh_delivery *d = w->heap[i];
	size_t c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= w->heap_n)
			break;
		if (c + 1 < w->heap_n && before(w->heap[c + 1], w->heap[c]))
			c++;
		if (!before(w->heap[c], d))
			break;
		heap_set(w, i, w->heap[c]);
		i = c;
	}
	heap_set(w, i, d);
}

static void
heap_push(struct sim_webhooks *w, struct wh_delivery *d)
{
	if (w->heap_n == w->heap_cap) {
		w->heap_cap = w->heap_cap ? 2 * w->heap_cap : 64;
		w->heap =
		    sim_xrealloc(w->heap, w->heap_cap * sizeof(w->heap[0]));
	}
	d->seq = ++w->seq;
	heap_set(w, w->heap_n++, d);
	heap_up(w, w->heap_n - 1);
}

static void
heap_remove(struct sim_webhooks *w, struct wh_delivery *d)
{
	size_t i = d->heap_ix;

	struct wh_delivery *m;

	w->heap_n--;
	if (i != w->heap_n) {
		m = w->heap[w->heap_n];
		heap_set(w, i, m);
		if (i > 0 && before(m, w->heap[(i - 1) / 2]))
			heap_up(w, i);
		else
			heap_down(w, i);
	}
	d->heap_ix = SIZE_MAX;
}

/* --- one attempt ---------------------------------------------------------- */

static int64_t
unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Appends ",v1=<hex HMAC-SHA256 of "t.body">" for each secret. */
static void
add_signatures(const struct sim_webhooks *w, struct sim_buf *b,
    const struct wh_event *ev, int64_t t)
{
	struct sim_buf signed_text = { 0 };
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen;
	size_t i;

	sim_buf_addi(&signed_text, t);
	sim_buf_add(&signed_text, ".", 1);
	sim_buf_add(&signed_text, ev->body, ev->body_len);
	for (i = 0; i < w->cfg->n_secrets; i++) {
		mdlen = 0;
		if (HMAC(EVP_sha256(), w->cfg->secrets[i],
		        (int)strlen(w->cfg->secrets[i]),
		        (const unsigned char *)signed_text.p, signed_text.len,
		        md, &mdlen) == NULL)
			sim_fatal("HMAC-SHA256 failed");
		sim_buf_adds(b, ",v1=");
		sim_buf_addhex(b, md, mdlen);
	}
	sim_buf_free(&signed_text);
}

/* The request of one attempt, signed now (Stripe signs each attempt). */
static void
build_request(const struct sim_webhooks *w, struct wh_conn *k)
{
	const struct wh_delivery *d = k->d;
	const struct wh_endpoint *ep = &w->ep[d->endpoint];
	struct sim_buf *b = &k->req;
	int64_t t = (int64_t)time(NULL);

	b->len = 0;
	sim_buf_adds(b, "POST ");
	sim_buf_adds(b, ep->path);
	sim_buf_adds(b, " HTTP/1.1\r\nHost: ");
	sim_buf_adds(b, ep->host);
	sim_buf_adds(b,
	    "\r\nUser-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)\r\nContent-Type: application/json; charset=utf-8\r\nStripe-Signature: t=");
	sim_buf_addi(b, t);
	add_signatures(w, b, d->ev, t);
	sim_buf_adds(b, "\r\nContent-Length: ");
	sim_buf_addi(b, (int64_t)d->ev->body_len);
	sim_buf_adds(b, "\r\nConnection: close\r\n\r\n");
	sim_buf_add(b, d->ev->body, d->ev->body_len);
}

static void
conn_closed(uv_handle_t *h)
{
	struct wh_conn *k = h->data;

	if (--k->closes == 0) {
		sim_buf_free(&k->req);
		free(k);
	}
}

static uint64_t
backoff_ms(const struct sim_webhook_config *cfg, unsigned done)
{
	uint64_t ms = cfg->retry_ms;
	unsigned i;

	for (i = 1; i < done && ms < cfg->retry_max_ms; i++)
		ms *= 2;
	return ms < cfg->retry_max_ms ? ms : cfg->retry_max_ms;
}

/*
 * The attempt is over: status (0 without an answer) and err are recorded,
 * the delivery is delivered, failed or queued again, the handles close.
 */
static void
attempt_done(struct wh_conn *k, int status, const char *err)
{
	struct sim_webhooks *w = k->w;
	struct wh_delivery *d = k->d;
	struct wh_attempt *a;

	if (d == NULL)
		return;
	k->d = NULL;
	d->conn = NULL;
	w->in_flight--;
	a = &d->attempts[d->n_attempts - 1];
	a->status = status;
	a->ms = (unsigned)(uv_now(w->loop) - k->started);
	snprintf(a->error, sizeof(a->error), "%s", err ? err : "");
	uv_close(&k->h.handle, conn_closed);
	uv_close((uv_handle_t *)&k->timer, conn_closed);
	if (status >= 200 && status <= 299) {
		d->state = WH_DELIVERED;
		w->n_delivered++;
	} else if (d->n_attempts >= w->cfg->attempts) {
		d->state = WH_FAILED;
		w->n_failed++;
	} else if (w->stopping) {
		d->state = WH_ABANDONED;
		w->n_abandoned++;
	} else {
		d->state = WH_PENDING;
		d->due = uv_now(w->loop) + backoff_ms(w->cfg, d->n_attempts);
		heap_push(w, d);
	}
	if (!w->stopping)
		pump(w);
}

static void
attempt_failed(struct wh_conn *k, const char *what, int uverr)
{
	char msg[WH_ERROR_LEN];

	snprintf(msg, sizeof(msg), "%s: %s", what, uv_err_name(uverr));
	attempt_done(k, 0, msg);
}

static int
on_resp_complete(llhttp_t *p)
{
	struct wh_conn *k = p->data;

	k->complete = true;
	return HPE_PAUSED;
}

static void
on_timeout(uv_timer_t *t)
{
	struct wh_conn *k = t->data;
	char msg[WH_ERROR_LEN];

	snprintf(msg, sizeof(msg), "timeout after %u ms",
	    k->w->cfg->timeout_ms);
	attempt_done(k, 0, msg);
}

static void
on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	static char rbuf[4096]; /* the answer is parsed, never kept */

	(void)h;
	(void)suggested;
	buf->base = rbuf;
	buf->len = sizeof(rbuf);
}

static void
on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct wh_conn *k = s->data;
	llhttp_errno_t e;

	if (k->d == NULL)
		return;
	if (n == UV_EOF) {
		/* an answer without a length ends with the connection */
		(void)llhttp_finish(&k->parser);
		if (k->complete)
			attempt_done(k, k->parser.status_code, NULL);
		else
			attempt_done(k, 0, "closed before a whole answer");
		return;
	}
	if (n < 0) {
		attempt_failed(k, "read", (int)n);
		return;
	}
	if (n == 0)
		return;
	e = llhttp_execute(&k->parser, buf->base, (size_t)n);
	if (k->complete)
		attempt_done(k, k->parser.status_code, NULL);
	else if (e != HPE_OK)
		attempt_done(k, 0, "a malformed HTTP answer");
}

static void
on_written(uv_write_t *req, int status)
{
	struct wh_conn *k = req->data;

	if (status < 0 && k->d != NULL)
		attempt_failed(k, "write", status);
}

static void
on_connect(uv_connect_t *req, int status)
{
	struct wh_conn *k = req->data;
	uv_buf_t b;
	int r;

	if (k->d == NULL)
		return; /* timed out or stopped meanwhile */
	if (status < 0) {
		attempt_failed(k, "connect", status);
		return;
	}
	b = uv_buf_init(k->req.p, (unsigned)k->req.len);
	k->wreq.data = k;
	r = uv_write(&k->wreq, &k->h.stream, &b, 1, on_written);
	if (r == 0)
		r = uv_read_start(&k->h.stream, on_alloc, on_read);
	if (r != 0)
		attempt_failed(k, "write", r);
}

static void
attempt_start(struct sim_webhooks *w, struct wh_delivery *d)
{
	const struct wh_endpoint *ep = &w->ep[d->endpoint];
	struct wh_conn *k = sim_xmalloc(sizeof(*k));
	struct wh_attempt *a;
	int r;

	memset(k, 0, sizeof(*k));
	k->w = w;
	k->d = d;
	k->started = uv_now(w->loop);
	d->conn = k;
	d->state = WH_IN_FLIGHT;
	a = &d->attempts[d->n_attempts++];
	memset(a, 0, sizeof(*a));
	a->at_ms = unix_ms();
	w->in_flight++;
	w->n_attempts++;
	build_request(w, k);
	llhttp_init(&k->parser, HTTP_RESPONSE, &w->settings);
	k->parser.data = k;
	r = ep->is_unix ? uv_pipe_init(w->loop, &k->h.pipe, 0)
	                : uv_tcp_init(w->loop, &k->h.tcp);
	if (r != 0 || uv_timer_init(w->loop, &k->timer) != 0)
		sim_fatal("libuv handle initialisation failed");
	k->h.handle.data = k;
	k->timer.data = k;
	k->closes = 2;
	if (uv_timer_start(&k->timer, on_timeout, w->cfg->timeout_ms, 0) != 0)
		sim_fatal("uv_timer_start failed");
	k->creq.data = k;
	if (ep->is_unix) {
		uv_pipe_connect(&k->creq, &k->h.pipe, ep->sock, on_connect);
		return;
	}
	r = uv_tcp_connect(&k->creq, &k->h.tcp,
	    (const struct sockaddr *)&ep->addr, on_connect);
	if (r != 0)
		attempt_failed(k, "connect", r);
}

static void
on_tick(uv_timer_t *t)
{
	pump(t->data);
}

/* Starts the attempts that are due (within the concurrency bound) and arms
 * the timer for the next one. */
static void
pump(struct sim_webhooks *w)
{
	uint64_t now = uv_now(w->loop);
	struct wh_delivery *d;

	while (!w->stopping && w->heap_n > 0 && w->heap[0]->due <= now &&
	    w->in_flight < w->cfg->concurrency) {
		d = w->heap[0];
		heap_remove(w, d);
		attempt_start(w, d);
	}
	uv_timer_stop(&w->tick);
	if (!w->stopping && w->heap_n > 0 && w->in_flight < w->cfg->concurrency)
		uv_timer_start(&w->tick, on_tick,
		    w->heap[0]->due > now ? w->heap[0]->due - now : 0, 0);
}

/* --- events --------------------------------------------------------------- */

struct sim_webhooks *
sim_webhooks_new(uv_loop_t *loop, const struct sim_webhook_config *cfg)
{
	struct sim_webhooks *w = sim_xmalloc(sizeof(*w));
	char err[256];
	uint64_t seed = 0;
	size_t i;

	memset(w, 0, sizeof(*w));
	w->cfg = cfg;
	w->loop = loop;
	TAILQ_INIT(&w->events);
	for (i = 0; i < cfg->n_urls; i++) {
		w->ep[i].url = cfg->urls[i];
		if (!endpoint_parse(cfg->urls[i], &w->ep[i], err, sizeof(err)))
			sim_fatal("--webhook-url %s", err); /* checked before */
	}
	w->n_ep = cfg->n_urls;
	llhttp_settings_init(&w->settings);
	w->settings.on_message_complete = on_resp_complete;
	/* the fault draws of the webhooks have a stream of their own */
	w->fault_rng.s = cfg->seed ^ 0x776562686f6f6b73ULL;
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)w;
	w->id_rng.s = seed;
	if (uv_timer_init(loop, &w->tick) != 0)
		sim_fatal("uv_timer_init failed");
	w->tick.data = w;
	return w;
}

static bool
draw(struct sim_webhooks *w, double p)
{
	return p > 0 && sim_rng_unit(&w->fault_rng) < p;
}

static void
add_delivery(struct sim_webhooks *w, struct wh_event *ev, size_t endpoint,
    bool duplicate, bool dropped)
{
	struct wh_delivery *d = sim_xmalloc(sizeof(*d));

	memset(d, 0, sizeof(*d));
	d->ev = ev;
	d->endpoint = endpoint;
	d->duplicate = duplicate;
	d->heap_ix = SIZE_MAX;
	d->attempts = sim_xmalloc(w->cfg->attempts * sizeof(d->attempts[0]));
	ev->d = sim_xrealloc(ev->d, (ev->n_d + 1) * sizeof(ev->d[0]));
	ev->d[ev->n_d++] = d;
	w->n_deliveries++;
	if (dropped) {
		d->state = WH_DROPPED;
		w->n_dropped++;
		return;
	}
	if (draw(w, w->cfg->shuffle_rate)) {
		d->delay_ms = 1 +
		    (unsigned)(sim_rng_unit(&w->fault_rng) *
		        w->cfg->shuffle_ms);
		w->n_shuffled++;
	}
	d->state = WH_PENDING;
	/* the first attempt starts after the group commit of the charge's
	 * record (sim_webhooks_committed) */
	d->due = uv_now(w->loop) + d->delay_ms;
	heap_push(w, d);
}

static void
event_free(struct sim_webhooks *w, struct wh_event *ev)
{
	size_t i;

	for (i = 0; i < ev->n_d; i++) {
		if (ev->d[i]->heap_ix != SIZE_MAX) {
			heap_remove(w, ev->d[i]);
			w->n_abandoned++;
		}
		free(ev->d[i]->attempts);
		free(ev->d[i]);
	}
	free(ev->d);
	free(ev->body);
	free(ev);
}

/* Forgets the oldest event with no attempt in flight (max_events). */
static void
evict(struct sim_webhooks *w)
{
	struct wh_event *ev;
	size_t i;

	TAILQ_FOREACH(ev, &w->events, entry)
	{
		for (i = 0; i < ev->n_d; i++)
			if (ev->d[i]->state == WH_IN_FLIGHT)
				break;
		if (i == ev->n_d)
			break;
	}
	if (ev == NULL)
		return;
	TAILQ_REMOVE(&w->events, ev, entry);
	w->n_events--;
	w->n_evicted++;
	event_free(w, ev);
}

void
sim_webhooks_charge(struct sim_webhooks *w, const struct sim_charge *c,
    const char *idem, size_t idem_len)
{
	struct wh_event *ev;
	struct sim_buf b = { 0 };
	size_t i;
	bool drop, dup;

	if (w == NULL || w->stopping)
		return;
	if (w->n_events >= w->cfg->max_events)
		evict(w);
	ev = sim_xmalloc(sizeof(*ev));
	memset(ev, 0, sizeof(*ev));
	memcpy(ev->id, "evt_", 4);
	sim_rng_hex(&w->id_rng, ev->id + 4, SIM_ID_HEX);
	memcpy(ev->charge, c->id, sizeof(ev->charge));
	ev->type = c->status == 200 ? "charge.succeeded" : "charge.failed";
	ev->created = (int64_t)time(NULL);
	sim_buf_adds(&b, "{\"id\":\"");
	sim_buf_add(&b, ev->id, WH_EVENT_ID_LEN);
	sim_buf_adds(&b, "\",\"object\":\"event\",\"created\":");
	sim_buf_addi(&b, ev->created);
	sim_buf_adds(&b, ",\"data\":{\"object\":");
	sim_buf_add(&b, c->json, c->json_len);
	sim_buf_adds(&b, "},\"livemode\":false,\"pending_webhooks\":");
	sim_buf_addi(&b, (int64_t)w->n_ep);
	sim_buf_adds(&b, ",\"request\":{\"id\":null,\"idempotency_key\":");
	if (idem != NULL)
		sim_json_str(&b, idem, idem_len);
	else
		sim_buf_adds(&b, "null");
	sim_buf_adds(&b, "},\"type\":\"");
	sim_buf_adds(&b, ev->type);
	sim_buf_adds(&b, "\"}");
	ev->body = b.p;
	ev->body_len = b.len;
	TAILQ_INSERT_TAIL(&w->events, ev, entry);
	w->n_events++;
	w->n_created++;
	for (i = 0; i < w->n_ep; i++) {
		/* the same number of draws per event whatever they give */
		drop = draw(w, w->cfg->drop_rate);
		dup = draw(w, w->cfg->dup_rate);
		add_delivery(w, ev, i, false, drop);
		if (dup && !drop) {
			add_delivery(w, ev, i, true, false);
			w->n_duplicated++;
		}
	}
	w->fresh = true; /* started by sim_webhooks_committed */
}

void
sim_webhooks_committed(struct sim_webhooks *w)
{
	if (w == NULL || !w->fresh || w->stopping)
		return;
	w->fresh = false;
	pump(w);
}

/* --- introspection -------------------------------------------------------- */

static void
render_event(const struct sim_webhooks *w, struct sim_buf *b,
    const struct wh_event *ev)
{
	const struct wh_delivery *d;
	const struct wh_attempt *a;
	uint64_t now = uv_now(w->loop);
	size_t i;
	unsigned j;

	sim_buf_adds(b, "{\"id\":\"");
	sim_buf_add(b, ev->id, WH_EVENT_ID_LEN);
	sim_buf_adds(b, "\",\"type\":\"");
	sim_buf_adds(b, ev->type);
	sim_buf_adds(b, "\",\"created\":");
	sim_buf_addi(b, ev->created);
	sim_buf_adds(b, ",\"charge\":\"");
	sim_buf_adds(b, ev->charge);
	sim_buf_adds(b, "\",\"deliveries\":[");
	for (i = 0; i < ev->n_d; i++) {
		d = ev->d[i];
		if (i > 0)
			sim_buf_add(b, ",", 1);
		sim_buf_adds(b, "{\"url\":");
		sim_json_str(b, w->ep[d->endpoint].url,
		    strlen(w->ep[d->endpoint].url));
		sim_buf_adds(b,
		    d->duplicate ? ",\"duplicate\":true"
		                 : ",\"duplicate\":false");
		sim_buf_adds(b, ",\"delay_ms\":");
		sim_buf_addi(b, d->delay_ms);
		sim_buf_adds(b, ",\"state\":\"");
		sim_buf_adds(b, state_names[d->state]);
		sim_buf_adds(b, "\",\"next_attempt_in_ms\":");
		if (d->state == WH_PENDING)
			sim_buf_addi(b,
			    (int64_t)(d->due > now ? d->due - now : 0));
		else
			sim_buf_adds(b, "null");
		sim_buf_adds(b, ",\"attempts\":[");
		for (j = 0; j < d->n_attempts; j++) {
			a = &d->attempts[j];
			if (j > 0)
				sim_buf_add(b, ",", 1);
			sim_buf_adds(b, "{\"at_ms\":");
			sim_buf_addi(b, a->at_ms);
			sim_buf_adds(b, ",\"status\":");
			if (a->status != 0)
				sim_buf_addi(b, a->status);
			else
				sim_buf_adds(b, "null");
			sim_buf_adds(b, ",\"error\":");
			if (a->error[0] != '\0')
				sim_json_str(b, a->error, strlen(a->error));
			else
				sim_buf_adds(b, "null");
			sim_buf_adds(b, ",\"ms\":");
			sim_buf_addi(b, a->ms);
			sim_buf_adds(b, "}");
		}
		sim_buf_adds(b, "]}");
	}
	sim_buf_adds(b, "],\"event\":");
	sim_buf_add(b, ev->body, ev->body_len);
	sim_buf_adds(b, "}");
}

bool
sim_webhooks_render(struct sim_webhooks *w, struct sim_buf *b, const char *id,
    size_t id_len, const char *charge, size_t charge_len)
{
	const struct wh_event *ev;
	bool first = true;

	if (id_len > 0) {
		if (w == NULL || id_len != WH_EVENT_ID_LEN)
			return false;
		TAILQ_FOREACH(ev, &w->events, entry)
		{
			if (memcmp(ev->id, id, id_len) == 0) {
				render_event(w, b, ev);
				return true;
			}
		}
		return false;
	}
	sim_buf_adds(b, "{\"events\":[");
	if (w != NULL) {
		TAILQ_FOREACH(ev, &w->events, entry)
		{
			if (charge_len > 0 &&
			    (charge_len != SIM_CHARGE_ID_LEN ||
			        memcmp(ev->charge, charge, charge_len) != 0))
				continue;
			if (!first)
				sim_buf_add(b, ",", 1);
			first = false;
			render_event(w, b, ev);
		}
	}
	sim_buf_adds(b, "]}");
	return true;
}

void
sim_webhooks_stats(const struct sim_webhooks *w, struct sim_buf *b)
{
	if (w == NULL) {
		sim_buf_adds(b, ",\"webhooks\":null");
		return;
	}
	sim_buf_addf(b,
	    ",\"webhooks\":{\"events\":%lu,\"deliveries\":%lu,\"attempts\":%lu,\"delivered\":%lu,\"failed\":%lu,\"dropped\":%lu,\"duplicated\":%lu,\"shuffled\":%lu,\"pending\":%zu,\"in_flight\":%zu,\"evicted\":%lu,\"abandoned\":%lu}",
	    w->n_created, w->n_deliveries, w->n_attempts, w->n_delivered,
	    w->n_failed, w->n_dropped, w->n_duplicated, w->n_shuffled,
	    w->heap_n, w->in_flight, w->n_evicted, w->n_abandoned);
}

void
sim_webhooks_stop(struct sim_webhooks *w)
{
	struct wh_event *ev;
	size_t i;

	if (w == NULL || w->stopping)
		return;
	w->stopping = true;
	uv_timer_stop(&w->tick);
	uv_close((uv_handle_t *)&w->tick, NULL);
	TAILQ_FOREACH(ev, &w->events, entry)
	{
		for (i = 0; i < ev->n_d; i++)
			if (ev->d[i]->conn != NULL)
				attempt_done(ev->d[i]->conn, 0, "stopped");
	}
}

void
sim_webhooks_free(struct sim_webhooks *w)
{
	struct wh_event *ev;
	size_t i;

	if (w == NULL)
		return;
	while ((ev = TAILQ_FIRST(&w->events)) != NULL) {
		TAILQ_REMOVE(&w->events, ev, entry);
		event_free(w, ev);
	}
	for (i = 0; i < w->n_ep; i++) {
		free(w->ep[i].sock);
		free(w->ep[i].path);
	}
	free(w->heap);
	free(w);
}
