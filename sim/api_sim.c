/*
 * api_sim.c - the simulator's own pages: GET /_sim/keys (every key, or
 * one), /_sim/stats (the counts), /_sim/events (the webhook events sent).
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "api_int.h"

/* Appends the /_sim/keys object of key. */
static void
render_key(struct sim_exchange_data *x, struct sim_buf *b,
    const struct sim_key *key)
{
	struct sim_form *f = &x->form;
	size_t i;

	sim_buf_adds(b, "{\"idempotency_key\":");
	sim_json_str(b, key->k + 8, key->klen - 8);
	sim_buf_addf(b,
	    ",\"deliveries\":%lu,\"charges\":%lu,\"charge\":", key->deliveries,
	    key->charges);
	if (key->charge != NULL)
		sim_buf_addf(b, "\"%s\"", key->charge->id);
	else
		sim_buf_adds(b, "null");
	if (key->status != 0)
		sim_buf_addf(b, ",\"status\":%d,\"metadata\":{", key->status);
	else
		sim_buf_adds(b, ",\"status\":null,\"metadata\":{");
	x->scratch.len = 0;
	sim_buf_reserve(&x->scratch, key->meta_len);
	if (key->meta != NULL &&
	    sim_form_decode(key->meta, key->meta_len, x->scratch.p, f) ==
	        SIM_FORM_OK) {
		for (i = 0; i < f->n; i++) {
			if (i > 0)
				sim_buf_add(b, ",", 1);
			sim_json_str(b, f->pairs[i].name, f->pairs[i].name_len);
			sim_buf_add(b, ":", 1);
			sim_json_str(b, f->pairs[i].value,
			    f->pairs[i].value_len);
		}
	}
	sim_buf_adds(b, "}}");
}

void
api_sim_keys(struct sim_api *api, struct sim_exchange_data *x, const char *enc,
    size_t n, bool one)
{
	struct sim_buf *b = &x->body_out;
	struct sim_buf k = { 0 };
	struct sim_key *key = NULL;
	size_t i;
	long kl;
	bool first = true;

	b->len = 0;
	if (!one) {
		sim_buf_adds(b, "{\"keys\":[");
		TAILQ_FOREACH(key, &api->store->key_list, entry)
		{
			if (!first)
				sim_buf_add(b, ",", 1);
			first = false;
			render_key(x, b, key);
		}
		sim_buf_adds(b, "]}");
		api_answer(x, 200);
		return;
	}
	/* the key is one path segment: %XX-decoded ('+' stays a plus) */
	sim_buf_reserve(&k, n);
	kl = sim_pct_decode(enc, n, k.p);
	for (i = 0; kl > 0 && i < api->cfg->n_secrets && key == NULL; i++)
		key = sim_store_key_find(api->store, api->cfg->scopes[i], k.p,
		    (size_t)kl);
	sim_buf_free(&k);
	if (key == NULL) {
		api_answer_error(x, 404, "invalid_request_error",
		    "resource_missing", NULL, 0, "No such idempotency key.");
		return;
	}
	render_key(x, b, key);
	api_answer(x, 200);
}

void
api_sim_stats(struct sim_api *api, struct sim_exchange_data *x)
{
	struct sim_buf *b = &x->body_out;
	int f;

	b->len = 0;
	sim_buf_addf(b,
	    "{\"deliveries\":%lu,\"charges\":%lu,\"keys\":%zu,\"replays\":%lu,\"in_use\":%lu,\"faults\":{",
	    api->store->deliveries, api->store->charge_count,
	    api->store->keys.n, api->replays, api->in_use);
	for (f = 0; f < SIM_FAULT_COUNT; f++)
		sim_buf_addf(b, "%s\"%s\":%lu", f ? "," : "",
		    sim_fault_name((enum sim_fault)f), api->faults[f]);
	sim_buf_adds(b, "},\"liberties\":{");
	for (f = 0; f < SIM_LIB_COUNT; f++)
		sim_buf_addf(b, "%s\"%s\":%lu", f ? "," : "",
		    sim_liberty_name((enum sim_liberty)f), api->liberties[f]);
	sim_buf_adds(b, "}");
	sim_webhooks_stats(api->webhooks, b);
	sim_buf_adds(b, "}");
	api_answer(x, 200);
}

void
api_sim_events(struct sim_api *api, struct sim_exchange_data *x, const char *id,
    size_t id_len, const char *qs, size_t qn)
{
	struct sim_buf *b = &x->body_out;
	const char *charge = NULL;
	size_t charge_len = 0, i;

	b->len = 0;
	if (id_len > 0) {
		if (!sim_webhooks_render(api->webhooks, b, id, id_len, NULL,
		        0)) {
			api_answer_error(x, 404, "invalid_request_error",
			    "resource_missing", "id", 2, "No such event.");
			return;
		}
		api_answer(x, 200);
		return;
	}
	x->scratch.len = 0;
	sim_buf_reserve(&x->scratch, qn);
	if (sim_form_decode(qs, qn, x->scratch.p, &x->form) == SIM_FORM_OK) {
		for (i = 0; i < x->form.n; i++) {
			if (api_name_is(&x->form.pairs[i], "charge")) {
				charge = x->form.pairs[i].value;
				charge_len = x->form.pairs[i].value_len;
			}
		}
	}
	if (charge != NULL && charge_len == 0) {
		api_answer_invalid(x, "parameter_invalid", "charge", 6,
		    "charge: a charge id is expected.");
		return;
	}
	(void)sim_webhooks_render(api->webhooks, b, NULL, 0, charge,
	    charge_len);
	api_answer(x, 200);
}
