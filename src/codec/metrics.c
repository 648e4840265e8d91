/*
 * metrics.c - counters shared by every responder process of an installation
 * (lighttpd and mod_fcgid run several) through one mmap'ed file, updated
 * with atomic adds, so /metrics answers for the whole installation whichever
 * process serves the scrape. Without a file the counters are per process.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics.h"
#include "response.h"

#define METRICS_MAGIC                                                          \
	0x6368726738ULL /* "chrg8": bump when the layout changes */
#define METRICS_FILE_MODE 0600
#define RENDER_MAX 32768 /* bytes of exposition text */

#define OUTCOMES OUTCOME_COUNT

static const char *const counter_names[MC_COUNT][2] = {
	[MC_REPLAYS] = { "charge_replays_total",
	    "Recorded responses replayed" },
	[MC_CONFLICTS] = { "charge_conflicts_total",
	    "Requests answered 409 because the key was in progress" },
	[MC_MISMATCHES] = { "charge_mismatches_total",
	    "Keys reused with different parameters (422)" },
	[MC_SPILLS] = { "charge_spills_total",
	    "Response bodies written to spill files" },
	[MC_SPILL_FAILURES] = { "charge_spill_failures_total",
	    "Spill writes that failed (the body was recorded inline)" },
	[MC_REDIS_ERRORS] = { "charge_redis_errors_total",
	    "Redis calls that failed (connection, timeout, error reply)" },
	[MC_PROVIDER_CALLS] = { "charge_provider_calls_total",
	    "Calls to the payment provider" },
	[MC_NOT_DURABLE] = { "charge_not_durable_total",
	    "Records fewer than redis_min_replicas replicas acknowledged (503)" },
	[MC_OVERLOADED] = { "charge_overloaded_total",
	    "Requests refused because max_inflight were in progress (503)" },
	[MC_BODY_MEMORY_FULL] = { "charge_body_memory_full_total",
	    "Requests refused because bodies held body_memory_max_bytes (503)" },
	[MC_CONN_OUTPUT_FULL] = { "charge_conn_output_full_total",
	    "Times a connection stopped reading: conn_output_max_bytes unsent" },
	[MC_CONN_STALLED] = { "charge_conn_stalled_total",
	    "Connections closed: output unsent for request_timeout_ms" },
	[MC_CONN_IDLE_CLOSED] = { "charge_conn_idle_closed_total",
	    "Kept connections closed after keepalive_idle_timeout_ms idle" },
	[MC_PROVIDER_MISMATCH] = { "charge_provider_mismatch_total",
	    "Alerts: the provider answered with a charge that is not the request's (not recorded; the outcome stays unknown)" },
	[MC_PROVIDER_REFUSED_AMBIGUOUS] = { "charge_provider_refused_after_ambiguity_total",
	    "Alerts: the provider refused a delivery after one that may have executed (the outcome stays unknown)" },
	[MC_PROVIDER_CLOCK_SKEW] = { "charge_provider_clock_skew_total",
	    "Alerts: a list read proved nothing because the provider's clock was not measured or beyond provider_clock_skew_max_s (the outcome stays unknown)" },
};

/* Upper bounds of the latency buckets, microseconds. */
static const long long bucket_us[] = {
	1000,
	2500,
	5000,
	10000,
	25000,
	50000,
	100000,
	250000,
	500000,
	1000000,
	2500000,
	5000000,
	10000000,
};
#define BUCKETS (sizeof(bucket_us) / sizeof(bucket_us[0]))

const char *const metrics_attempt_labels[MA_COUNT + 1] = {
	[MA_TRANSPORT] = "transport",
	[MA_CHARGE] = "charge",
	[MA_DECLINE] = "decline",
	[MA_IDEMPOTENCY_ERROR] = "idempotency_error",
	[MA_IN_USE] = "in_use",
	[MA_RATE_LIMITED] = "rate_limited",
	[MA_SERVER_ERROR] = "server_error",
	[MA_SHOULD_RETRY] = "should_retry",
	[MA_REJECTED] = "rejected",
	[MA_UNEXPECTED] = "unexpected",
	[MA_COUNT] = NULL,
};
#define ATTEMPT_LABELS MA_COUNT

static const char *const settled_labels[] = { "completed", "failed" };
#define SETTLED_LABELS 2

static const char *const webhook_types[] = { "charge.succeeded",
	"charge.failed", "other" };
#define WEBHOOK_TYPES 3
const char *const metrics_webhook_results[] = { "settled", "duplicate",
	"ignored", "bad_signature", "malformed", "mismatch", "not_found",
	"retry", "error", NULL };
#define WEBHOOK_RESULTS 9

struct metrics_shm {
	uint64_t magic;
	uint64_t attempts[ATTEMPT_LABELS];
	uint64_t settled[SETTLED_LABELS];
	uint64_t unknown_outstanding; /* a gauge: the last count seen */
	int64_t unknown_oldest_age_s; /* a gauge, at the last scrape; -1 */
	uint64_t webhook[WEBHOOK_TYPES][WEBHOOK_RESULTS];
	uint64_t outcomes[OUTCOMES];
	uint64_t counters[MC_COUNT];
	uint64_t buckets[BUCKETS + 1]; /* last: +Inf */
	uint64_t sum_us;
	uint64_t count;
};

static struct metrics_shm local_metrics;
static struct metrics_shm *m = &local_metrics;
/* The mapped file, kept open for on_sigbus(); -1 without one. */
static int metrics_fd = -1;
static struct sigaction sigbus_prev;

/*
 * A file truncated under the mapping (an operator, a rotation) makes the
 * next access to a page past its end raise SIGBUS. Within the mapping the
 * file is grown back to its size (ftruncate is async-signal-safe; the
 * lost pages read as zero: the counters restart) and the access is
 * retried; failing that, the pages become private anonymous memory
 * (counters per process from then on). Any other SIGBUS goes to the
 * handler that was there before, or kills as it would have.
 */
static void
on_sigbus(int sig, siginfo_t *si, void *uctx)
{
	char *a = si != NULL ? (char *)si->si_addr : NULL;
	char *base = (char *)m;
	int saved = errno;

	if (metrics_fd >= 0 && a >= base && a < base + sizeof(*m)) {
		if (ftruncate(metrics_fd, sizeof(*m)) != 0 &&
		    mmap(base, sizeof(*m), PROT_READ | PROT_WRITE,
		        MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		        0) == MAP_FAILED)
			_exit(EXIT_FAILURE);
		(void)__atomic_compare_exchange_n(&m->magic, &(uint64_t){ 0 },
		    METRICS_MAGIC, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
		errno = saved;
		return;
	}
	if (sigbus_prev.sa_flags & SA_SIGINFO &&
	    sigbus_prev.sa_sigaction != NULL) {
		sigbus_prev.sa_sigaction(sig, si, uctx);
		return;
	}
	if (sigbus_prev.sa_handler != SIG_DFL &&
	    sigbus_prev.sa_handler != SIG_IGN) {
		sigbus_prev.sa_handler(sig);
		return;
	}
	/* the default action: returning faults again, and kills */
	(void)sigaction(SIGBUS, &sigbus_prev, NULL);
}

int
metrics_open(const char *path)
{
	struct sigaction sa;
	struct stat st;
	void *p = MAP_FAILED;
	int fd;

	if (path == NULL || path[0] == '\0' || strcmp(path, "none") == 0)
		return -1;
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, METRICS_FILE_MODE)) <
	    0)
		return -1;
	/*
	 * One process at a time sizes and initialises the file: two creating
	 * it at once would each see no magic and zero it, the second wiping
	 * what the first had counted meanwhile.
	 */
	if (flock(fd, LOCK_EX) != 0)
		goto fail;
	if (fstat(fd, &st) != 0 ||
	    ((size_t)st.st_size < sizeof(struct metrics_shm) &&
	        ftruncate(fd, sizeof(struct metrics_shm)) != 0))
		goto fail;
	p = mmap(NULL, sizeof(struct metrics_shm), PROT_READ | PROT_WRITE,
	    MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto fail;
	if (__atomic_load_n(&((struct metrics_shm *)p)->magic,
	        __ATOMIC_ACQUIRE) != METRICS_MAGIC) {
		/* new file, or one of another layout: start from zero */
		memset(p, 0, sizeof(struct metrics_shm));
		__atomic_store_n(&((struct metrics_shm *)p)->magic,
		    METRICS_MAGIC, __ATOMIC_RELEASE);
	}
	if (flock(fd, LOCK_UN) != 0)
		goto fail;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	(void)sigemptyset(&sa.sa_mask);
	if (metrics_fd < 0 && sigaction(SIGBUS, &sa, &sigbus_prev) != 0)
		goto fail;
	if (metrics_fd >= 0)
		(void)close(metrics_fd);
	m = p;
	metrics_fd = fd;
	return 0;
fail:
	if (p != MAP_FAILED)
		(void)munmap(p, sizeof(struct metrics_shm));
	(void)close(fd);
	return -1;
}

static void
add(uint64_t *v, uint64_t n)
{
	(void)__atomic_fetch_add(v, n, __ATOMIC_RELAXED);
}

static uint64_t
get(const uint64_t *v)
{
	return __atomic_load_n(v, __ATOMIC_RELAXED);
}

void
metrics_inc(enum metric_counter c)
{
	if ((unsigned)c < MC_COUNT)
		add(&m->counters[c], 1);
}

void
metrics_request(const char *outcome, long long duration_us)
{
	size_t i;

	/* the labels are the table's own strings: pointers match first */
	for (i = 0; i < OUTCOMES - 1; i++)
		if (outcome == outcome_label(i))
			break;
	if (i == OUTCOMES - 1 && outcome != NULL)
		for (i = 0; i < OUTCOMES - 1; i++)
			if (strcmp(outcome, outcome_label(i)) == 0)
				break;
	add(&m->outcomes[i], 1);
	if (duration_us < 0)
		duration_us = 0;
	for (i = 0; i < BUCKETS; i++)
		if (duration_us <= bucket_us[i])
			break;
	add(&m->buckets[i], 1);
	add(&m->sum_us, (uint64_t)duration_us);
	add(&m->count, 1);
}

void
metrics_provider_attempt(enum metrics_attempt a)
{
	if (a < MA_COUNT)
		add(&m->attempts[a], 1);
}

void
metrics_completer_settled(const char *outcome)
{
	size_t i;

	for (i = 0; i < SETTLED_LABELS; i++)
		if (strcmp(outcome, settled_labels[i]) == 0) {
			add(&m->settled[i], 1);
			return;
		}
}

void
metrics_unknown_outstanding(long long n)
{
	__atomic_store_n(&m->unknown_outstanding, (uint64_t)(n < 0 ? 0 : n),
	    __ATOMIC_RELAXED);
}

void
metrics_webhook_event(const char *type, const char *result)
{
	size_t t, r;

	for (t = 0; t < WEBHOOK_TYPES - 1; t++)
		if (type != NULL && strcmp(type, webhook_types[t]) == 0)
			break;
	for (r = 0; r < WEBHOOK_RESULTS; r++)
		if (strcmp(result, metrics_webhook_results[r]) == 0) {
			add(&m->webhook[t][r], 1);
			return;
		}
}

void
metrics_unknown_oldest_age(long long age_s)
{
	__atomic_store_n(&m->unknown_oldest_age_s,
	    (int64_t)(age_s < -1 ? -1 : age_s), __ATOMIC_RELAXED);
}

/* Appends printf output to buf; returns -1 once it no longer fits. */
static int emit(char *buf, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
emit(char *buf, size_t *off, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*off >= RENDER_MAX)
		return -1;
	va_start(ap, fmt);
	n = vsnprintf(buf + *off, RENDER_MAX - *off, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= RENDER_MAX - *off) {
		*off = RENDER_MAX;
		return -1;
	}
	*off += (size_t)n;
	return 0;
}

char *
metrics_render(size_t *len)
{
	char *buf;
	size_t off = 0, i, j;
	uint64_t cum = 0;
	int64_t age;
	int rc = 0;

	if ((buf = malloc(RENDER_MAX)) == NULL)
		return NULL;
	rc |= emit(buf, &off,
	    "# HELP charge_requests_total Requests by outcome\n"
	    "# TYPE charge_requests_total counter\n");
	for (i = 0; i < OUTCOMES; i++)
		rc |= emit(buf, &off,
		    "charge_requests_total{outcome=\"%s\"} %llu\n",
		    outcome_label(i), (unsigned long long)get(&m->outcomes[i]));
	for (i = 0; i < MC_COUNT; i++)
		rc |= emit(buf, &off,
		    "# HELP %s %s\n# TYPE %s counter\n%s %llu\n",
		    counter_names[i][0], counter_names[i][1],
		    counter_names[i][0], counter_names[i][0],
		    (unsigned long long)get(&m->counters[i]));
	rc |= emit(buf, &off,
	    "# HELP charge_provider_attempts_total Attempts of the HTTP provider by class\n"
	    "# TYPE charge_provider_attempts_total counter\n");
	for (i = 0; i < ATTEMPT_LABELS; i++)
		rc |= emit(buf, &off,
		    "charge_provider_attempts_total{class=\"%s\"} %llu\n",
		    metrics_attempt_labels[i],
		    (unsigned long long)get(&m->attempts[i]));
	rc |= emit(buf, &off,
	    "# HELP charge_completer_settled_total Unknown outcomes the completer settled\n"
	    "# TYPE charge_completer_settled_total counter\n");
	for (i = 0; i < SETTLED_LABELS; i++)
		rc |= emit(buf, &off,
		    "charge_completer_settled_total{outcome=\"%s\"} %llu\n",
		    settled_labels[i], (unsigned long long)get(&m->settled[i]));
	rc |= emit(buf, &off,
	    "# HELP charge_unknown_outstanding Records whose outcome is unknown (as the completer last counted)\n"
	    "# TYPE charge_unknown_outstanding gauge\n"
	    "charge_unknown_outstanding %llu\n",
	    (unsigned long long)get(&m->unknown_outstanding));
	rc |= emit(buf, &off,
	    "# HELP charge_unknown_oldest_age_seconds How long the record unknown the longest has been unknown (from the index when scraped)\n"
	    "# TYPE charge_unknown_oldest_age_seconds gauge\n");
	if ((age = __atomic_load_n(&m->unknown_oldest_age_s,
	         __ATOMIC_RELAXED)) >= 0)
		rc |= emit(buf, &off,
		    "charge_unknown_oldest_age_seconds %lld\n", (long long)age);
	rc |= emit(buf, &off,
	    "# HELP charge_webhook_events_total Events of the provider's webhook route by type and result\n"
	    "# TYPE charge_webhook_events_total counter\n");
	for (i = 0; i < WEBHOOK_TYPES; i++)
		for (j = 0; j < WEBHOOK_RESULTS; j++)
			rc |= emit(buf, &off,
			    "charge_webhook_events_total{type=\"%s\",result=\"%s\"} %llu\n",
			    webhook_types[i], metrics_webhook_results[j],
			    (unsigned long long)get(&m->webhook[i][j]));
	rc |= emit(buf, &off,
	    "# HELP charge_request_duration_seconds Time to answer a request\n"
	    "# TYPE charge_request_duration_seconds histogram\n");
	for (i = 0; i <= BUCKETS; i++) {
		cum += get(&m->buckets[i]);
		if (i < BUCKETS)
			rc |= emit(buf, &off,
			    "charge_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
			    (double)bucket_us[i] / 1e6,
			    (unsigned long long)cum);
		else
			rc |= emit(buf, &off,
			    "charge_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
			    (unsigned long long)cum);
	}
	rc |= emit(buf, &off,
	    "charge_request_duration_seconds_sum %.6f\n"
	    "charge_request_duration_seconds_count %llu\n",
	    (double)get(&m->sum_us) / 1e6, (unsigned long long)get(&m->count));
	if (rc != 0) {
		free(buf);
		return NULL;
	}
	*len = off;
	return buf;
}
