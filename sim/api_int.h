/*
 * api_int.h - what the files of the Stripe v1 subset share: the answers,
 * authentication, the form checks, and each file's routes. api.c owns the
 * dispatch and the answers; api_charge.c POST /v1/charges and GET
 * /v1/charges/<id>; api_list.c the list and the search; api_sim.c the
 * /_sim/ pages. Not for the rest of the simulator (api.h is).
 */
#ifndef SIM_API_INT_H
#define SIM_API_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "api.h"

/* --- answers (api.c) --- */

/* The answer is status with body_out as it is. */
void api_answer(struct sim_exchange_data *x, int status);
/* {"error":{"type":T[,"code":C][,"param":P],"message":M}} */
void api_answer_error(struct sim_exchange_data *x, int status, const char *type,
    const char *code, const char *param, size_t param_len, const char *msg);
/* A 400 invalid_request_error. */
void api_answer_invalid(struct sim_exchange_data *x, const char *code,
    const char *param, size_t param_len, const char *msg);
void api_answer_500(struct sim_exchange_data *x);
/* The 400 of a parameter no rule names. */
void api_answer_unknown(struct sim_exchange_data *x, const struct sim_pair *p);

/* The scope of the request's secret key into x->scope, or 401 (false). */
bool api_authenticate(struct sim_api *api, struct sim_exchange_data *x);

/* --- forms (api.c) --- */

bool api_name_is(const struct sim_pair *p, const char *name);
/* One pair of a form, in name order; false after answering 400. */
typedef bool api_pair_fn(struct sim_exchange_data *x, const struct sim_pair *p,
    void *arg);
/* Decodes s[0..n) into x->form (x->scratch holds it), sorted by name, and
 * hands each pair to each, in order; false after answering 400: s does not
 * decode (bad is the message), a name comes twice, a pair is not UTF-8, or
 * each refused a pair. */
bool api_form_walk(struct sim_exchange_data *x, const char *s, size_t n,
    const char *bad, api_pair_fn *each, void *arg);

/* --- charges (api_charge.c) --- */

/* Creates the charge of x (x->token: a success or a decline) in x->scope,
 * under x->key when set, renders its answer (200 or 402) into x, sends its
 * event; saved_500: the answer is a 500, saved under the key. NULL after
 * answering 503 when the store is full. */
struct sim_charge *api_charge_make(struct sim_api *api,
    struct sim_exchange_data *x, bool saved_500);

/* --- the provider's liberties (world.c) --- */

void world_init(struct sim_api *api);
/* The extra wait of an execution (0, or --slow-ms drawn at --slow-rate). */
unsigned world_slow_ms(struct sim_api *api);
/* SIM_LIB_SAVED_500, SIM_LIB_CHARGED_SAVED_500, or SIM_LIB_COUNT: none. */
enum sim_liberty world_saved_500(struct sim_api *api);
/* True when a re-send of a stored key is to be answered idempotency_error. */
bool world_params_error(struct sim_api *api);
/* True after answering x with another charge of its account (a 200; the
 * delivery is not executed), drawn at --foreign-rate. */
bool world_foreign(struct sim_api *api, struct sim_exchange_data *x);
/* True when a decline is to be answered 402 with an empty object. */
bool world_bare_402(struct sim_api *api);
/* Stamps c with the real time of its creation (the search's lag). */
void world_charge_born(struct sim_charge *c);
/* True when a search must not show c yet (--search-lag-ms). */
bool world_search_hidden(struct sim_api *api, const struct sim_charge *c);

/* --- routes --- */

/* POST /v1/charges (api_charge.c) */
void api_post_charge(struct sim_api *api, struct sim_exchange_data *x);
/* GET /v1/charges/<id> (api_charge.c) */
void api_get_charge(struct sim_api *api, struct sim_exchange_data *x,
    const char *id, size_t n);
/* GET /v1/charges (api_list.c) */
void api_list_charges(struct sim_api *api, struct sim_exchange_data *x,
    const char *qs, size_t qn);
/* GET /v1/charges/search (api_list.c) */
void api_search_charges(struct sim_api *api, struct sim_exchange_data *x,
    const char *qs, size_t qn);
/* GET /_sim/keys, or /_sim/keys/<key> when one (api_sim.c) */
void api_sim_keys(struct sim_api *api, struct sim_exchange_data *x,
    const char *enc, size_t n, bool one);
/* GET /_sim/stats (api_sim.c) */
void api_sim_stats(struct sim_api *api, struct sim_exchange_data *x);
/* GET /_sim/events[?charge=ch_...] and /_sim/events/<evt_...> (api_sim.c) */
void api_sim_events(struct sim_api *api, struct sim_exchange_data *x,
    const char *id, size_t id_len, const char *qs, size_t qn);

#endif
