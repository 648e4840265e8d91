/*
 * provider_inproc.c - the simulated payment provider inside the process
 * (provider_url empty). Like a real one it is
 * idempotent on (principal, key): the charge id is HMAC(secret, principal
 * NUL key), so a second call for the same key names the same charge without
 * any shared state or Redis round trip. Each call appends one line to the
 * ledger with a single O_APPEND write, so tests can count calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "digest.h"
#include "log.h"
#include "provider.h"
#include "util.h"

#define LEDGER_LINE_MAX 512 /* bytes; key <= 255, principal <= 64 */
#define LEDGER_MODE 0644

/* 1 when source, or its first element (a chain "a|b"), is tok. */
static int
token_is(const char *source, const char *tok)
{
	size_t n = strlen(tok);

	return strncmp(source, tok, n) == 0 &&
	    (source[n] == '\0' || source[n] == '|');
}

enum provider_outcome
provider_outcome_for(const char *source, const char **decline_code)
{
	*decline_code = NULL;
	if (token_is(source, "tok_chargeDeclined")) {
		*decline_code = "card_declined";
		return PROV_DECLINED;
	}
	if (token_is(source, "tok_insufficientFunds")) {
		*decline_code = "insufficient_funds";
		return PROV_DECLINED;
	}
	if (token_is(source, "tok_providerError"))
		return PROV_ERROR;
	if (token_is(source, "tok_providerTimeout"))
		return PROV_TIMEOUT;
	return PROV_SUCCEEDED;
}

static const char *
outcome_name(enum provider_outcome o)
{
	switch (o) {
	case PROV_SUCCEEDED: return "succeeded";
	case PROV_DECLINED: return "declined";
	case PROV_ERROR: return "error";
	case PROV_TIMEOUT: return "timeout";
	case PROV_LAPSED: return "lapsed";
	case PROV_UNKNOWN: return "unknown";
	case PROV_ABSENT: return "absent";
	}
	return "error";
}

/*
 * Appends one line with a single write(2) on an O_APPEND descriptor, so
 * lines from concurrent processes never interleave. The descriptor stays
 * open in *fd for the next call; after an error it is closed and reopened.
 */
static int
ledger_append(const char *path, int *fd, const char *principal, const char *key,
    size_t keylen, const struct provider_result *res, long long amount,
    const char *currency)
{
	char line[LEDGER_LINE_MAX];
	struct util_buf b;
	ssize_t w;
	long n;

	/* ms \t principal \t key \t charge id \t outcome \t amount \t currency */
	util_buf_init(&b, line, sizeof(line));
	util_buf_ll(&b, now_wall_ms());
	util_buf_put(&b, "\t", 1);
	util_buf_str(&b, principal);
	util_buf_put(&b, "\t", 1);
	util_buf_put(&b, key, keylen);
	util_buf_put(&b, "\t", 1);
	util_buf_str(&b, res->charge_id);
	util_buf_put(&b, "\t", 1);
	util_buf_str(&b, outcome_name(res->outcome));
	util_buf_put(&b, "\t", 1);
	util_buf_ll(&b, amount);
	util_buf_put(&b, "\t", 1);
	util_buf_str(&b, currency);
	util_buf_put(&b, "\n", 1);
	if ((n = util_buf_len(&b)) < 0)
		return -1;
	if (provider_open(path, fd) != 0)
		return -1;
	do
		w = write(*fd, line, (size_t)n);
	while (w < 0 && errno == EINTR);
	if (w == n)
		return 0;
	provider_close(fd);
	return -1;
}

int
provider_open(const char *path, int *ledger_fd)
{
	if (*ledger_fd < 0 &&
	    (*ledger_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
	         LEDGER_MODE)) < 0)
		return -1;
	return 0;
}

void
provider_close(int *ledger_fd)
{
	if (*ledger_fd >= 0)
		(void)close(*ledger_fd);
	*ledger_fd = -1;
}

int
provider_prepare(const struct config *cfg, const char *principal,
    const char *key, size_t keylen, const char *fingerprint, const char *source,
    struct provider_result *out, int *delay_ms)
{
	memset(out, 0, sizeof(*out));
	out->outcome = provider_outcome_for(source, &out->decline_code);
	*delay_ms = out->outcome == PROV_TIMEOUT ? cfg->provider_timeout_ms
	                                         : cfg->provider_latency_ms;
	return provider_charge_id(cfg->provider_secret, principal, key, keylen,
	    fingerprint, out->charge_id);
}

int
provider_complete(const struct config *cfg, int *ledger_fd,
    const char *principal, const char *key, size_t keylen, long long amount,
    const char *currency, long long deadline_us, struct provider_result *out)
{
	/* a request held up for longer than its claim lives charges nothing */
	if (deadline_us != 0 && now_mono_us() >= deadline_us) {
		out->outcome = PROV_LAPSED;
		out->decline_code = NULL;
		return 0;
	}
	out->created = now_wall_ms() / 1000;
	return ledger_append(cfg->provider_ledger, ledger_fd, principal, key,
	    keylen, out, amount, currency);
}

int
provider_charge(const struct config *cfg, int *ledger_fd, const char *principal,
    const char *key, size_t keylen, const char *fingerprint, long long amount,
    const char *currency, const char *source, long long deadline_us,
    struct provider_result *out)
{
	int delay_ms;

	if (provider_prepare(cfg, principal, key, keylen, fingerprint, source,
	        out, &delay_ms) != 0)
		return -1;
	sleep_ms(delay_ms);
	return provider_complete(cfg, ledger_fd, principal, key, keylen, amount,
	    currency, deadline_us, out);
}

/* --- the simulation on a loop ------------------------------------------- */

struct sim_call;

struct sim {
	uv_loop_t *loop;
	const struct config *cfg;
	int *ledger_fd;
	LIST_HEAD(, sim_call) calls; /* pending, for provider_free */
};

/* One call: the provider's latency is a timer of the loop. */
struct sim_call {
	struct sim *sim;
	uv_timer_t timer;
	struct provider_result res;
	char principal[PRINCIPAL_MAX + 1];
	char key[IDEM_KEY_MAX + 1];
	size_t keylen;
	long long amount;
	char currency[8];
	long long deadline_us;
	provider_cb *cb;
	void *arg;
	LIST_ENTRY(sim_call) entry;
};

static void
on_sim_call_closed(uv_handle_t *h)
{
	free(h->data);
}

/* Gives the result to the caller once and frees the call. */
static void
sim_call_done(struct sim_call *sc)
{
	LIST_REMOVE(sc, entry);
	sc->cb(&sc->res, sc->arg);
	uv_close((uv_handle_t *)&sc->timer, on_sim_call_closed);
}

static void
on_sim_latency(uv_timer_t *t)
{
	struct sim_call *sc = t->data;
	const struct config *cfg = sc->sim->cfg;

	if (sc->res.outcome == PROV_ABSENT) {
		sim_call_done(sc);
		return;
	}
	if (provider_complete(cfg, sc->sim->ledger_fd, sc->principal, sc->key,
	        sc->keylen, sc->amount, sc->currency, sc->deadline_us,
	        &sc->res) != 0) {
		log_error(NULL, "provider ledger %s: write failed",
		    cfg->provider_ledger);
		sc->res.outcome = PROV_ERROR;
	}
	/* the simulation's timeout: it gave up waiting, so nobody knows */
	if (sc->res.outcome == PROV_TIMEOUT) {
		sc->res.outcome = PROV_UNKNOWN;
		(void)snprintf(sc->res.why, sizeof(sc->res.why),
		    "no answer within provider_timeout_ms");
	}
	sim_call_done(sc);
}

static int
sim_start(void *impl, const struct provider_call *call, provider_cb *cb,
    void *arg)
{
	struct sim *sim = impl;
	struct sim_call *sc;
	int delay_ms = 0;

	if (strlen(call->principal) > PRINCIPAL_MAX ||
	    call->keylen > IDEM_KEY_MAX ||
	    strlen(call->params->currency) >= sizeof(sc->currency) ||
	    (sc = calloc(1, sizeof(*sc))) == NULL)
		return -1;
	sc->sim = sim;
	sc->cb = cb;
	sc->arg = arg;
	memcpy(sc->principal, call->principal, strlen(call->principal) + 1);
	memcpy(sc->key, call->key, call->keylen);
	sc->keylen = call->keylen;
	sc->amount = call->params->amount;
	memcpy(sc->currency, call->params->currency,
	    strlen(call->params->currency) + 1);
	sc->deadline_us = call->deadline_us;
	if (provider_prepare(sim->cfg, call->principal, call->key, call->keylen,
	        call->fingerprint, call->params->source, &sc->res,
	        &delay_ms) != 0)
		sc->res.outcome = PROV_ERROR;
	/*
	 * Asked again after an unknown outcome: the simulation knows that a
	 * timeout never charged (its ledger line says "timeout"), so it
	 * answers at once that it has no charge; any other token charges as
	 * it would have (the same charge id).
	 */
	if ((call->resume || call->probe) && sc->res.outcome == PROV_TIMEOUT) {
		sc->res.outcome = PROV_ABSENT;
		delay_ms = 0;
	}
	sc->res.attempts = 1;
	(void)uv_timer_init(sim->loop, &sc->timer);
	sc->timer.data = sc;
	LIST_INSERT_HEAD(&sim->calls, sc, entry);
	(void)uv_timer_start(&sc->timer, on_sim_latency, (uint64_t)delay_ms, 0);
	return 0;
}

static void
sim_free(void *impl)
{
	struct sim *sim = impl;
	struct sim_call *sc;

	while ((sc = LIST_FIRST(&sim->calls)) != NULL) {
		(void)uv_timer_stop(&sc->timer);
		sc->res.outcome = PROV_UNKNOWN;
		(void)snprintf(sc->res.why, sizeof(sc->res.why),
		    "shutting down");
		sim_call_done(sc);
	}
	free(sim);
}

static const struct provider_ops sim_ops = { sim_start, sim_free, NULL };

struct provider *
provider_sim_new(uv_loop_t *loop, const struct config *cfg, int *ledger_fd)
{
	struct provider *p;
	struct sim *sim;

	if ((p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	if ((sim = calloc(1, sizeof(*sim))) == NULL) {
		free(p);
		return NULL;
	}
	sim->loop = loop;
	sim->cfg = cfg;
	sim->ledger_fd = ledger_fd;
	LIST_INIT(&sim->calls);
	p->ops = &sim_ops;
	p->impl = sim;
	return p;
}
