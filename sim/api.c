/*
 * api.c - the Stripe v1 subset the simulator answers: the dispatch of a
 * request to its route, the answers and the authentication the routes
 * share, the rate faults' names. The routes: POST /v1/charges and GET
 * /v1/charges/<id> in api_charge.c, GET /v1/charges (the list) and
 * /v1/charges/search in api_list.c, the /_sim/ pages in api_sim.c.
 */
#include "api.h"

#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "api_int.h"

static const char *const fault_names[SIM_FAULT_COUNT] = {
	[SIM_FAULT_ERROR] = "error",
	[SIM_FAULT_CHARGED_500] = "charged_then_500",
	[SIM_FAULT_CHARGED_CLOSE] = "charged_then_close",
	[SIM_FAULT_CHARGED_RESET] = "charged_then_reset",
	[SIM_FAULT_CHARGED_LATE] = "charged_then_late",
	[SIM_FAULT_RESET] = "reset",
	[SIM_FAULT_REFUSE] = "refuse",
	[SIM_FAULT_TRICKLE] = "trickle",
	[SIM_FAULT_RATE_LIMITED] = "rate_limited",
};

const char *
sim_fault_name(enum sim_fault f)
{
	return f < SIM_FAULT_COUNT ? fault_names[f] : "?";
}

enum sim_fault
sim_fault_find(const char *name, size_t n)
{
	int f;

	for (f = 0; f < SIM_FAULT_COUNT; f++)
		if (strlen(fault_names[f]) == n &&
		    memcmp(fault_names[f], name, n) == 0)
			return (enum sim_fault)f;
	return SIM_FAULT_COUNT;
}

void
sim_api_init(struct sim_api *api, struct sim_store *store,
    const struct sim_api_config *cfg)
{
	uint64_t seed = 0;

	memset(api, 0, sizeof(*api));
	api->store = store;
	api->cfg = cfg;
	api->fault_rng.s = cfg->seed;
	/* ids must differ across restarts, whatever --seed says */
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)api;
	api->id_rng.s = seed;
	world_init(api);
}

void
sim_api_request_id(struct sim_api *api, char *out)
{
	memcpy(out, "req_", 4);
	sim_rng_hex(&api->id_rng, out + 4, SIM_ID_HEX);
	out[4 + SIM_ID_HEX] = '\0';
}

bool
sim_api_refuse(struct sim_api *api)
{
	double p = api->cfg->rates[SIM_FAULT_REFUSE];

	if (p <= 0 || sim_rng_unit(&api->fault_rng) >= p)
		return false;
	api->faults[SIM_FAULT_REFUSE]++;
	return true;
}

void
sim_exchange_data_free(struct sim_exchange_data *x)
{
	sim_buf_free(&x->scratch);
	sim_buf_free(&x->meta);
	sim_buf_free(&x->meta_json);
	sim_buf_free(&x->canon);
	sim_buf_free(&x->body_out);
	sim_buf_free(&x->charge_json);
}

const char *
sim_api_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 402: return "Payment Required";
	case 404: return "Not Found";
	case 409: return "Conflict";
	case 413: return "Payload Too Large";
	case 414: return "URI Too Long";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "Unknown";
	}
}

/* --- answers ------------------------------------------------------------ */

void
api_answer(struct sim_exchange_data *x, int status)
{
	x->status = status;
	x->action = SIM_ACT_ANSWER;
}

void
api_answer_error(struct sim_exchange_data *x, int status, const char *type,
    const char *code, const char *param, size_t param_len, const char *msg)
{
	struct sim_buf *b = &x->body_out;

	b->len = 0;
	sim_buf_addf(b, "{\"error\":{\"type\":\"%s\"", type);
	if (code != NULL)
		sim_buf_addf(b, ",\"code\":\"%s\"", code);
	if (param != NULL) {
		sim_buf_adds(b, ",\"param\":");
		sim_json_str(b, param, param_len);
	}
	sim_buf_adds(b, ",\"message\":");
	sim_json_str(b, msg, strlen(msg));
	sim_buf_adds(b, "}}");
	api_answer(x, status);
}

void
api_answer_invalid(struct sim_exchange_data *x, const char *code,
    const char *param, size_t param_len, const char *msg)
{
	api_answer_error(x, 400, "invalid_request_error", code, param,
	    param_len, msg);
}

void
api_answer_500(struct sim_exchange_data *x)
{
	api_answer_error(x, 500, "api_error", NULL, NULL, 0,
	    "An unknown error occurred");
}

static void
answer_not_found(struct sim_exchange_data *x)
{
	api_answer_error(x, 404, "invalid_request_error", NULL, NULL, 0,
	    "Unrecognized request URL. Please see https://stripe.com/docs or we can help at https://support.stripe.com/.");
}

/* --- auth ----------------------------------------------------------------- */

bool
api_authenticate(struct sim_api *api, struct sim_exchange_data *x)
{
	const struct sim_api_config *cfg = api->cfg;
	const char *k;
	size_t n, i;
	char msg[128];

	if (!x->has_auth || x->auth_len < 7 ||
	    strncasecmp(x->auth, "Bearer ", 7) != 0) {
		api_answer_error(x, 401, "invalid_request_error", NULL, NULL, 0,
		    "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').");
		return false;
	}
	k = x->auth + 7;
	n = x->auth_len - 7;
	for (i = 0; i < cfg->n_secrets; i++) {
		if (strlen(cfg->secrets[i]) == n &&
		    memcmp(cfg->secrets[i], k, n) == 0) {
			x->scope = cfg->scopes[i];
			return true;
		}
	}
	snprintf(msg, sizeof(msg), "Invalid API Key provided: sk_****%.*s",
	    (int)(n < 4 ? n : 4), k + (n < 4 ? 0 : n - 4));
	for (i = 0; msg[i]; i++)
		if ((unsigned char)msg[i] < 0x20)
			msg[i] = '?';
	api_answer_error(x, 401, "invalid_request_error", NULL, NULL, 0, msg);
	return false;
}

void
api_answer_unknown(struct sim_exchange_data *x, const struct sim_pair *p)
{
	char msg[160];

	snprintf(msg, sizeof(msg), "Received unknown parameter: %.*s",
	    (int)(p->name_len > 64 ? 64 : p->name_len), p->name);
	api_answer_invalid(x, "parameter_unknown", p->name, p->name_len, msg);
}

/* --- forms ---------------------------------------------------------------- */

bool
api_name_is(const struct sim_pair *p, const char *name)
{
	return p->name_len == strlen(name) &&
	    memcmp(p->name, name, p->name_len) == 0;
}

bool
api_form_walk(struct sim_exchange_data *x, const char *s, size_t n,
    const char *bad, api_pair_fn *each, void *arg)
{
	struct sim_form *f = &x->form;
	const struct sim_pair *p;
	enum sim_form_status fs;
	size_t i;
	char msg[160];

	x->scratch.len = 0;
	sim_buf_reserve(&x->scratch, n);
	fs = sim_form_decode(s, n, x->scratch.p, f);
	if (fs != SIM_FORM_OK) {
		api_answer_invalid(x, "parameter_invalid", NULL, 0,
		    fs == SIM_FORM_TOO_MANY ? "Too many parameters." : bad);
		return false;
	}
	sim_form_sort(f);
	for (i = 0; i < f->n; i++) {
		p = &f->pairs[i];
		if (i > 0 && p->name_len == f->pairs[i - 1].name_len &&
		    memcmp(p->name, f->pairs[i - 1].name, p->name_len) == 0) {
			snprintf(msg, sizeof(msg),
			    "Received the parameter %.*s more than once.",
			    (int)(p->name_len > 64 ? 64 : p->name_len),
			    p->name);
			api_answer_invalid(x, "parameter_invalid", p->name,
			    p->name_len, msg);
			return false;
		}
		if (!sim_utf8_valid(p->name, p->name_len) ||
		    !sim_utf8_valid(p->value, p->value_len)) {
			api_answer_invalid(x, "parameter_invalid_string",
			    p->name, p->name_len,
			    "Parameters must be UTF-8 text without NUL.");
			return false;
		}
		if (!each(x, p, arg))
			return false;
	}
	return true;
}

/* --- the dispatch --------------------------------------------------------- */

void
sim_api_release(struct sim_api *api, struct sim_exchange_data *x)
{
	(void)api;
	if (x->key != NULL) {
		x->key->in_flight = false;
		x->key = NULL;
	}
}

static bool
path_is(const char *p, size_t n, const char *want)
{
	return n == strlen(want) && memcmp(p, want, n) == 0;
}

static bool
path_under(const char *p, size_t n, const char *prefix)
{
	size_t l = strlen(prefix);

	return n > l && memcmp(p, prefix, l) == 0;
}

void
sim_api_handle(struct sim_api *api, struct sim_exchange_data *x)
{
	const char *path = x->url, *q;
	size_t plen, qlen = 0;

	x->status = 0;
	x->echo_idem = false;
	x->replayed = false;
	x->action = SIM_ACT_ANSWER;
	x->wait_ms = 0;
	x->key = NULL;
	x->token = SIM_TOK_NONE;
	x->meta.len = 0;
	q = memchr(x->url, '?', x->url_len);
	plen = q ? (size_t)(q - x->url) : x->url_len;
	if (q != NULL) {
		q++;
		qlen = x->url_len - plen - 1;
	}
	if (x->method == HTTP_POST && path_is(path, plen, "/v1/charges")) {
		api_post_charge(api, x);
	} else if (x->method != HTTP_GET) {
		answer_not_found(x);
	} else if (path_is(path, plen, "/v1/charges")) {
		api_list_charges(api, x, q ? q : "", qlen);
	} else if (path_is(path, plen, "/v1/charges/search")) {
		api_search_charges(api, x, q ? q : "", qlen);
	} else if (path_under(path, plen, "/v1/charges/")) {
		api_get_charge(api, x, path + 12, plen - 12);
	} else if (path_is(path, plen, "/_sim/keys")) {
		api_sim_keys(api, x, NULL, 0, false);
	} else if (path_under(path, plen, "/_sim/keys/")) {
		api_sim_keys(api, x, path + 11, plen - 11, true);
	} else if (path_is(path, plen, "/_sim/events")) {
		api_sim_events(api, x, NULL, 0, q ? q : "", qlen);
	} else if (path_under(path, plen, "/_sim/events/")) {
		api_sim_events(api, x, path + 13, plen - 13, "", 0);
	} else if (path_is(path, plen, "/_sim/stats")) {
		api_sim_stats(api, x);
	} else {
		answer_not_found(x);
	}
}

void
sim_api_malformed(struct sim_exchange_data *d, int status)
{
	const char *msg;

	d->status = status;
	switch (d->status) {
	case 413: msg = "The request body is larger than 65536 bytes."; break;
	case 414: msg = "The request target is longer than 8192 bytes."; break;
	case 431:
		msg =
		    "The request's header fields are larger than 16384 bytes.";
		break;
	default: msg = "Malformed HTTP request."; break;
	}
	d->body_out.len = 0;
	sim_buf_addf(&d->body_out,
	    "{\"error\":{\"type\":\"invalid_request_error\",\"message\":\"%s\"}}",
	    msg);
	d->echo_idem = false;
	d->replayed = false;
	d->key = NULL;
	d->action = SIM_ACT_ANSWER;
}
