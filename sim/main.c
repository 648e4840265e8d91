/*
 * main.c - charge-provider-sim: a Stripe-compatible payment provider
 * simulator (a v1 subset) for testing and demonstrating charge against a
 * real network peer. The command line, then the store, the rules and the
 * server; see docs/provider-sim.md and charge-provider-sim(8).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "buf.h"
#include "defaults.h"
#include "server.h"
#include "store.h"
#include "webhook.h"

#ifndef CHARGE_VERSION
#define CHARGE_VERSION "0"
#endif

#define EXIT_USAGE 2

static const char usage[] =
    "usage: charge-provider-sim --listen HOST:PORT|[V6]:PORT|unix:PATH --data FILE\n"
    "         [--secret-key KEY]... [--fsync always|batch|never] [--retention-s N]\n"
    "         [--latency-ms N | --latency-p50-ms N --latency-p99-ms N]\n"
    "         [--late-ms N] [--trickle-ms N] [--fault-rate NAME=P]... [--seed N]\n"
    "         [--idle-timeout-s N] [--max-connections N] [--max-keys N]\n"
    "         [--webhook-url URL]... [--webhook-secret SECRET | --webhook-secret-file FILE]...\n"
    "         [--webhook-attempts N] [--webhook-retry-ms N] [--webhook-retry-max-ms N]\n"
    "         [--webhook-timeout-ms N] [--webhook-drop-rate P] [--webhook-dup-rate P]\n"
    "         [--webhook-shuffle-rate P] [--webhook-shuffle-ms N]\n"
    "         [--webhook-max-events N] [--webhook-concurrency N]\n"
    "         [--clock-offset-s N] [--slow-rate P] [--slow-ms N] [--saved-500-rate P]\n"
    "         [--params-error-rate P] [--search-lag-ms N] [--busy-per-s N]\n"
    "         [--foreign-rate P] [--bare-402-rate P] [--request-log FILE]\n"
    "       charge-provider-sim --help | --version\n"
    "fault names: error, charged_then_500, charged_then_close, charged_then_reset,\n"
    "  charged_then_late, reset, refuse, trickle, rate_limited\n"
    "webhook URLs: http://HOST[:PORT][/PATH] (HOST an IPv4 or [IPv6] address or\n"
    "  localhost) or unix:SOCKET[:/PATH]\n";

static const char too_many_secrets[] =
    "charge-provider-sim: --webhook-secret, --webhook-secret-file: at most 4, none empty\n";

/* An unsigned decimal in [min, max] into *out; false otherwise. */
static bool
parse_ulong(const char *name, const char *s, unsigned long min,
    unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min ||
	    v > max) {
		fprintf(stderr,
		    "charge-provider-sim: --%s %s: not an integer in [%lu, %lu]\n",
		    name, s, min, max);
		return false;
	}
	*out = v;
	return true;
}

/*
 * The first line of path (without its newline) into out[0..outlen): a
 * webhook secret kept out of the command line, which every local user can
 * read. False with a message.
 */
static bool
read_secret_file(const char *path, char *out, size_t outlen)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (f == NULL) {
		fprintf(stderr,
		    "charge-provider-sim: --webhook-secret-file %s: %s\n", path,
		    strerror(errno));
		return false;
	}
	if (fgets(out, (int)outlen, f) == NULL)
		out[0] = '\0';
	fclose(f);
	n = strcspn(out, "\r\n");
	out[n] = '\0';
	if (n == 0 || n == outlen - 1) {
		fprintf(stderr,
		    "charge-provider-sim: --webhook-secret-file %s: the first line must hold the secret (1 to 254 bytes)\n",
		    path);
		return false;
	}
	return true;
}

/* A probability in [0, 1] into *out; false otherwise. */
static bool
parse_rate(const char *name, const char *s, double *out)
{
	char *end;
	double p;

	errno = 0;
	p = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || !(p >= 0 && p <= 1)) {
		fprintf(stderr,
		    "charge-provider-sim: --%s %s: not a probability in [0, 1]\n",
		    name, s);
		return false;
	}
	*out = p;
	return true;
}

static bool
parse_fault(const char *s, struct sim_api_config *cfg)
{
	const char *eq = strchr(s, '=');
	enum sim_fault f;
	char *end;
	double p;

	if (eq == NULL)
		goto bad;
	f = sim_fault_find(s, (size_t)(eq - s));
	if (f == SIM_FAULT_COUNT)
		goto bad;
	errno = 0;
	p = strtod(eq + 1, &end);
	if (errno != 0 || end == eq + 1 || *end != '\0' || !(p >= 0 && p <= 1))
		goto bad;
	cfg->rates[f] = p;
	return true;
bad:
	fprintf(stderr,
	    "charge-provider-sim: --fault-rate %s: not NAME=P with a known NAME and P in [0, 1]\n",
	    s);
	return false;
}

/* Everything the command line sets. */
struct sim_opts {
	struct sim_api_config a;
	struct sim_server_config s;
	struct sim_webhook_config w;
	const char *data;
	enum sim_fsync fsync_mode;
	unsigned long retention;
	unsigned long max_keys;
	char secret_files[SIM_MAX_WEBHOOK_SECRETS][256];
};

/* How a row's argument is read into its field. */
enum opt_kind {
	OPT_UINT,  /* unsigned, in [min, max] */
	OPT_ULONG, /* unsigned long, in [min, max] */
	OPT_SIZE,  /* size_t, in [min, max] */
	OPT_LONG,  /* long, in [-max, max] */
	OPT_RATE,  /* double, a probability */
	OPT_FN,    /* the row's own function */
};

/* An OPT_FN option: -1 to go on, else the exit status. */
typedef int opt_fn(struct sim_opts *o, const char *arg);

/* One option: the table the parsing, the bounds and the fields come from. */
struct opt_row {
	const char *name;
	bool has_arg;
	enum opt_kind kind;
	unsigned long min, max;
	size_t off; /* of the field in struct sim_opts */
	opt_fn *fn;
};

static int
opt_listen(struct sim_opts *o, const char *arg)
{
	o->s.listen = arg;
	return -1;
}

static int
opt_data(struct sim_opts *o, const char *arg)
{
	o->data = arg;
	return -1;
}

static int
opt_request_log(struct sim_opts *o, const char *arg)
{
	o->s.request_log_fd =
	    open(arg, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (o->s.request_log_fd < 0) {
		fprintf(stderr, "charge-provider-sim: --request-log %s: %s\n",
		    arg, strerror(errno));
		return EXIT_USAGE;
	}
	return -1;
}

static int
opt_secret(struct sim_opts *o, const char *arg)
{
	if (o->a.n_secrets == SIM_MAX_SECRET_KEYS || arg[0] == '\0') {
		fprintf(stderr,
		    "charge-provider-sim: --secret-key: at most 16, none empty\n");
		return EXIT_USAGE;
	}
	o->a.secrets[o->a.n_secrets++] = arg;
	return -1;
}

static int
opt_fsync(struct sim_opts *o, const char *arg)
{
	if (strcmp(arg, "always") == 0)
		o->fsync_mode = SIM_FSYNC_ALWAYS;
	else if (strcmp(arg, "batch") == 0)
		o->fsync_mode = SIM_FSYNC_BATCH;
	else if (strcmp(arg, "never") == 0)
		o->fsync_mode = SIM_FSYNC_NEVER;
	else {
		fprintf(stderr,
		    "charge-provider-sim: --fsync %s: not always, batch or never\n",
		    arg);
		return EXIT_USAGE;
	}
	return -1;
}

static int
opt_fault(struct sim_opts *o, const char *arg)
{
	return parse_fault(arg, &o->a) ? -1 : EXIT_USAGE;
}

static int
opt_webhook_url(struct sim_opts *o, const char *arg)
{
	char err[512];

	if (o->w.n_urls == SIM_MAX_WEBHOOK_URLS) {
		fprintf(stderr,
		    "charge-provider-sim: --webhook-url: at most 8\n");
		return EXIT_USAGE;
	}
	if (!sim_webhook_url_check(arg, err, sizeof(err))) {
		fprintf(stderr, "charge-provider-sim: --webhook-url %s\n", err);
		return EXIT_USAGE;
	}
	o->w.urls[o->w.n_urls++] = arg;
	return -1;
}

static int
opt_webhook_secret(struct sim_opts *o, const char *arg)
{
	if (o->w.n_secrets == SIM_MAX_WEBHOOK_SECRETS || arg[0] == '\0') {
		fputs(too_many_secrets, stderr);
		return EXIT_USAGE;
	}
	o->w.secrets[o->w.n_secrets++] = arg;
	return -1;
}

static int
opt_webhook_secret_file(struct sim_opts *o, const char *arg)
{
	if (o->w.n_secrets == SIM_MAX_WEBHOOK_SECRETS) {
		fputs(too_many_secrets, stderr);
		return EXIT_USAGE;
	}
	if (!read_secret_file(arg, o->secret_files[o->w.n_secrets],
	        sizeof(o->secret_files[0])))
		return EXIT_USAGE;
	o->w.secrets[o->w.n_secrets] = o->secret_files[o->w.n_secrets];
	o->w.n_secrets++;
	return -1;
}

static int
opt_version(struct sim_opts *o, const char *arg)
{
	(void)o;
	(void)arg;
	printf("charge-provider-sim %s\n", CHARGE_VERSION);
	return 0;
}

static int
opt_help(struct sim_opts *o, const char *arg)
{
	(void)o;
	(void)arg;
	fputs(usage, stdout);
	return 0;
}

#define F(field) offsetof(struct sim_opts, field)
#define MAX_MS SIM_MAX_LATENCY_MS

static const struct opt_row opt_rows[] = {
	{ "listen", true, OPT_FN, 0, 0, 0, opt_listen },
	{ "data", true, OPT_FN, 0, 0, 0, opt_data },
	{ "secret-key", true, OPT_FN, 0, 0, 0, opt_secret },
	{ "fsync", true, OPT_FN, 0, 0, 0, opt_fsync },
	{ "retention-s", true, OPT_ULONG, 1, 315360000, F(retention), NULL },
	{ "latency-ms", true, OPT_UINT, 0, MAX_MS, F(a.latency_ms), NULL },
	{ "latency-p50-ms", true, OPT_UINT, 1, MAX_MS, F(a.latency_p50_ms),
	    NULL },
	{ "latency-p99-ms", true, OPT_UINT, 1, MAX_MS, F(a.latency_p99_ms),
	    NULL },
	{ "late-ms", true, OPT_UINT, 0, MAX_MS, F(s.late_ms), NULL },
	{ "trickle-ms", true, OPT_UINT, 0, 60000, F(s.trickle_ms), NULL },
	{ "fault-rate", true, OPT_FN, 0, 0, 0, opt_fault },
	{ "seed", true, OPT_ULONG, 0, ULONG_MAX, F(a.seed), NULL },
	{ "idle-timeout-s", true, OPT_UINT, 1, 86400, F(s.idle_timeout_s),
	    NULL },
	{ "max-connections", true, OPT_SIZE, 1, 1000000, F(s.max_connections),
	    NULL },
	{ "max-keys", true, OPT_ULONG, 1, 100000000, F(max_keys), NULL },
	{ "webhook-url", true, OPT_FN, 0, 0, 0, opt_webhook_url },
	{ "webhook-secret", true, OPT_FN, 0, 0, 0, opt_webhook_secret },
	{ "webhook-secret-file", true, OPT_FN, 0, 0, 0,
	    opt_webhook_secret_file },
	{ "webhook-attempts", true, OPT_UINT, 1, 100, F(w.attempts), NULL },
	{ "webhook-retry-ms", true, OPT_UINT, 1, MAX_MS, F(w.retry_ms), NULL },
	{ "webhook-retry-max-ms", true, OPT_UINT, 1, MAX_MS, F(w.retry_max_ms),
	    NULL },
	{ "webhook-timeout-ms", true, OPT_UINT, 1, 600000, F(w.timeout_ms),
	    NULL },
	{ "webhook-drop-rate", true, OPT_RATE, 0, 0, F(w.drop_rate), NULL },
	{ "webhook-dup-rate", true, OPT_RATE, 0, 0, F(w.dup_rate), NULL },
	{ "webhook-shuffle-rate", true, OPT_RATE, 0, 0, F(w.shuffle_rate),
	    NULL },
	{ "webhook-shuffle-ms", true, OPT_UINT, 1, MAX_MS, F(w.shuffle_ms),
	    NULL },
	{ "webhook-max-events", true, OPT_SIZE, 1, 10000000, F(w.max_events),
	    NULL },
	{ "webhook-concurrency", true, OPT_SIZE, 1, 10000, F(w.concurrency),
	    NULL },
	{ "clock-offset-s", true, OPT_LONG, 0, SIM_MAX_CLOCK_OFFSET_S,
	    F(a.world.clock_offset_s), NULL },
	{ "slow-rate", true, OPT_RATE, 0, 0, F(a.world.slow_rate), NULL },
	{ "slow-ms", true, OPT_UINT, 1, MAX_MS, F(a.world.slow_ms), NULL },
	{ "saved-500-rate", true, OPT_RATE, 0, 0, F(a.world.saved_500_rate),
	    NULL },
	{ "params-error-rate", true, OPT_RATE, 0, 0,
	    F(a.world.params_error_rate), NULL },
	{ "search-lag-ms", true, OPT_UINT, 0, MAX_MS, F(a.world.search_lag_ms),
	    NULL },
	{ "busy-per-s", true, OPT_UINT, 0, SIM_MAX_BUSY_PER_S,
	    F(a.world.busy_per_s), NULL },
	{ "foreign-rate", true, OPT_RATE, 0, 0, F(a.world.foreign_rate), NULL },
	{ "bare-402-rate", true, OPT_RATE, 0, 0, F(a.world.bare_402_rate),
	    NULL },
	{ "request-log", true, OPT_FN, 0, 0, 0, opt_request_log },
	{ "version", false, OPT_FN, 0, 0, 0, opt_version },
	{ "help", false, OPT_FN, 0, 0, 0, opt_help },
};

#define N_OPTS (sizeof(opt_rows) / sizeof(opt_rows[0]))

/* A signed decimal in [-max, max] into *out; false otherwise. */
static bool
parse_long(const char *name, const char *s, unsigned long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < -(long)max ||
	    v > (long)max) {
		fprintf(stderr,
		    "charge-provider-sim: --%s %s: not an integer in [-%lu, %lu]\n",
		    name, s, max, max);
		return false;
	}
	*out = v;
	return true;
}

/* The argument of row r into its field of o: -1, or the exit status. */
static int
opt_apply(struct sim_opts *o, const struct opt_row *r, const char *arg)
{
	char *field = (char *)o + r->off;
	unsigned long v = 0;
	bool ok = true;

	switch (r->kind) {
	case OPT_FN: return r->fn(o, arg);
	case OPT_RATE: ok = parse_rate(r->name, arg, (double *)field); break;
	case OPT_LONG:
		ok = parse_long(r->name, arg, r->max, (long *)field);
		break;
	default:
		ok = parse_ulong(r->name, arg, r->min, r->max, &v);
		if (r->kind == OPT_UINT)
			*(unsigned *)field = (unsigned)v;
		else if (r->kind == OPT_SIZE)
			*(size_t *)field = (size_t)v;
		else
			*(unsigned long *)field = v;
		break;
	}
	return ok ? -1 : EXIT_USAGE;
}

static void
opts_defaults(struct sim_opts *o)
{
	o->fsync_mode = SIM_FSYNC_BATCH;
	o->retention = SIM_DEFAULT_RETENTION_S;
	o->max_keys = SIM_DEFAULT_MAX_KEYS;
	o->s.request_log_fd = -1;
	o->s.late_ms = SIM_DEFAULT_LATE_MS;
	o->s.trickle_ms = SIM_DEFAULT_TRICKLE_MS;
	o->s.idle_timeout_s = SIM_DEFAULT_IDLE_TIMEOUT_S;
	o->s.max_connections = SIM_DEFAULT_MAX_CONNECTIONS;
	o->a.seed = SIM_DEFAULT_SEED;
	o->a.world.slow_ms = SIM_DEFAULT_SLOW_MS;
	o->w.attempts = SIM_DEFAULT_WEBHOOK_ATTEMPTS;
	o->w.retry_ms = SIM_DEFAULT_WEBHOOK_RETRY_MS;
	o->w.retry_max_ms = SIM_DEFAULT_WEBHOOK_RETRY_MAX_MS;
	o->w.timeout_ms = SIM_DEFAULT_WEBHOOK_TIMEOUT_MS;
	o->w.shuffle_ms = SIM_DEFAULT_WEBHOOK_SHUFFLE_MS;
	o->w.max_events = SIM_DEFAULT_WEBHOOK_MAX_EVENTS;
	o->w.concurrency = SIM_DEFAULT_WEBHOOK_CONCURRENCY;
}

/* The command line into o: -1 to go on, else the exit status. */
static int
opts_parse(struct sim_opts *o, int argc, char **argv)
{
	struct option lo[N_OPTS + 1];
	size_t i;
	int c, rc;

	for (i = 0; i < N_OPTS; i++) {
		lo[i].name = opt_rows[i].name;
		lo[i].has_arg =
		    opt_rows[i].has_arg ? required_argument : no_argument;
		lo[i].flag = NULL;
		lo[i].val = 256 + (int)i;
	}
	memset(&lo[N_OPTS], 0, sizeof(lo[N_OPTS]));
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c < 256 || c >= 256 + (int)N_OPTS) {
			fputs(usage, stderr);
			return EXIT_USAGE;
		}
		rc = opt_apply(o, &opt_rows[c - 256], optarg);
		if (rc >= 0)
			return rc;
	}
	if (optind < argc || o->s.listen == NULL || o->data == NULL) {
		fputs(usage, stderr);
		return EXIT_USAGE;
	}
	return -1;
}

/* The rules between options; false with a message. */
static bool
opts_check(struct sim_opts *o)
{
	double sum = 0;
	int f;

	if ((o->a.latency_p50_ms == 0) != (o->a.latency_p99_ms == 0) ||
	    o->a.latency_p99_ms < o->a.latency_p50_ms) {
		fprintf(stderr,
		    "charge-provider-sim: --latency-p50-ms and --latency-p99-ms go together, p50 <= p99\n");
		return false;
	}
	if ((o->w.n_urls > 0) != (o->w.n_secrets > 0)) {
		fprintf(stderr,
		    "charge-provider-sim: --webhook-url and --webhook-secret go together\n");
		return false;
	}
	if (o->w.retry_max_ms < o->w.retry_ms) {
		fprintf(stderr,
		    "charge-provider-sim: --webhook-retry-max-ms is below --webhook-retry-ms\n");
		return false;
	}
	for (f = 0; f < SIM_FAULT_COUNT; f++)
		if (f != SIM_FAULT_REFUSE)
			sum += o->a.rates[f];
	if (sum > 1.0 + 1e-9) {
		fprintf(stderr,
		    "charge-provider-sim: the --fault-rate probabilities (refuse aside) add up to more than 1\n");
		return false;
	}
	return true;
}

/* Opens the store and serves until SIGTERM: the exit status. */
static int
run(struct sim_opts *o)
{
	static struct sim_store store;
	static struct sim_api api;
	char err[512];
	size_t i;
	int rc;

	o->w.seed = o->a.seed;
	if (o->w.n_urls > 0)
		o->s.webhooks = &o->w;
	/* a write to a connection the client has reset is an error to handle
	 * (EPIPE), not a reason to die */
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
		perror("charge-provider-sim: signal");
		return 1;
	}
	if (o->a.n_secrets == 0)
		o->a.secrets[o->a.n_secrets++] = SIM_DEFAULT_SECRET_KEY;
	for (i = 0; i < o->a.n_secrets; i++)
		o->a.scopes[i] =
		    sim_store_scope(o->a.secrets[i], strlen(o->a.secrets[i]));
	if (sim_store_open(&store, o->data, o->fsync_mode,
	        (int64_t)o->retention, o->max_keys, (int64_t)time(NULL), err,
	        sizeof(err)) != 0) {
		fprintf(stderr, "charge-provider-sim: --data %s\n", err);
		sim_store_close(&store);
		return 1;
	}
	sim_api_init(&api, &store, &o->a);
	rc = sim_server_run(&o->s, &api, &store);
	sim_store_close(&store);
	return rc == 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
	static struct sim_opts o;
	int rc;

	opts_defaults(&o);
	rc = opts_parse(&o, argc, argv);
	if (rc >= 0)
		return rc;
	if (!opts_check(&o))
		return EXIT_USAGE;
	return run(&o);
}
