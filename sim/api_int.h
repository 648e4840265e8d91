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
