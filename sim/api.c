/*
 * api.c - the Stripe v1 subset the simulator answers: POST /v1/charges,
 * GET /v1/charges (the list), GET /v1/charges/<id>, GET
 * /v1/charges/search, and its own /_sim/ pages.
 */
#include "api.h"

#include <ctype.h>
#include <inttypes.h>
#include <llhttp.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* z of the 99th percentile of the standard normal distribution */
#define API_Z99 2.3263478740408408

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

static enum sim_fault
fault_of_token(enum sim_token t)
{
	int f;

	for (f = 0; f < SIM_FAULT_COUNT; f++)
		if (fault_tokens[f] == t)
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

/* --- answers ------------------------------------------------------------ */

static void
answer(struct sim_exchange_data *x, int status)
{
	x->status = status;
	x->action = SIM_ACT_ANSWER;
}

/* {"error":{"type":T[,"code":C][,"param":P],"message":M}} */
static void
answer_error(struct sim_exchange_data *x, int status, const char *type,
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
	answer(x, status);
}

static void
answer_invalid(struct sim_exchange_data *x, const char *code, const char *param,
    size_t param_len, const char *msg)
{
	answer_error(x, 400, "invalid_request_error", code, param, param_len,
	    msg);
}

static void
answer_500(struct sim_exchange_data *x)
{
	answer_error(x, 500, "api_error", NULL, NULL, 0,
	    "An unknown error occurred");
}

static void
answer_not_found(struct sim_exchange_data *x)
{
	answer_error(x, 404, "invalid_request_error", NULL, NULL, 0,
	    "Unrecognized request URL. Please see https://stripe.com/docs or we can help at https://support.stripe.com/.");
}

/* --- auth ----------------------------------------------------------------- */

/* The scope of the request's secret key, or 401 (false). */
static bool
authenticate(struct sim_api *api, struct sim_exchange_data *x)
{
	const struct sim_api_config *cfg = api->cfg;
	const char *k;
	size_t n, i;
	char msg[128];

	if (!x->has_auth || x->auth_len < 7 ||
	    strncasecmp(x->auth, "Bearer ", 7) != 0) {
		answer_error(x, 401, "invalid_request_error", NULL, NULL, 0,
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
	answer_error(x, 401, "invalid_request_error", NULL, NULL, 0, msg);
	return false;
}

/* --- validation ------------------------------------------------------------ */

static bool
name_is(const struct sim_pair *p, const char *name)
{
	return p->name_len == strlen(name) &&
	    memcmp(p->name, name, p->name_len) == 0;
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

/*
 * Decodes and checks the form of POST /v1/charges; false after answering
 * 400. Fills amount, currency, source, description, metadata and the
 * parameters' fingerprint.
 */
static bool
validate_charge(struct sim_exchange_data *x)
{
	struct sim_form *f = &x->form;
	const struct sim_pair *amount = NULL, *currency = NULL, *source = NULL,
	                      *desc = NULL, *p;
	struct sim_buf *canon = &x->canon;
	size_t i, n_meta = 0;
	char msg[256];
	bool ok = false;
	unsigned int mdlen = 0;
	enum sim_form_status fs;

	x->scratch.len = 0;
	sim_buf_reserve(&x->scratch, x->body_len);
	fs = sim_form_decode(x->body, x->body_len, x->scratch.p, f);
	if (fs != SIM_FORM_OK) {
		answer_invalid(x, "parameter_invalid", NULL, 0,
		    fs == SIM_FORM_TOO_MANY
		        ? "Too many parameters."
		        : "The request body is not valid application/x-www-form-urlencoded.");
		goto done;
	}
	sim_form_sort(f);
	x->meta.len = 0;
	x->meta_json.len = 0;
	sim_buf_add(&x->meta_json, "{", 1);
	for (i = 0; i < f->n; i++) {
		p = &f->pairs[i];
		if (i > 0 && p->name_len == f->pairs[i - 1].name_len &&
		    memcmp(p->name, f->pairs[i - 1].name, p->name_len) == 0) {
			snprintf(msg, sizeof(msg),
			    "Received the parameter %.*s more than once.",
			    (int)(p->name_len > 64 ? 64 : p->name_len),
			    p->name);
			answer_invalid(x, "parameter_invalid", p->name,
			    p->name_len, msg);
			goto done;
		}
		if (!sim_utf8_valid(p->name, p->name_len) ||
		    !sim_utf8_valid(p->value, p->value_len)) {
			answer_invalid(x, "parameter_invalid_string", p->name,
			    p->name_len,
			    "Parameters must be UTF-8 text without NUL.");
			goto done;
		}
		if (name_is(p, "amount")) {
			amount = p;
		} else if (name_is(p, "currency")) {
			currency = p;
		} else if (name_is(p, "source")) {
			source = p;
		} else if (name_is(p, "description")) {
			desc = p;
		} else if (p->name_len > 10 &&
		    memcmp(p->name, "metadata[", 9) == 0 &&
		    p->name[p->name_len - 1] == ']' &&
		    memchr(p->name + 9, '[', p->name_len - 10) == NULL &&
		    memchr(p->name + 9, ']', p->name_len - 10) == NULL) {
			if (++n_meta > SIM_MAX_META_PAIRS) {
				answer_invalid(x, "parameter_invalid",
				    "metadata", 8,
				    "Metadata can have up to 50 keys.");
				goto done;
			}
			if (p->name_len - 10 > SIM_MAX_META_NAME) {
				answer_invalid(x, "parameter_invalid", p->name,
				    p->name_len,
				    "Metadata keys can be up to 40 characters long.");
				goto done;
			}
			if (p->value_len > SIM_MAX_META_VALUE) {
				answer_invalid(x, "parameter_invalid", p->name,
				    p->name_len,
				    "Metadata values can be up to 500 characters long.");
				goto done;
			}
			if (p->value_len == 0)
				continue; /* Stripe: an empty value unsets */
			if (x->meta.len > 0)
				sim_buf_add(&x->meta, "&", 1);
			sim_pct_encode(&x->meta, p->name + 9, p->name_len - 10);
			sim_buf_add(&x->meta, "=", 1);
			sim_pct_encode(&x->meta, p->value, p->value_len);
			add_meta_json_pair(&x->meta_json, p->name + 9,
			    p->name_len - 10, p->value, p->value_len);
		} else {
			snprintf(msg, sizeof(msg),
			    "Received unknown parameter: %.*s",
			    (int)(p->name_len > 64 ? 64 : p->name_len),
			    p->name);
			answer_invalid(x, "parameter_unknown", p->name,
			    p->name_len, msg);
			goto done;
		}
	}
	sim_buf_add(&x->meta_json, "}", 1);
	if (amount == NULL) {
		answer_invalid(x, "parameter_missing", "amount", 6,
		    "Missing required param: amount.");
		goto done;
	}
	x->amount = 0;
	for (i = 0; i < amount->value_len; i++) {
		if (!isdigit((unsigned char)amount->value[i]) ||
		    x->amount > SIM_MAX_AMOUNT) {
			answer_invalid(x, "parameter_invalid_integer", "amount",
			    6,
			    "Invalid integer: amount must be a positive integer of at most 99999999.");
			goto done;
		}
		x->amount = x->amount * 10 + (amount->value[i] - '0');
	}
	if (amount->value_len == 0) {
		answer_invalid(x, "parameter_invalid_integer", "amount", 6,
		    "Invalid integer: amount must be a positive integer of at most 99999999.");
		goto done;
	}
	if (x->amount < 1) {
		answer_invalid(x, "amount_too_small", "amount", 6,
		    "Amount must be at least 1.");
		goto done;
	}
	if (x->amount > SIM_MAX_AMOUNT) {
		answer_invalid(x, "amount_too_large", "amount", 6,
		    "Amount must be no more than 99999999.");
		goto done;
	}
	if (currency == NULL) {
		answer_invalid(x, "parameter_missing", "currency", 8,
		    "Missing required param: currency.");
		goto done;
	}
	if (currency->value_len != 3 ||
	    !isalpha((unsigned char)currency->value[0]) ||
	    !isalpha((unsigned char)currency->value[1]) ||
	    !isalpha((unsigned char)currency->value[2])) {
		answer_invalid(x, "parameter_invalid", "currency", 8,
		    "Invalid currency: it must be a three-letter ISO code.");
		goto done;
	}
	for (i = 0; i < 3; i++)
		x->currency[i] =
		    (char)tolower((unsigned char)currency->value[i]);
	x->currency[3] = '\0';
	if (source == NULL || source->value_len == 0) {
		answer_invalid(x, "parameter_missing", "source", 6,
		    "Missing required param: source.");
		goto done;
	}
	if (source->value_len > SIM_MAX_SOURCE) {
		answer_invalid(x, "parameter_invalid", "source", 6,
		    "Invalid source: at most 255 characters.");
		goto done;
	}
	x->source = source->value;
	x->source_len = source->value_len;
	x->description = desc ? desc->value : NULL;
	x->description_len = desc ? desc->value_len : 0;
	if (x->description_len > SIM_MAX_DESCRIPTION) {
		answer_invalid(x, "parameter_invalid", "description", 11,
		    "Invalid description: at most 1000 characters.");
		goto done;
	}
	/* the fingerprint: every decoded pair, sorted, NUL-separated */
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
	ok = true;
done:
	return ok;
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
	answer(x, 409);
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
	answer(x, 400);
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

static void
post_charge(struct sim_api *api, struct sim_exchange_data *x)
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
	if (!authenticate(api, x))
		return;
	if (x->has_idem) {
		if (x->idem_len == 0 || x->idem_len > SIM_MAX_IDEM_KEY ||
		    x->idem_long) {
			answer_invalid(x, "idempotency_key_invalid",
			    "Idempotency-Key", 15,
			    "Keys for idempotent requests must be 1 to 255 characters long.");
			return;
		}
		key = sim_store_key_find(st, x->scope, x->idem, x->idem_len);
		if (key == NULL)
			key = sim_store_key_add(st, x->scope, x->idem,
			    x->idem_len, now);
		if (key == NULL) {
			answer_error(x, 503, "api_error", NULL, NULL, 0,
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
	if (!valid)
		return;
	if (key != NULL && key->in_flight) {
		api->in_use++;
		answer_in_use(x);
		return;
	}
	if (key != NULL && key->status != 0) {
		if (memcmp(key->fp, x->fp, SIM_FP_LEN) != 0) {
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
		answer(x, key->status);
		return;
	}
	x->token = sim_token_pick(x->source, x->source_len, nth);
	if (x->token == SIM_TOK_NONE) {
		answer_invalid(x, "resource_missing", "source", 6,
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
	x->wait_ms = draw_latency(api);
	if (x->wait_ms > 0) {
		x->action = SIM_ACT_WAIT;
		return;
	}
	sim_api_execute(api, x);
}

void
sim_api_execute(struct sim_api *api, struct sim_exchange_data *x)
{
	const struct decline *d = decline_of(x->token);
	char id[SIM_CHARGE_ID_LEN + 1];
	int64_t now = (int64_t)time(NULL);
	struct sim_buf *b = &x->body_out;
	struct sim_charge *c;
	int status = d ? 402 : 200;

	switch (x->token) {
	case SIM_TOK_ERROR: answer_500(x); return;
	case SIM_TOK_RATE_LIMITED:
		answer_error(x, 429, "invalid_request_error", "lock_timeout",
		    NULL, 0,
		    "This object cannot be accessed right now because another API request or Stripe process is currently accessing it. If you see this error intermittently, retry the request. If you see this error frequently and are making multiple concurrent requests to a single object, make your requests serially or at a lower rate.");
		return;
	case SIM_TOK_RESET: x->action = SIM_ACT_RESET; return;
	default: break;
	}
	memcpy(id, "ch_", 3);
	sim_rng_hex(&api->id_rng, id + 3, SIM_ID_HEX);
	id[SIM_CHARGE_ID_LEN] = '\0';
	render_charge(x, id, now, d);
	b->len = 0;
	if (d != NULL)
		sim_buf_addf(b,
		    "{\"error\":{\"type\":\"card_error\",\"code\":\"%s\",\"decline_code\":\"%s\",\"charge\":\"%s\",\"message\":\"%s\"}}",
		    d->code, d->decline_code, id, d->message);
	else
		sim_buf_add(b, x->charge_json.p, x->charge_json.len);
	c = sim_store_charge_add(api->store, x->key, x->scope, now, id,
	    x->charge_json.p, x->charge_json.len, x->meta.p ? x->meta.p : "",
	    x->meta.len, status, x->fp, d ? b->p : NULL, d ? b->len : 0);
	if (c == NULL) {
		answer_error(x, 503, "api_error", NULL, NULL, 0,
		    "The simulator holds --max-keys charges without a key; a new one is refused until old ones expire.");
		return;
	}
	/* the event goes out whatever the wire does with the answer */
	if (api->webhooks != NULL)
		sim_webhooks_charge(api->webhooks, c,
		    x->has_idem ? x->idem : NULL,
		    x->has_idem ? x->idem_len : 0);
	answer(x, status);
	switch (x->token) {
	case SIM_TOK_CHARGED_500: answer_500(x); break;
	case SIM_TOK_CHARGED_CLOSE: x->action = SIM_ACT_CLOSE; break;
	case SIM_TOK_CHARGED_RESET: x->action = SIM_ACT_RESET; break;
	case SIM_TOK_CHARGED_LATE: x->action = SIM_ACT_LATE; break;
	case SIM_TOK_SLOW: x->action = SIM_ACT_TRICKLE; break;
	default: break;
	}
}

void
sim_api_release(struct sim_api *api, struct sim_exchange_data *x)
{
	(void)api;
	if (x->key != NULL) {
		x->key->in_flight = false;
		x->key = NULL;
	}
}

/* --- reads ---------------------------------------------------------------- */

static void
get_charge(struct sim_api *api, struct sim_exchange_data *x, const char *id,
    size_t n)
{
	struct sim_charge *c;
	char msg[96];

	if (!authenticate(api, x))
		return;
	c = sim_store_charge_find(api->store, id, n);
	if (c == NULL || c->scope != x->scope) {
		snprintf(msg, sizeof(msg), "No such charge: '%.*s'",
		    (int)(n > 40 ? 40 : n), id);
		answer_error(x, 404, "invalid_request_error",
		    "resource_missing", "id", 2, msg);
		return;
	}
	x->body_out.len = 0;
	sim_buf_add(&x->body_out, c->json, c->json_len);
	answer(x, 200);
}

/* --- lists and search ------------------------------------------------------ */

/* The query parameters of GET /v1/charges and /v1/charges/search. */
struct page_params {
	int64_t lo; /* created range, inclusive */
	int64_t hi;
	size_t limit;
	const struct sim_charge *after; /* starting_after, or the page cursor */
	const struct sim_charge *before; /* ending_before */
	const char *query;
	size_t query_len;
	bool has_query;
};

/* A decimal integer, an optional '-' and 1 to 18 digits, into *out. */
static bool
parse_int(const char *p, size_t n, int64_t *out)
{
	size_t i = n > 0 && p[0] == '-' ? 1 : 0;
	int64_t v = 0;

	if (n == i || n - i > 18)
		return false;
	for (; i < n; i++) {
		if (!isdigit((unsigned char)p[i]))
			return false;
		v = v * 10 + (p[i] - '0');
	}
	*out = p[0] == '-' ? -v : v;
	return true;
}

/* The caller's charge named by a cursor parameter, or 400 (NULL). */
static const struct sim_charge *
cursor_charge(struct sim_api *api, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	const struct sim_charge *c =
	    sim_store_charge_find(api->store, p->value, p->value_len);
	char msg[96];

	if (c != NULL && c->scope == x->scope)
		return c;
	snprintf(msg, sizeof(msg), "No such charge: '%.*s'",
	    (int)(p->value_len > 40 ? 40 : p->value_len), p->value);
	answer_invalid(x, "resource_missing", p->name, p->name_len, msg);
	return NULL;
}

/* The search cursor: "pg_" and the 24 hex digits of the last charge's id. */
static void
add_page_cursor(struct sim_buf *b, const struct sim_charge *c)
{
	sim_buf_adds(b, "\"pg_");
	sim_buf_add(b, c->id + 3, SIM_CHARGE_ID_LEN - 3);
	sim_buf_adds(b, "\"");
}

static const struct sim_charge *
page_cursor_charge(struct sim_api *api, struct sim_exchange_data *x,
    const struct sim_pair *p)
{
	char id[SIM_CHARGE_ID_LEN];
	const struct sim_charge *c = NULL;

	if (p->value_len == SIM_CHARGE_ID_LEN &&
	    memcmp(p->value, "pg_", 3) == 0) {
		memcpy(id, "ch_", 3);
		memcpy(id + 3, p->value + 3, SIM_CHARGE_ID_LEN - 3);
		c = sim_store_charge_find(api->store, id, sizeof(id));
	}
	if (c != NULL && c->scope == x->scope)
		return c;
	answer_invalid(x, "parameter_invalid", "page", 4,
	    "Invalid page: not a next_page of this search, or its charge has expired.");
	return NULL;
}

/*
 * Decodes and checks the query of a list (search false: created[...],
 * limit, starting_after, ending_before) or a search (query, limit, page);
 * false after answering 400.
 */
static bool
page_params(struct sim_api *api, struct sim_exchange_data *x, const char *qs,
    size_t qn, bool search, struct page_params *pp)
{
	struct sim_form *f = &x->form;
	const struct sim_pair *p;
	enum sim_form_status fs;
	int64_t v;
	size_t i;
	char msg[160];

	memset(pp, 0, sizeof(*pp));
	pp->lo = INT64_MIN;
	pp->hi = INT64_MAX;
	pp->limit = SIM_LIST_DEFAULT_LIMIT;
	x->scratch.len = 0;
	sim_buf_reserve(&x->scratch, qn);
	fs = sim_form_decode(qs, qn, x->scratch.p, f);
	if (fs != SIM_FORM_OK) {
		answer_invalid(x, "parameter_invalid", NULL, 0,
		    fs == SIM_FORM_TOO_MANY
		        ? "Too many parameters."
		        : "The query string is not valid percent-encoding.");
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
			answer_invalid(x, "parameter_invalid", p->name,
			    p->name_len, msg);
			return false;
		}
		if (!sim_utf8_valid(p->name, p->name_len) ||
		    !sim_utf8_valid(p->value, p->value_len)) {
			answer_invalid(x, "parameter_invalid_string", p->name,
			    p->name_len,
			    "Parameters must be UTF-8 text without NUL.");
			return false;
		}
		if (name_is(p, "limit")) {
			if (!parse_int(p->value, p->value_len, &v) || v < 1 ||
			    v > SIM_LIST_MAX_LIMIT) {
				answer_invalid(x, "parameter_invalid_integer",
				    "limit", 5,
				    "Invalid integer: limit must be an integer from 1 to 100.");
				return false;
			}
			pp->limit = (size_t)v;
		} else if (!search &&
		    (name_is(p, "created") || name_is(p, "created[gt]") ||
		        name_is(p, "created[gte]") ||
		        name_is(p, "created[lt]") ||
		        name_is(p, "created[lte]"))) {
			if (!parse_int(p->value, p->value_len, &v)) {
				snprintf(msg, sizeof(msg),
				    "Invalid integer: %.*s must be a Unix time in seconds.",
				    (int)p->name_len, p->name);
				answer_invalid(x, "parameter_invalid_integer",
				    p->name, p->name_len, msg);
				return false;
			}
			if (name_is(p, "created[gt]"))
				v++;
			if (name_is(p, "created[lt]"))
				v--;
			if ((name_is(p, "created") ||
			        name_is(p, "created[gt]") ||
			        name_is(p, "created[gte]")) &&
			    v > pp->lo)
				pp->lo = v;
			if ((name_is(p, "created") ||
			        name_is(p, "created[lt]") ||
			        name_is(p, "created[lte]")) &&
			    v < pp->hi)
				pp->hi = v;
		} else if (!search && name_is(p, "starting_after")) {
			if ((pp->after = cursor_charge(api, x, p)) == NULL)
				return false;
		} else if (!search && name_is(p, "ending_before")) {
			if ((pp->before = cursor_charge(api, x, p)) == NULL)
				return false;
		} else if (search && name_is(p, "query")) {
			pp->query = p->value;
			pp->query_len = p->value_len;
			pp->has_query = true;
		} else if (search && name_is(p, "page")) {
			if ((pp->after = page_cursor_charge(api, x, p)) == NULL)
				return false;
		} else {
			snprintf(msg, sizeof(msg),
			    "Received unknown parameter: %.*s",
			    (int)(p->name_len > 64 ? 64 : p->name_len),
			    p->name);
			answer_invalid(x, "parameter_unknown", p->name,
			    p->name_len, msg);
			return false;
		}
	}
	if (pp->after != NULL && pp->before != NULL) {
		answer_invalid(x, "parameter_invalid", "ending_before", 13,
		    "You may only specify one of these parameters: starting_after, ending_before.");
		return false;
	}
	if (search && !pp->has_query) {
		answer_invalid(x, "parameter_missing", "query", 5,
		    "Missing required param: query.");
		return false;
	}
	return true;
}

/* The index of the first charge of v[0..n) created after hi. */
static size_t
upper_of(struct sim_charge *const *v, size_t n, int64_t hi)
{
	return hi == INT64_MAX ? n : sim_store_lower_bound(v, n, hi + 1, 0);
}

/*
 * GET /v1/charges: the caller's charges by (created, seq) descending, a
 * created range, cursors. O(log n + limit) with the scope's index.
 */
static void
list_charges(struct sim_api *api, struct sim_exchange_data *x, const char *qs,
    size_t qn)
{
	struct sim_buf *b = &x->body_out;
	struct sim_charge *const *v;
	struct page_params pp;
	size_t n, bottom, top, last, j;
	bool more;

	if (!authenticate(api, x) || !page_params(api, x, qs, qn, false, &pp))
		return;
	v = sim_store_charges_of(api->store, x->scope, &n);
	bottom = pp.lo > pp.hi ? 0 : sim_store_lower_bound(v, n, pp.lo, 0);
	top = pp.lo > pp.hi ? 0 : upper_of(v, n, pp.hi);
	b->len = 0;
	sim_buf_adds(b, "{\"object\":\"list\",\"data\":[");
	if (pp.before != NULL) {
		/* the limit charges just newer than the cursor, newest first */
		j = sim_store_index_of(v, n, pp.before) + 1;
		if (j > bottom)
			bottom = j;
		last = top > bottom && top - bottom > pp.limit
		    ? bottom + pp.limit
		    : top;
		more = top > last;
		for (j = last; j > bottom; j--) {
			if (j < last)
				sim_buf_add(b, ",", 1);
			sim_buf_add(b, v[j - 1]->json, v[j - 1]->json_len);
		}
	} else {
		if (pp.after != NULL) {
			j = sim_store_index_of(v, n, pp.after);
			if (j < top)
				top = j;
		}
		last = top > bottom && top - bottom > pp.limit ? top - pp.limit
		                                               : bottom;
		more = last > bottom;
		for (j = top; j > last; j--) {
			if (j < top)
				sim_buf_add(b, ",", 1);
			sim_buf_add(b, v[j - 1]->json, v[j - 1]->json_len);
		}
	}
	sim_buf_adds(b, more ? "],\"has_more\":true" : "],\"has_more\":false");
	sim_buf_adds(b, ",\"url\":\"/v1/charges\"}");
	answer(x, 200);
}

static void
skip_ws(const char *s, size_t n, size_t *i)
{
	while (*i < n && (s[*i] == ' ' || s[*i] == '\t'))
		(*i)++;
}

/* Skips blanks, then the literal lit; false when it is not there. */
static bool
expect_lit(const char *s, size_t n, size_t *i, const char *lit)
{
	size_t l = strlen(lit);

	skip_ws(s, n, i);
	if (n - *i < l || memcmp(s + *i, lit, l) != 0)
		return false;
	*i += l;
	return true;
}

/*
 * A quoted string of the search language at s[*i..n) after blanks: '...'
 * or "...", a backslash makes the next character literal (\' is a quote,
 * \\ a backslash), as Stripe's query language escapes. Appended to out.
 */
static bool
parse_quoted(const char *s, size_t n, size_t *i, struct sim_buf *out)
{
	char q, c;

	skip_ws(s, n, i);
	if (*i >= n || (s[*i] != '\'' && s[*i] != '"'))
		return false;
	q = s[(*i)++];
	while (*i < n) {
		c = s[(*i)++];
		if (c == q)
			return true;
		if (c == '\\') {
			if (*i >= n)
				return false;
			c = s[(*i)++];
		}
		sim_buf_add(out, &c, 1);
	}
	return false;
}

/* True when the metadata form meta (name=value&..., percent-encoded as
 * sim_pct_encode does) has the pair want (encoded the same way). */
static bool
meta_has(const char *meta, size_t meta_len, const char *want, size_t wl)
{
	const char *p = meta, *end = meta + meta_len, *amp;
	size_t sl;

	while (p < end) {
		amp = memchr(p, '&', (size_t)(end - p));
		sl = amp ? (size_t)(amp - p) : (size_t)(end - p);
		if (sl == wl && memcmp(p, want, wl) == 0)
			return true;
		p += sl + 1;
	}
	return false;
}

/*
 * GET /v1/charges/search?query=metadata['NAME']:'VALUE'[&limit=N][&page=C]:
 * newest first, paged like Stripe's search (next_page). A linear scan of
 * the caller's charges from the cursor.
 */
static void
search_charges(struct sim_api *api, struct sim_exchange_data *x, const char *qs,
    size_t qn)
{
	struct sim_buf name = { 0 }, value = { 0 }, want = { 0 };
	struct sim_buf *b = &x->body_out;
	struct sim_charge *const *v;
	const struct sim_charge *last = NULL;
	struct page_params pp;
	size_t n, j, got = 0, i = 0;
	bool more = false;

	if (!authenticate(api, x) || !page_params(api, x, qs, qn, true, &pp))
		return;
	if (!expect_lit(pp.query, pp.query_len, &i, "metadata") ||
	    !expect_lit(pp.query, pp.query_len, &i, "[") ||
	    !parse_quoted(pp.query, pp.query_len, &i, &name) ||
	    !expect_lit(pp.query, pp.query_len, &i, "]") ||
	    !expect_lit(pp.query, pp.query_len, &i, ":") ||
	    !parse_quoted(pp.query, pp.query_len, &i, &value) ||
	    (skip_ws(pp.query, pp.query_len, &i), i != pp.query_len)) {
		answer_invalid(x, "parameter_invalid", "query", 5,
		    "The simulator's search understands one clause: metadata['NAME']:'VALUE' (\\' is a quote, \\\\ a backslash).");
		goto done;
	}
	sim_pct_encode(&want, name.p ? name.p : "", name.len);
	sim_buf_add(&want, "=", 1);
	sim_pct_encode(&want, value.p ? value.p : "", value.len);
	v = sim_store_charges_of(api->store, x->scope, &n);
	j = pp.after != NULL ? sim_store_index_of(v, n, pp.after) : n;
	b->len = 0;
	sim_buf_adds(b, "{\"object\":\"search_result\",\"data\":[");
	for (; j > 0; j--) {
		if (!meta_has(v[j - 1]->meta, v[j - 1]->meta_len, want.p,
		        want.len))
			continue;
		if (got == pp.limit) {
			more = true;
			break;
		}
		if (got++ > 0)
			sim_buf_add(b, ",", 1);
		sim_buf_add(b, v[j - 1]->json, v[j - 1]->json_len);
		last = v[j - 1];
	}
	sim_buf_adds(b,
	    more ? "],\"has_more\":true,\"next_page\":"
	         : "],\"has_more\":false,\"next_page\":");
	if (more)
		add_page_cursor(b, last);
	else
		sim_buf_adds(b, "null");
	sim_buf_adds(b, ",\"url\":\"/v1/charges/search\"}");
	answer(x, 200);
done:
	sim_buf_free(&name);
	sim_buf_free(&value);
	sim_buf_free(&want);
}

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

static void
sim_keys(struct sim_api *api, struct sim_exchange_data *x, const char *enc,
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
		answer(x, 200);
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
		answer_error(x, 404, "invalid_request_error",
		    "resource_missing", NULL, 0, "No such idempotency key.");
		return;
	}
	render_key(x, b, key);
	answer(x, 200);
}

static void
sim_stats(struct sim_api *api, struct sim_exchange_data *x)
{
	struct sim_buf *b = &x->body_out;
	int f;

	b->len = 0;
	sim_buf_addf(b,
	    "{\"deliveries\":%lu,\"charges\":%lu,\"keys\":%zu,\"replays\":%lu,\"in_use\":%lu,\"faults\":{",
	    api->store->deliveries, api->store->charge_count,
	    api->store->keys.n, api->replays, api->in_use);
	for (f = 0; f < SIM_FAULT_COUNT; f++)
		sim_buf_addf(b, "%s\"%s\":%lu", f ? "," : "", fault_names[f],
		    api->faults[f]);
	sim_buf_adds(b, "}");
	sim_webhooks_stats(api->webhooks, b);
	sim_buf_adds(b, "}");
	answer(x, 200);
}

/* GET /_sim/events[?charge=ch_...] and /_sim/events/<evt_...>. */
static void
sim_events(struct sim_api *api, struct sim_exchange_data *x, const char *id,
    size_t id_len, const char *qs, size_t qn)
{
	struct sim_buf *b = &x->body_out;
	const char *charge = NULL;
	size_t charge_len = 0, i;

	b->len = 0;
	if (id_len > 0) {
		if (!sim_webhooks_render(api->webhooks, b, id, id_len, NULL,
		        0)) {
			answer_error(x, 404, "invalid_request_error",
			    "resource_missing", "id", 2, "No such event.");
			return;
		}
		answer(x, 200);
		return;
	}
	x->scratch.len = 0;
	sim_buf_reserve(&x->scratch, qn);
	if (sim_form_decode(qs, qn, x->scratch.p, &x->form) == SIM_FORM_OK) {
		for (i = 0; i < x->form.n; i++) {
			if (name_is(&x->form.pairs[i], "charge")) {
				charge = x->form.pairs[i].value;
				charge_len = x->form.pairs[i].value_len;
			}
		}
	}
	if (charge != NULL && charge_len == 0) {
		answer_invalid(x, "parameter_invalid", "charge", 6,
		    "charge: a charge id is expected.");
		return;
	}
	(void)sim_webhooks_render(api->webhooks, b, NULL, 0, charge,
	    charge_len);
	answer(x, 200);
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
		post_charge(api, x);
	} else if (x->method != HTTP_GET) {
		answer_not_found(x);
	} else if (path_is(path, plen, "/v1/charges")) {
		list_charges(api, x, q ? q : "", qlen);
	} else if (path_is(path, plen, "/v1/charges/search")) {
		search_charges(api, x, q ? q : "", qlen);
	} else if (path_under(path, plen, "/v1/charges/")) {
		get_charge(api, x, path + 12, plen - 12);
	} else if (path_is(path, plen, "/_sim/keys")) {
		sim_keys(api, x, NULL, 0, false);
	} else if (path_under(path, plen, "/_sim/keys/")) {
		sim_keys(api, x, path + 11, plen - 11, true);
	} else if (path_is(path, plen, "/_sim/events")) {
		sim_events(api, x, NULL, 0, q ? q : "", qlen);
	} else if (path_under(path, plen, "/_sim/events/")) {
		sim_events(api, x, path + 13, plen - 13, "", 0);
	} else if (path_is(path, plen, "/_sim/stats")) {
		sim_stats(api, x);
	} else {
		answer_not_found(x);
	}
}
