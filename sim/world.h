/*
 * world.h - the provider's liberties, as seeded faults that combine with
 * the rate faults of api.h: everything Stripe documents it may do and a
 * client must survive (docs/provider-sim.md, "The provider's liberties"):
 * a clock that is not the client's, executions slower than any client
 * timeout (re-sends get 409 meanwhile), 500s saved under the key once
 * execution began and replayed, idempotency_error on a re-send whose form
 * "changed", a search that lags, a busy account. Each draw comes from a
 * generator of its own seeded with --seed, so these faults never change
 * the rate faults or latencies a seed gave before.
 */
#ifndef SIM_WORLD_H
#define SIM_WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_MAX_CLOCK_OFFSET_S 86400 /* --clock-offset-s: +-1 day */
#define SIM_MAX_BUSY_PER_S 10000     /* --busy-per-s */
#define SIM_BUSY_TICK_MS 20          /* background charges made per tick */
#define SIM_DEFAULT_SLOW_MS 10000    /* --slow-ms */

enum sim_liberty {
	SIM_LIB_SLOW,      /* the execution waited --slow-ms */
	SIM_LIB_SAVED_500, /* a 500 saved under the key, nothing charged */
	SIM_LIB_CHARGED_SAVED_500, /* charged, and a 500 saved under the key */
	SIM_LIB_PARAMS_ERROR,      /* a re-send answered idempotency_error */
	SIM_LIB_BUSY,              /* a background charge */
	SIM_LIB_SEARCH_HIDDEN,     /* a charge a search did not show yet */
	SIM_LIB_FOREIGN,  /* a delivery answered with another's charge */
	SIM_LIB_BARE_402, /* a decline answered without an error object */
	SIM_LIB_COUNT,
};

struct sim_world_config {
	long clock_offset_s; /* added to created and Date */
	double slow_rate;    /* an execution waits slow_ms first */
	unsigned slow_ms;
	double saved_500_rate;    /* the answer becomes a saved 500 */
	double params_error_rate; /* a re-send of a stored key: 400 */
	unsigned search_lag_ms;   /* a search shows charges this old */
	unsigned busy_per_s;  /* background charges per second and account */
	double foreign_rate;  /* a delivery gets another charge, unexecuted */
	double bare_402_rate; /* a decline's 402 has no error object */
};

/* The --stats name of l. */
const char *sim_liberty_name(enum sim_liberty l);

#endif
