/*
 * api.h - the Stripe v1 subset: one request in, one answer out (status,
 * body, the idempotency headers and what to do with the connection). Owns
 * the rules (auth, validation, idempotency, tokens, faults); never touches
 * a socket. server.c runs what it decides; a charge created is handed to
 * the webhooks (webhook.c), which send its event.
 */
#ifndef SIM_API_H
#define SIM_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "buf.h"
#include "defaults.h"
#include "form.h"
#include "store.h"
#include "webhook.h"
#include "world.h"

enum sim_fault {
	SIM_FAULT_ERROR,
	SIM_FAULT_CHARGED_500,
	SIM_FAULT_CHARGED_CLOSE,
	SIM_FAULT_CHARGED_RESET,
	SIM_FAULT_CHARGED_LATE,
	SIM_FAULT_RESET,
	SIM_FAULT_REFUSE,
	SIM_FAULT_TRICKLE,
	SIM_FAULT_RATE_LIMITED,
	SIM_FAULT_COUNT,
};

/* The --fault-rate name of f. */
const char *sim_fault_name(enum sim_fault f);
/* The fault named name[0..n), or SIM_FAULT_COUNT. */
enum sim_fault sim_fault_find(const char *name, size_t n);

struct sim_api_config {
	const char *secrets[SIM_MAX_SECRET_KEYS];
	uint64_t scopes[SIM_MAX_SECRET_KEYS];
	size_t n_secrets;
	double rates[SIM_FAULT_COUNT];
	unsigned latency_ms; /* fixed latency, when p50 is 0 */
	unsigned latency_p50_ms;
	unsigned latency_p99_ms;
	unsigned long seed;
	struct sim_world_config world; /* the provider's liberties */
};

struct sim_api {
	struct sim_store *store;
	const struct sim_api_config *cfg;
	struct sim_rng fault_rng; /* --seed: rate faults, latency draws */
	struct sim_rng id_rng;    /* random: charge and request ids */
	unsigned long replays;
	unsigned long in_use;
	unsigned long faults[SIM_FAULT_COUNT];
	struct sim_webhooks *webhooks; /* NULL without --webhook-url */
	struct sim_rng world_rng;      /* --seed, salted: the liberties */
	unsigned long liberties[SIM_LIB_COUNT];
	uv_timer_t busy; /* the busy account's background charges */
	uint64_t busy_t0_ms;
	unsigned long busy_made;
};

enum sim_action {
	SIM_ACT_ANSWER,  /* send the answer */
	SIM_ACT_WAIT,    /* latency: call sim_api_execute after wait_ms */
	SIM_ACT_CLOSE,   /* close without answering (FIN) */
	SIM_ACT_RESET,   /* close with RST (SO_LINGER 0) */
	SIM_ACT_LATE,    /* send the answer after wait_ms */
	SIM_ACT_TRICKLE, /* send the answer one byte every wait_ms */
};

/* One request: its inputs (pointing into the server's buffers), what was
 * decoded from them, and the answer. Reused from request to request. */
struct sim_exchange_data {
	/* inputs */
	int method; /* llhttp_method_t */
	const char *url;
	size_t url_len;
	const char *auth;
	size_t auth_len;
	bool has_auth;
	const char *idem;
	size_t idem_len;
	bool has_idem;
	bool idem_long; /* longer than the server kept */
	const char *body;
	size_t body_len;
	/* decoded */
	struct sim_buf scratch; /* decoded form, query, ... */
	struct sim_form form;
	struct sim_buf meta;      /* sorted metadata as a form */
	struct sim_buf meta_json; /* the same as a JSON object */
	struct sim_buf canon;     /* the pairs fingerprinted */
	uint64_t scope;
	long amount;
	char currency[4];
	const char *source;
	size_t source_len;
	const char *description;
	size_t description_len;
	unsigned char fp[SIM_FP_LEN];
	enum sim_token token;
	struct sim_key *key; /* in flight while set: sim_api_release */
	/* the answer */
	int status;
	struct sim_buf body_out;
	struct sim_buf charge_json;
	bool echo_idem;
	bool replayed;
	enum sim_action action;
	unsigned wait_ms;
};

void sim_api_init(struct sim_api *api, struct sim_store *store,
    const struct sim_api_config *cfg);

/* Decides the answer to the request in x (x->status, body_out, action). */
void sim_api_handle(struct sim_api *api, struct sim_exchange_data *x);

/* After SIM_ACT_WAIT: charges (or not) and decides the wire action. */
void sim_api_execute(struct sim_api *api, struct sim_exchange_data *x);

/* The exchange is over (answered, or its connection gone): the key is no
 * longer in flight. */
void sim_api_release(struct sim_api *api, struct sim_exchange_data *x);

/* A new connection: true when the refuse rate fault drops it. */
bool sim_api_refuse(struct sim_api *api);

/* "req_" + 24 hex into out (29 bytes with NUL). */
void sim_api_request_id(struct sim_api *api, char *out);

/* The provider's clock: Unix seconds plus --clock-offset-s. */
int64_t sim_api_now(const struct sim_api *api);

/* The provider's clock as an HTTP Date into out[0..n); its length, 0 when
 * it does not fit. */
size_t sim_api_date(const struct sim_api *api, char *out, size_t n);

/* Starts the busy account's background charges on loop (--busy-per-s; a
 * timer the loop's walk closes). */
void sim_api_busy_start(struct sim_api *api, uv_loop_t *loop);

/* Stops them (closes the timer, when it runs). */
void sim_api_busy_stop(struct sim_api *api);

/* The reason phrase of an HTTP status. */
const char *sim_api_reason(int status);

/* x answers a request the parser refused (400, 413, 414, 431) with a
 * Stripe-shaped error; nothing is executed. */
void sim_api_malformed(struct sim_exchange_data *x, int status);

/* Frees what x holds. */
void sim_exchange_data_free(struct sim_exchange_data *x);

#endif
