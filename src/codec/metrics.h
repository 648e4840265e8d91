/*
 * metrics.h - counters and a latency histogram, shared by all processes of
 * one installation through a small mmap'ed file (atomic adds), rendered in
 * the Prometheus text format.
 */
#ifndef CHARGE_METRICS_H
#define CHARGE_METRICS_H

#include <stddef.h>

enum metric_counter {
	MC_REPLAYS,
	MC_CONFLICTS,
	MC_MISMATCHES,
	MC_SPILLS,
	MC_SPILL_FAILURES,
	MC_REDIS_ERRORS,
	MC_PROVIDER_CALLS,
	MC_NOT_DURABLE,
	MC_OVERLOADED,
	MC_BODY_MEMORY_FULL,
	MC_CONN_OUTPUT_FULL,
	MC_CONN_STALLED,
	MC_CONN_IDLE_CLOSED,
	MC_PROVIDER_MISMATCH,
	MC_PROVIDER_REFUSED_AMBIGUOUS,
	MC_PROVIDER_CLOCK_SKEW,
	MC_COUNT
};

/*
 * Maps path (created if missing) so counters are shared across processes;
 * with path NULL, "" or "none", or on failure, counters are per process.
 * 0 when shared, -1 when per process.
 */
int metrics_open(const char *path);

void metrics_inc(enum metric_counter m);
/* One finished request: its outcome label and duration. */
void metrics_request(const char *outcome, long long duration_us);

/*
 * One attempt of the HTTP provider, by its class label (a row of
 * provider_wire.c's table): charge_provider_attempts_total{class}.
 */
/* The classes of charge_provider_attempts_total, in its label order. */
enum metrics_attempt {
	MA_TRANSPORT,
	MA_CHARGE,
	MA_DECLINE,
	MA_IDEMPOTENCY_ERROR,
	MA_IN_USE,
	MA_RATE_LIMITED,
	MA_SERVER_ERROR,
	MA_SHOULD_RETRY,
	MA_REJECTED,
	MA_UNEXPECTED,
	MA_COUNT
};

void metrics_provider_attempt(enum metrics_attempt a);

/* The completer settled an unknown record: "completed" or "failed". */
void metrics_completer_settled(const char *outcome);

/* charge_unknown_outstanding: the unknown records the index holds now. */
void metrics_unknown_outstanding(long long n);

/*
 * One event of the provider's webhook route: charge_webhook_events_total
 * {type, result}. type: "charge.succeeded", "charge.failed", anything else
 * counts as "other"; result: a label of metrics_webhook_results.
 */
void metrics_webhook_event(const char *type, const char *result);

/* The result labels of charge_webhook_events_total, NULL-terminated. */
extern const char *const metrics_webhook_results[];

/*
 * charge_unknown_oldest_age_seconds: how long the record unknown the
 * longest has been so (from the index, at the scrape); -1: not known
 * (Redis did not answer), the sample is left out.
 */
void metrics_unknown_oldest_age(long long age_s);

/*
 * The labels of charge_provider_attempts_total by enum metrics_attempt,
 * NULL-terminated: the one list (provider_wire.c's table names its rows
 * by the enum).
 */
extern const char *const metrics_attempt_labels[MA_COUNT + 1];

/* The exposition text, malloc'd; NULL on ENOMEM. */
char *metrics_render(size_t *len);

#endif
