/*
 * api_charge.c - POST /v1/charges (the form's rules, idempotency, tokens,
 * rate faults, the charge and its answer) and GET /v1/charges/<id>.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "api_int.h"

/* z of the 99th percentile of the standard normal distribution */
#define API_Z99 2.3263478740408408

/* the token that behaves as each rate fault (refuse has none) */
static const enum sim_token fault_tokens[SIM_FAULT_COUNT] = {
	[SIM_FAULT_ERROR] = SIM_TOK_ERROR,
	[SIM_FAULT_CHARGED_500] = SIM_TOK_CHARGED_500,
	[SIM_FAULT_CHARGED_CLOSE] = SIM_TOK_CHARGED_CLOSE,
	[SIM_FAULT_CHARGED_RESET] = SIM_TOK_CHARGED_RESET,
	[SIM_FAULT_CHARGED_LATE] = SIM_TOK_CHARGED_LATE,
	[SIM_FAULT_RESET] = SIM_TOK_RESET,
	[SIM_FAULT_REFUSE] = SIM_TOK_NONE,
	[SIM_FAULT_TRICKLE] = SIM_TOK_SLOW,
	[SIM_FAULT_RATE_LIMITED] = SIM_TOK_RATE_LIMITED,
};

static enum sim_fault
fault_of_token(enum sim_token t)
{
	int f;

	for (f = 0; f < SIM_FAULT_COUNT; f++)
		if (fault_tokens[f] == t)
			return (enum sim_fault)f;
	return SIM_FAULT_COUNT;
}

/* --- the form ------------------------------------------------------------- */

/* The parameters of POST /v1/charges besides metadata[NAME], in the order
 * their checks answer. */
enum charge_param {
	PARAM_AMOUNT,
	PARAM_CURRENCY,
	PARAM_SOURCE,
	PARAM_DESCRIPTION,
	PARAM_COUNT
};

/* Checks one parameter and keeps its value in x; p is NULL when the form
 * does not have it. False after answering 400. */
typedef bool param_check(struct sim_exchange_data *x, const struct sim_pair *p);

/* What the walk over the pairs found. */
struct charge_form {
	const struct sim_pair *slot[PARAM_COUNT];
	size_t n_meta;
};

static bool
check_amount(struct sim_exchange_data *x, const struct sim_pair *p)
{
	size_t i;

	if (p == NULL) {
		api_answer_invalid(x, "parameter_missing", "amount", 6,
		    "Missing required param: amount.");
		return false;
	}
	x->amount = 0;
	for (i = 0; i < p->value_len; i++) {
		if (!isdigit((unsigned char)p->value[i]) ||
		    x->amount > SIM_MAX_AMOUNT)
			break;
		x->amount = x->amount * 10 + (p->value[i] - '0');
	}
	if (p->value_len == 0 || i < p->value_len) {
		api_answer_invalid(x, "parameter_invalid_integer", "amount", 6,
		    "Invalid integer: amount must be a positive integer of at most 99999999.");
		return false;
	}
	if (x->amount < 1) {
		api_answer_invalid(x, "amount_too_small", "amount", 6,
		    "Amount must be at least 1.");
		return false;
	}
	if (x->amount > SIM_MAX_AMOUNT) {
		api_answer_invalid(x, "amount_too_large", "amount", 6,
		    "Amount must be no more than 99999999.");
		return false;
	}
	return true;
}

static bool
check_currency(struct sim_exchange_data *x, const struct sim_pair *p)
{
	size_t i;

	if (p == NULL) {
		api_answer_invalid(x, "parameter_missing", "currency", 8,
		    "Missing required param: currency.");
		return false;
	}
	if (p->value_len != 3 || !isalpha((unsigned char)p->value[0]) ||
	    !isalpha((unsigned char)p->value[1]) ||
	    !isalpha((unsigned char)p->value[2])) {
		api_answer_invalid(x, "parameter_invalid", "currency", 8,
		    "Invalid currency: it must be a three-letter ISO code.");
		return false;
	}
	for (i = 0; i < 3; i++)
		x->currency[i] = (char)tolower((unsigned char)p->value[i]);
	x->currency[3] = '\0';
	return true;
}

static bool
check_source(struct sim_exchange_data *x, const struct sim_pair *p)
{
	if (p == NULL || p->value_len == 0) {
		api_answer_invalid(x, "parameter_missing", "source", 6,
		    "Missing required param: source.");
		return false;
	}
	if (p->value_len > SIM_MAX_SOURCE) {
		api_answer_invalid(x, "parameter_invalid", "source", 6,
		    "Invalid source: at most 255 characters.");
		return false;
	}
	x->source = p->value;
	x->source_len = p->value_len;
	return true;
}

static bool
check_description(struct sim_exchange_data *x, const struct sim_pair *p)
{
	x->description = p ? p->value : NULL;
	x->description_len = p ? p->value_len : 0;
	if (x->description_len > SIM_MAX_DESCRIPTION) {
		api_answer_invalid(x, "parameter_invalid", "description", 11,
		    "Invalid description: at most 1000 characters.");
		return false;
	}
	return true;
}

static const struct charge_rule {
	const char *name;
	param_check *check;
} charge_rules[PARAM_COUNT] = {
	[PARAM_AMOUNT] = { "amount", check_amount },
	[PARAM_CURRENCY] = { "currency", check_currency },
	[PARAM_SOURCE] = { "source", check_source },
	[PARAM_DESCRIPTION] = { "description", check_description },
};

/* metadata[NAME]: NAME not empty, without brackets. */
static bool
is_meta_name(const struct sim_pair *p)
{
	return p->name_len > 10 && memcmp(p->name, "metadata[", 9) == 0 &&
	    p->name[p->name_len - 1] == ']' &&
	    memchr(p->name + 9, '[', p->name_len - 10) == NULL &&
	    memchr(p->name + 9, ']', p->name_len - 10) == NULL;
}

static void
add_meta_json_pair(struct sim_buf *b, const char *n, size_t nl, const char *v,
    size_t vl)
{
	if (b->len > 1)
		sim_buf_add(b, ",", 1);
	sim_json_str(b, n, nl);
	sim_buf_add(b, ":", 1);
	sim_json_str(b, v, vl);
}

/* metadata[NAME]=VALUE: checked, then kept in x->meta and x->meta_json
 * (an empty value unsets, as Stripe's does). */
static bool
meta_pair(struct sim_exchange_data *x, const struct sim_pair *p, size_t *n_meta)
{
	if (++*n_meta > SIM_MAX_META_PAIRS) {
		api_answer_invalid(x, "parameter_invalid", "metadata", 8,
		    "Metadata can have up to 50 keys.");
		return false;
	}
	if (p->name_len - 10 > SIM_MAX_META_NAME) {
		api_answer_invalid(x, "parameter_invalid", p->name, p->name_len,
		    "Metadata keys can be up to 40 characters long.");
		return false;
	}
	if (p->value_len > SIM_MAX_META_VALUE) {
		api_answer_invalid(x, "parameter_invalid", p->name, p->name_len,
		    "Metadata values can be up to 500 characters long.");
		return false;
	}
	if (p->value_len == 0)
		return true;
	if (x->meta.len > 0)
		sim_buf_add(&x->meta, "&", 1);
	sim_pct_encode(&x->meta, p->name + 9, p->name_len - 10);
	sim_buf_add(&x->meta, "=", 1);
	sim_pct_encode(&x->meta, p->value, p->value_len);
	add_meta_json_pair(&x->meta_json, p->name + 9, p->name_len - 10,
	    p->value, p->value_len);
	return true;
}

/* One pair of the form: a parameter of the table, metadata, or unknown. */
static bool
charge_pair(struct sim_exchange_data *x, const struct sim_pair *p, void *arg)
{
	struct charge_form *cf = arg;
	size_t k;

	for (k = 0; k < PARAM_COUNT; k++) {
		if (api_name_is(p, charge_rules[k].name)) {
			cf->slot[k] = p;
			return true;
		}
	}
	if (is_meta_name(p))
		return meta_pair(x, p, &cf->n_meta);
	api_answer_unknown(x, p);
	return false;
}

/* The parameters' fingerprint: every decoded pair, sorted, NUL-separated. */
static void
fingerprint(struct sim_exchange_data *x)
{
	const struct sim_form *f = &x->form;
	struct sim_buf *canon = &x->canon;
	unsigned int mdlen = 0;
	size_t i;

	canon->len = 0;
	for (i = 0; i < f->n; i++) {
		sim_buf_add(canon, f->pairs[i].name, f->pairs[i].name_len);
		sim_buf_add(canon, "", 1);
		sim_buf_add(canon, f->pairs[i].value, f->pairs[i].value_len);
		sim_buf_add(canon, "", 1);
	}
	if (EVP_Digest(canon->p ? canon->p : "", canon->len, x->fp, &mdlen,
	        EVP_sha256(), NULL) != 1 ||
	    mdlen != SIM_FP_LEN)
		sim_fatal("SHA-256 failed");
}

/*
 * Decodes and checks the form of POST /v1/charges; false after answering
 * 400. Fills amount, currency, source, description, metadata and the
 * parameters' fingerprint. The pairs are checked in name order as they
 * come (charge_pair), then the table's parameters in its order.
 */
static bool
validate_charge(struct sim_exchange_data *x)
{
	struct charge_form cf = { 0 };
	size_t k;

	x->meta.len = 0;
	x->meta_json.len = 0;
	sim_buf_add(&x->meta_json, "{", 1);
	if (!api_form_walk(x, x->body, x->body_len,
	        "The request body is not valid application/x-www-form-urlencoded.",
	        charge_pair, &cf))
		return false;
	sim_buf_add(&x->meta_json, "}", 1);
	for (k = 0; k < PARAM_COUNT; k++)
		if (!charge_rules[k].check(x, cf.slot[k]))
			return false;
	fingerprint(x);
	return true;
}

/* --- charges -------------------------------------------------------------- */

static const struct decline {
	enum sim_token token;
	const char *code;
	const char *decline_code;
	const char *message;
} declines[] = {
	{ SIM_TOK_DECLINE_GENERIC, "card_declined", "generic_decline",
	    "Your card was declined." },
	{ SIM_TOK_DECLINE_FUNDS, "card_declined", "insufficient_funds",
	    "Your card has insufficient funds." },
	{ SIM_TOK_DECLINE_EXPIRED, "expired_card", "expired_card",
	    "Your card has expired." },
	{ SIM_TOK_DECLINE_CVC, "incorrect_cvc", "incorrect_cvc",
	    "Your card's security code is incorrect." },
	{ SIM_TOK_DECLINE_FRAUD, "card_declined", "fraudulent",
	    "Your card was declined." },
};

static const struct decline *
decline_of(enum sim_token t)
{
	size_t i;

	for (i = 0; i < sizeof(declines) / sizeof(declines[0]); i++)
		if (declines[i].token == t)
			return &declines[i];
	return NULL;
}

static void
render_charge(struct sim_exchange_data *x, const char *id, int64_t created,
    const struct decline *d)
{
	struct sim_buf *b = &x->charge_json;

	b->len = 0;
	sim_buf_adds(b, "{\"id\":\"");
	sim_buf_add(b, id, SIM_CHARGE_ID_LEN);
	sim_buf_adds(b, "\",\"object\":\"charge\",\"amount\":");
	sim_buf_addi(b, x->amount);
	sim_buf_adds(b, ",\"amount_captured\":");
	sim_buf_addi(b, d ? 0 : x->amount);
	sim_buf_adds(b,
	    d ? ",\"amount_refunded\":0,\"captured\":false,\"created\":"
	      : ",\"amount_refunded\":0,\"captured\":true,\"created\":");
	sim_buf_addi(b, created);
	sim_buf_adds(b, ",\"currency\":\"");
	sim_buf_add(b, x->currency, 3);
	sim_buf_adds(b, "\",\"description\":");
	if (x->description != NULL)
		sim_json_str(b, x->description, x->description_len);
	else
		sim_buf_adds(b, "null");
	if (d != NULL) {
		sim_buf_adds(b, ",\"failure_code\":\"");
		sim_buf_adds(b, d->code);
		sim_buf_adds(b, "\",\"failure_message\":");
		sim_json_str(b, d->message, strlen(d->message));
	} else {
		sim_buf_adds(b,
		    ",\"failure_code\":null,\"failure_message\":null");
	}
	sim_buf_adds(b, ",\"livemode\":false,\"metadata\":");
	sim_buf_add(b, x->meta_json.p, x->meta_json.len);
	if (d != NULL) {
		sim_buf_adds(b,
		    ",\"outcome\":{\"network_status\":\"declined_by_network\",\"reason\":\"");
		sim_buf_adds(b, d->decline_code);
		sim_buf_adds(b,
		    "\",\"risk_level\":\"normal\",\"seller_message\":\"The bank did not return any further details with this decline.\",\"type\":\"issuer_declined\"},\"paid\":false,\"source\":");
	} else {
		sim_buf_adds(b,
		    ",\"outcome\":{\"network_status\":\"approved_by_network\",\"reason\":null,\"risk_level\":\"normal\",\"seller_message\":\"Payment complete.\",\"type\":\"authorized\"},\"paid\":true,\"source\":");
	}
	sim_json_str(b, x->source, x->source_len);
	sim_buf_adds(b,
	    d ? ",\"status\":\"failed\"}" : ",\"status\":\"succeeded\"}");
}

/* The 409 of a key whose first request is still being processed. */
static void
answer_in_use(struct sim_exchange_data *x)
{
	struct sim_buf *b = &x->body_out;

	b->len = 0;
	sim_buf_adds(b,
	    "{\"error\":{\"type\":\"invalid_request_error\",\"code\":\"idempotency_key_in_use\",\"message\":");
	x->scratch.len = 0;
	sim_buf_adds(&x->scratch,
	    "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): ");
	sim_buf_add(&x->scratch, x->idem, x->idem_len);
	sim_buf_adds(&x->scratch, ". Please try again later.");
	sim_json_str(b, x->scratch.p, x->scratch.len);
	sim_buf_adds(b, "}}");
	api_answer(x, 409);
}

static void
answer_idempotency_error(struct sim_exchange_data *x)
{
	struct sim_buf *b = &x->body_out;

	b->len = 0;
	sim_buf_adds(b,
	    "{\"error\":{\"type\":\"idempotency_error\",\"message\":");
	x->scratch.len = 0;
	sim_buf_adds(&x->scratch,
	    "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '");
	sim_buf_add(&x->scratch, x->idem, x->idem_len);
	sim_buf_adds(&x->scratch,
	    "' if you meant to execute a different request.");
	sim_json_str(b, x->scratch.p, x->scratch.len);
	sim_buf_adds(b, "}}");
	api_answer(x, 400);
}

static unsigned
draw_latency(struct sim_api *api)
{
	const struct sim_api_config *cfg = api->cfg;
	double mu, sigma, u1, u2, z, ms;

	if (cfg->latency_p50_ms == 0)
		return cfg->latency_ms;
	mu = log((double)cfg->latency_p50_ms);
	sigma = (log((double)cfg->latency_p99_ms) - mu) / API_Z99;
	u1 = sim_rng_unit(&api->fault_rng);
	u2 = sim_rng_unit(&api->fault_rng);
	z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
	ms = exp(mu + sigma * z);
	return ms > SIM_MAX_LATENCY_MS ? SIM_MAX_LATENCY_MS : (unsigned)ms;
}

/* A rate fault for a delivery with an ordinary token, or the token. */
static enum sim_token
draw_fault(struct sim_api *api, enum sim_token t)
{
	double u, cum = 0;
	int f;

	for (f = 0; f < SIM_FAULT_COUNT; f++)
		if (f != SIM_FAULT_REFUSE && api->cfg->rates[f] > 0)
			break;
	if (f == SIM_FAULT_COUNT)
		return t;
	u = sim_rng_unit(&api->fault_rng);
	for (f = 0; f < SIM_FAULT_COUNT; f++) {
		if (f == SIM_FAULT_REFUSE)
			continue;
		cum += api->cfg->rates[f];
		if (u < cum)
			return fault_tokens[f];
	}
	return t;
}

void
api_post_charge(struct sim_api *api, struct sim_exchange_data *x)
{
	struct sim_store *st = api->store;
	struct sim_key *key = NULL;
	int64_t now = (int64_t)time(NULL);
	unsigned long nth = 0;
	bool valid;
	enum sim_fault fault;

	/* every answer to a request with a (well-formed) key echoes it */
	x->echo_idem = x->has_idem && x->idem_len > 0 &&
	    x->idem_len <= SIM_MAX_IDEM_KEY && !x->idem_long;
	if (!api_authenticate(api, x))
		return;
	if (x->has_idem) {
		if (x->idem_len == 0 || x->idem_len > SIM_MAX_IDEM_KEY ||
		    x->idem_long) {
			api_answer_invalid(x, "idempotency_key_invalid",
			    "Idempotency-Key", 15,
			    "Keys for idempotent requests must be 1 to 255 characters long.");
			return;
		}
		key = sim_store_key_find(st, x->scope, x->idem, x->idem_len);
		if (key == NULL)
			key = sim_store_key_add(st, x->scope, x->idem,
			    x->idem_len, now);
		if (key == NULL) {
			api_answer_error(x, 503, "api_error", NULL, NULL, 0,
			    "The simulator holds --max-keys keys; a new one is refused until old ones expire.");
			return;
		}
	}
	valid = validate_charge(x);
	if (key != NULL) {
		nth = key->deliveries;
		sim_store_delivery(st, key, now, valid ? x->meta.p : NULL,
		    valid ? x->meta.len : 0);
	}
	if (!valid || world_foreign(api, x))
		return;
	if (key != NULL && key->in_flight) {
		api->in_use++;
		answer_in_use(x);
		return;
	}
	if (key != NULL && key->status != 0) {
		if (memcmp(key->fp, x->fp, SIM_FP_LEN) != 0 ||
		    world_params_error(api)) {
			answer_idempotency_error(x);
			return;
		}
		x->body_out.len = 0;
		if (key->answer != NULL)
			sim_buf_add(&x->body_out, key->answer, key->answer_len);
		else
			sim_buf_add(&x->body_out, key->charge->json,
			    key->charge->json_len);
		x->replayed = true;
		api->replays++;
		api_answer(x, key->status);
		return;
	}
	x->token = sim_token_pick(x->source, x->source_len, nth);
	if (x->token == SIM_TOK_NONE) {
		api_answer_invalid(x, "resource_missing", "source", 6,
		    "No such token: the source names no tok_ token.");
		return;
	}
	if (!sim_token_is_fault(x->token))
		x->token = draw_fault(api, x->token);
	fault = fault_of_token(x->token);
	if (fault != SIM_FAULT_COUNT)
		api->faults[fault]++;
	if (key != NULL) {
		key->in_flight = true;
		x->key = key;
	}
	x->wait_ms = draw_latency(api) + world_slow_ms(api);
	if (x->wait_ms > 0) {
		x->action = SIM_ACT_WAIT;
		return;
	}
	sim_api_execute(api, x);
}

struct sim_charge *
api_charge_make(struct sim_api *api, struct sim_exchange_data *x,
    bool saved_500)
{
	const struct decline *d = decline_of(x->token);
	char id[SIM_CHARGE_ID_LEN + 1];
	int64_t now = sim_api_now(api);
	struct sim_buf *b = &x->body_out;
	struct sim_charge *c;
	int status = d ? 402 : 200;

	memcpy(id, "ch_", 3);
	sim_rng_hex(&api->id_rng, id + 3, SIM_ID_HEX);
	id[SIM_CHARGE_ID_LEN] = '\0';
	render_charge(x, id, now, d);
	b->len = 0;
	if (saved_500) {
		api_answer_500(x);
		status = 500;
	} else if (d != NULL && world_bare_402(api)) {
		sim_buf_adds(b, "{}");
	} else if (d != NULL) {
		sim_buf_addf(b,
		    "{\"error\":{\"type\":\"card_error\",\"code\":\"%s\",\"decline_code\":\"%s\",\"charge\":\"%s\",\"message\":\"%s\"}}",
		    d->code, d->decline_code, id, d->message);
	} else {
		sim_buf_add(b, x->charge_json.p, x->charge_json.len);
	}
	c = sim_store_charge_add(api->store, x->key, x->scope, now, id,
	    x->charge_json.p, x->charge_json.len, x->meta.p ? x->meta.p : "",
	    x->meta.len, status, x->fp, status != 200 ? b->p : NULL,
	    status != 200 ? b->len : 0);
	if (c == NULL) {
		api_answer_error(x, 503, "api_error", NULL, NULL, 0,
		    "The simulator holds --max-keys charges without a key; a new one is refused until old ones expire.");
		return NULL;
	}
	world_charge_born(c);
	/* the event goes out whatever the wire does with the answer */
	if (api->webhooks != NULL)
		sim_webhooks_charge(api->webhooks, c,
		    x->has_idem ? x->idem : NULL,
		    x->has_idem ? x->idem_len : 0);
	api_answer(x, status);
	return c;
}

void
sim_api_execute(struct sim_api *api, struct sim_exchange_data *x)
{
	enum sim_liberty saved;

	switch (x->token) {
	case SIM_TOK_ERROR: api_answer_500(x); return;
	case SIM_TOK_RATE_LIMITED:
		api_answer_error(x, 429, "invalid_request_error",
		    "lock_timeout", NULL, 0,
		    "This object cannot be accessed right now because another API request or Stripe process is currently accessing it. If you see this error intermittently, retry the request. If you see this error frequently and are making multiple concurrent requests to a single object, make your requests serially or at a lower rate.");
		return;
	case SIM_TOK_RESET: x->action = SIM_ACT_RESET; return;
	default: break;
	}
	/* Stripe saves the answer once execution began, a 500 included */
	saved = x->key != NULL ? world_saved_500(api) : SIM_LIB_COUNT;
	if (saved == SIM_LIB_SAVED_500) {
		api_answer_500(x);
		sim_store_answer_save(x->key, 500, x->fp, x->body_out.p,
		    x->body_out.len);
		return;
	}
	if (api_charge_make(api, x, saved == SIM_LIB_CHARGED_SAVED_500) == NULL)
		return;
	switch (x->token) {
	case SIM_TOK_CHARGED_500: api_answer_500(x); break;
	case SIM_TOK_CHARGED_CLOSE: x->action = SIM_ACT_CLOSE; break;
	case SIM_TOK_CHARGED_RESET: x->action = SIM_ACT_RESET; break;
	case SIM_TOK_CHARGED_LATE: x->action = SIM_ACT_LATE; break;
	case SIM_TOK_SLOW: x->action = SIM_ACT_TRICKLE; break;
	default: break;
	}
}

/* --- reads ---------------------------------------------------------------- */

void
api_get_charge(struct sim_api *api, struct sim_exchange_data *x, const char *id,
    size_t n)
{
	struct sim_charge *c;
	char msg[96];

	if (!api_authenticate(api, x))
		return;
	c = sim_store_charge_find(api->store, id, n);
	if (c == NULL || c->scope != x->scope) {
		snprintf(msg, sizeof(msg), "No such charge: '%.*s'",
		    (int)(n > 40 ? 40 : n), id);
		api_answer_error(x, 404, "invalid_request_error",
		    "resource_missing", "id", 2, msg);
		return;
	}
	x->body_out.len = 0;
	sim_buf_add(&x->body_out, c->json, c->json_len);
	api_answer(x, 200);
}
