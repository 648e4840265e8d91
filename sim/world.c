/*
 * world.c - the provider's liberties (world.h): the provider's clock, the
 * seeded draws of the slow executions, saved 500s and idempotency_errors,
 * the search's lag, and the busy account's background charges on a timer
 * of the loop.
 */
#include "world.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "api_int.h"

/* the liberties' generator is --seed mixed with this, so that adding them
 * changes no draw of the rate faults of a seed */
#define WORLD_SEED_SALT 0x776f726c64ULL /* "world" */

static const char *const liberty_names[SIM_LIB_COUNT] = {
	[SIM_LIB_SLOW] = "slow",
	[SIM_LIB_SAVED_500] = "saved_500",
	[SIM_LIB_CHARGED_SAVED_500] = "charged_saved_500",
	[SIM_LIB_PARAMS_ERROR] = "params_error",
	[SIM_LIB_BUSY] = "busy",
	[SIM_LIB_SEARCH_HIDDEN] = "search_hidden",
	[SIM_LIB_FOREIGN] = "foreign",
	[SIM_LIB_BARE_402] = "bare_402",
};

const char *
sim_liberty_name(enum sim_liberty l)
{
	return l < SIM_LIB_COUNT ? liberty_names[l] : "?";
}

void
world_init(struct sim_api *api)
{
	api->world_rng.s = (uint64_t)api->cfg->seed ^ WORLD_SEED_SALT;
}

/* Milliseconds of the real clock (the simulator's own). */
static uint64_t
real_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int64_t
sim_api_now(const struct sim_api *api)
{
	return (int64_t)time(NULL) + api->cfg->world.clock_offset_s;
}

size_t
sim_api_date(const struct sim_api *api, char *out, size_t n)
{
	time_t t = (time_t)sim_api_now(api);
	struct tm tm;

	if (gmtime_r(&t, &tm) == NULL)
		return 0;
	return strftime(out, n, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* One draw of rate (none, and no draw, when rate is 0). */
static bool
draw(struct sim_api *api, double rate)
{
	return rate > 0 && sim_rng_unit(&api->world_rng) < rate;
}

unsigned
world_slow_ms(struct sim_api *api)
{
	if (!draw(api, api->cfg->world.slow_rate))
		return 0;
	api->liberties[SIM_LIB_SLOW]++;
	return api->cfg->world.slow_ms;
}

enum sim_liberty
world_saved_500(struct sim_api *api)
{
	enum sim_liberty l;

	if (!draw(api, api->cfg->world.saved_500_rate))
		return SIM_LIB_COUNT;
	/* whether the execution got as far as the charge: a coin */
	l = sim_rng_unit(&api->world_rng) < 0.5 ? SIM_LIB_SAVED_500
	                                        : SIM_LIB_CHARGED_SAVED_500;
	api->liberties[l]++;
	return l;
}

bool
world_params_error(struct sim_api *api)
{
	if (!draw(api, api->cfg->world.params_error_rate))
		return false;
	api->liberties[SIM_LIB_PARAMS_ERROR]++;
	return true;
}

bool
world_foreign(struct sim_api *api, struct sim_exchange_data *x)
{
	struct sim_charge *const *v;
	const struct sim_charge *c;
	size_t n;

	if (!draw(api, api->cfg->world.foreign_rate))
		return false;
	v = sim_store_charges_of(api->store, x->scope, &n);
	if (n == 0)
		return false;
	c = v[sim_rng_next(&api->world_rng) % n];
	if (c->key != NULL && c->key == x->key)
		return false; /* its own: not a foreign answer */
	api->liberties[SIM_LIB_FOREIGN]++;
	x->body_out.len = 0;
	sim_buf_add(&x->body_out, c->json, c->json_len);
	api_answer(x, 200);
	return true;
}

bool
world_bare_402(struct sim_api *api)
{
	if (!draw(api, api->cfg->world.bare_402_rate))
		return false;
	api->liberties[SIM_LIB_BARE_402]++;
	return true;
}

void
world_charge_born(struct sim_charge *c)
{
	c->born_ms = real_ms();
}

bool
world_search_hidden(struct sim_api *api, const struct sim_charge *c)
{
	uint64_t lag = api->cfg->world.search_lag_ms;

	if (lag == 0 || c->born_ms == 0 || c->born_ms + lag <= real_ms())
		return false;
	api->liberties[SIM_LIB_SEARCH_HIDDEN]++;
	return true;
}

/* One background charge in the account of scope: a succeeded charge
 * without a key, with metadata busy=<n>. */
static void
busy_charge(struct sim_api *api, uint64_t scope, unsigned long n)
{
	struct sim_exchange_data x;

	memset(&x, 0, sizeof(x));
	x.scope = scope;
	x.amount = 100 + (long)(n % 9900);
	memcpy(x.currency, "usd", 4);
	x.source = "tok_visa";
	x.source_len = 8;
	x.token = SIM_TOK_SUCCEED;
	sim_buf_addf(&x.meta, "busy=%lu", n);
	sim_buf_addf(&x.meta_json, "{\"busy\":\"%lu\"}", n);
	if (api_charge_make(api, &x, false) != NULL)
		api->liberties[SIM_LIB_BUSY]++;
	sim_exchange_data_free(&x);
}

/* Every tick: the charges due since the start at --busy-per-s. */
static void
on_busy(uv_timer_t *t)
{
	struct sim_api *api = t->data;
	uint64_t due =
	    (real_ms() - api->busy_t0_ms) * api->cfg->world.busy_per_s / 1000;
	size_t i;

	while (api->busy_made < due) {
		api->busy_made++;
		for (i = 0; i < api->cfg->n_secrets; i++)
			busy_charge(api, api->cfg->scopes[i], api->busy_made);
	}
}

void
sim_api_busy_start(struct sim_api *api, uv_loop_t *loop)
{
	if (api->cfg->world.busy_per_s == 0)
		return;
	if (uv_timer_init(loop, &api->busy) != 0)
		sim_fatal("libuv handle initialisation failed");
	api->busy.data = api;
	api->busy_t0_ms = real_ms();
	if (uv_timer_start(&api->busy, on_busy, SIM_BUSY_TICK_MS,
	        SIM_BUSY_TICK_MS) != 0)
		sim_fatal("libuv handle start failed");
}

void
sim_api_busy_stop(struct sim_api *api)
{
	if (api->busy_t0_ms != 0 && !uv_is_closing((uv_handle_t *)&api->busy))
		uv_close((uv_handle_t *)&api->busy, NULL);
}
