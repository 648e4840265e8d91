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
    "         [--webhook-max-events N] [--webhook-concurrency N] [--request-log FILE]\n"
    "       charge-provider-sim --help | --version\n"
    "fault names: error, charged_then_500, charged_then_close, charged_then_reset,\n"
    "  charged_then_late, reset, refuse, trickle, rate_limited\n"
    "webhook URLs: http://HOST[:PORT][/PATH] (HOST an IPv4 or [IPv6] address or\n"
    "  localhost) or unix:SOCKET[:/PATH]\n";

static const char too_many_secrets[] =
    "charge-provider-sim: --webhook-secret, --webhook-secret-file: at most 4, none empty\n";

enum opt {
	OPT_LISTEN = 256,
	OPT_DATA,
	OPT_SECRET,
	OPT_FSYNC,
	OPT_RETENTION,
	OPT_LATENCY,
	OPT_P50,
	OPT_P99,
	OPT_LATE,
	OPT_TRICKLE,
	OPT_FAULT,
	OPT_SEED,
	OPT_IDLE,
	OPT_MAXCONN,
	OPT_MAXKEYS,
	OPT_WH_URL,
	OPT_WH_SECRET,
	OPT_WH_SECRET_FILE,
	OPT_WH_ATTEMPTS,
	OPT_WH_RETRY,
	OPT_WH_RETRY_MAX,
	OPT_WH_TIMEOUT,
	OPT_WH_DROP,
	OPT_WH_DUP,
	OPT_WH_SHUFFLE,
	OPT_WH_SHUFFLE_MS,
	OPT_WH_MAX_EVENTS,
	OPT_WH_CONCURRENCY,
	OPT_REQUEST_LOG,
	OPT_VERSION,
	OPT_HELP,
};

static const struct option options[] = {
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "data", required_argument, NULL, OPT_DATA },
	{ "secret-key", required_argument, NULL, OPT_SECRET },
	{ "fsync", required_argument, NULL, OPT_FSYNC },
	{ "retention-s", required_argument, NULL, OPT_RETENTION },
	{ "latency-ms", required_argument, NULL, OPT_LATENCY },
	{ "latency-p50-ms", required_argument, NULL, OPT_P50 },
	{ "latency-p99-ms", required_argument, NULL, OPT_P99 },
	{ "late-ms", required_argument, NULL, OPT_LATE },
	{ "trickle-ms", required_argument, NULL, OPT_TRICKLE },
	{ "fault-rate", required_argument, NULL, OPT_FAULT },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "idle-timeout-s", required_argument, NULL, OPT_IDLE },
	{ "max-connections", required_argument, NULL, OPT_MAXCONN },
	{ "max-keys", required_argument, NULL, OPT_MAXKEYS },
	{ "webhook-url", required_argument, NULL, OPT_WH_URL },
	{ "webhook-secret", required_argument, NULL, OPT_WH_SECRET },
	{ "webhook-secret-file", required_argument, NULL, OPT_WH_SECRET_FILE },
	{ "webhook-attempts", required_argument, NULL, OPT_WH_ATTEMPTS },
	{ "webhook-retry-ms", required_argument, NULL, OPT_WH_RETRY },
	{ "webhook-retry-max-ms", required_argument, NULL, OPT_WH_RETRY_MAX },
	{ "webhook-timeout-ms", required_argument, NULL, OPT_WH_TIMEOUT },
	{ "webhook-drop-rate", required_argument, NULL, OPT_WH_DROP },
	{ "webhook-dup-rate", required_argument, NULL, OPT_WH_DUP },
	{ "webhook-shuffle-rate", required_argument, NULL, OPT_WH_SHUFFLE },
	{ "webhook-shuffle-ms", required_argument, NULL, OPT_WH_SHUFFLE_MS },
	{ "webhook-max-events", required_argument, NULL, OPT_WH_MAX_EVENTS },
	{ "webhook-concurrency", required_argument, NULL, OPT_WH_CONCURRENCY },
	{ "request-log", required_argument, NULL, OPT_REQUEST_LOG },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "help", no_argument, NULL, OPT_HELP },
	{ NULL, 0, NULL, 0 },
};

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

int
main(int argc, char **argv)
{
	static struct sim_api_config acfg;
	static struct sim_server_config scfg;
	static struct sim_store store;
	static struct sim_api api;
	static struct sim_webhook_config wcfg;
	static char secret_files[SIM_MAX_WEBHOOK_SECRETS][256];
	const char *data = NULL;
	enum sim_fsync fsync_mode = SIM_FSYNC_BATCH;
	unsigned long retention = SIM_DEFAULT_RETENTION_S, v,
	              max_keys = SIM_DEFAULT_MAX_KEYS;
	double sum = 0;
	char err[512];
	size_t i;
	int o, f, rc;

	scfg.request_log_fd = -1;
	scfg.late_ms = SIM_DEFAULT_LATE_MS;
	scfg.trickle_ms = SIM_DEFAULT_TRICKLE_MS;
	scfg.idle_timeout_s = SIM_DEFAULT_IDLE_TIMEOUT_S;
	scfg.max_connections = SIM_DEFAULT_MAX_CONNECTIONS;
	acfg.seed = SIM_DEFAULT_SEED;
	wcfg.attempts = SIM_DEFAULT_WEBHOOK_ATTEMPTS;
	wcfg.retry_ms = SIM_DEFAULT_WEBHOOK_RETRY_MS;
	wcfg.retry_max_ms = SIM_DEFAULT_WEBHOOK_RETRY_MAX_MS;
	wcfg.timeout_ms = SIM_DEFAULT_WEBHOOK_TIMEOUT_MS;
	wcfg.shuffle_ms = SIM_DEFAULT_WEBHOOK_SHUFFLE_MS;
	wcfg.max_events = SIM_DEFAULT_WEBHOOK_MAX_EVENTS;
	wcfg.concurrency = SIM_DEFAULT_WEBHOOK_CONCURRENCY;
	while ((o = getopt_long(argc, argv, "", options, NULL)) != -1) {
		const char *name = o >= OPT_LISTEN && o <= OPT_HELP
		    ? options[o - OPT_LISTEN].name
		    : "?";
		bool ok = true;

		switch (o) {
		case OPT_LISTEN: scfg.listen = optarg; break;
		case OPT_DATA: data = optarg; break;
		case OPT_SECRET:
			if (acfg.n_secrets == SIM_MAX_SECRET_KEYS ||
			    optarg[0] == '\0') {
				fprintf(stderr,
				    "charge-provider-sim: --secret-key: at most 16, none empty\n");
				return EXIT_USAGE;
			}
			acfg.secrets[acfg.n_secrets++] = optarg;
			break;
		case OPT_FSYNC:
			if (strcmp(optarg, "always") == 0)
				fsync_mode = SIM_FSYNC_ALWAYS;
			else if (strcmp(optarg, "batch") == 0)
				fsync_mode = SIM_FSYNC_BATCH;
			else if (strcmp(optarg, "never") == 0)
				fsync_mode = SIM_FSYNC_NEVER;
			else {
				fprintf(stderr,
				    "charge-provider-sim: --fsync %s: not always, batch or never\n",
				    optarg);
				return EXIT_USAGE;
			}
			break;
		case OPT_RETENTION:
			ok =
			    parse_ulong(name, optarg, 1, 315360000, &retention);
			break;
		case OPT_LATENCY:
			ok = parse_ulong(name, optarg, 0, SIM_MAX_LATENCY_MS,
			    &v);
			acfg.latency_ms = (unsigned)v;
			break;
		case OPT_P50:
			ok = parse_ulong(name, optarg, 1, SIM_MAX_LATENCY_MS,
			    &v);
			acfg.latency_p50_ms = (unsigned)v;
			break;
		case OPT_P99:
			ok = parse_ulong(name, optarg, 1, SIM_MAX_LATENCY_MS,
			    &v);
			acfg.latency_p99_ms = (unsigned)v;
			break;
		case OPT_LATE:
			ok = parse_ulong(name, optarg, 0, SIM_MAX_LATENCY_MS,
			    &v);
			scfg.late_ms = (unsigned)v;
			break;
		case OPT_TRICKLE:
			ok = parse_ulong(name, optarg, 0, 60000, &v);
			scfg.trickle_ms = (unsigned)v;
			break;
		case OPT_FAULT: ok = parse_fault(optarg, &acfg); break;
		case OPT_SEED:
			ok = parse_ulong(name, optarg, 0, ULONG_MAX, &v);
			acfg.seed = v;
			break;
		case OPT_IDLE:
			ok = parse_ulong(name, optarg, 1, 86400, &v);
			scfg.idle_timeout_s = (unsigned)v;
			break;
		case OPT_MAXCONN:
			ok = parse_ulong(name, optarg, 1, 1000000, &v);
			scfg.max_connections = v;
			break;
		case OPT_MAXKEYS:
			ok = parse_ulong(name, optarg, 1, 100000000, &max_keys);
			break;
		case OPT_WH_URL:
			if (wcfg.n_urls == SIM_MAX_WEBHOOK_URLS) {
				fprintf(stderr,
				    "charge-provider-sim: --webhook-url: at most 8\n");
				return EXIT_USAGE;
			}
			if (!sim_webhook_url_check(optarg, err, sizeof(err))) {
				fprintf(stderr,
				    "charge-provider-sim: --webhook-url %s\n",
				    err);
				return EXIT_USAGE;
			}
			wcfg.urls[wcfg.n_urls++] = optarg;
			break;
		case OPT_WH_SECRET:
			if (wcfg.n_secrets == SIM_MAX_WEBHOOK_SECRETS ||
			    optarg[0] == '\0') {
				fputs(too_many_secrets, stderr);
				return EXIT_USAGE;
			}
			wcfg.secrets[wcfg.n_secrets++] = optarg;
			break;
		case OPT_WH_SECRET_FILE:
			if (wcfg.n_secrets == SIM_MAX_WEBHOOK_SECRETS) {
				fputs(too_many_secrets, stderr);
				return EXIT_USAGE;
			}
			if (!read_secret_file(optarg,
			        secret_files[wcfg.n_secrets],
			        sizeof(secret_files[0])))
				return EXIT_USAGE;
			wcfg.secrets[wcfg.n_secrets] =
			    secret_files[wcfg.n_secrets];
			wcfg.n_secrets++;
			break;
		case OPT_WH_ATTEMPTS:
			ok = parse_ulong(name, optarg, 1, 100, &v);
			wcfg.attempts = (unsigned)v;
			break;
		case OPT_WH_RETRY:
			ok = parse_ulong(name, optarg, 1, SIM_MAX_LATENCY_MS,
			    &v);
			wcfg.retry_ms = (unsigned)v;
			break;
		case OPT_WH_RETRY_MAX:
			ok = parse_ulong(name, optarg, 1, SIM_MAX_LATENCY_MS,
			    &v);
			wcfg.retry_max_ms = (unsigned)v;
			break;
		case OPT_WH_TIMEOUT:
			ok = parse_ulong(name, optarg, 1, 600000, &v);
			wcfg.timeout_ms = (unsigned)v;
			break;
		case OPT_WH_DROP:
			ok = parse_rate(name, optarg, &wcfg.drop_rate);
			break;
		case OPT_WH_DUP:
			ok = parse_rate(name, optarg, &wcfg.dup_rate);
			break;
		case OPT_WH_SHUFFLE:
			ok = parse_rate(name, optarg, &wcfg.shuffle_rate);
			break;
		case OPT_WH_SHUFFLE_MS:
			ok = parse_ulong(name, optarg, 1, SIM_MAX_LATENCY_MS,
			    &v);
			wcfg.shuffle_ms = (unsigned)v;
			break;
		case OPT_WH_MAX_EVENTS:
			ok = parse_ulong(name, optarg, 1, 10000000, &v);
			wcfg.max_events = v;
			break;
		case OPT_WH_CONCURRENCY:
			ok = parse_ulong(name, optarg, 1, 10000, &v);
			wcfg.concurrency = v;
			break;
		case OPT_REQUEST_LOG:
			scfg.request_log_fd = open(optarg,
			    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
			if (scfg.request_log_fd < 0) {
				fprintf(stderr,
				    "charge-provider-sim: --request-log %s: %s\n",
				    optarg, strerror(errno));
				return EXIT_USAGE;
			}
			break;
		case OPT_VERSION:
			printf("charge-provider-sim %s\n", CHARGE_VERSION);
			return 0;
		case OPT_HELP: fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return EXIT_USAGE;
		}
		if (!ok)
			return EXIT_USAGE;
	}
	if (optind < argc || scfg.listen == NULL || data == NULL) {
		fputs(usage, stderr);
		return EXIT_USAGE;
	}
	if ((acfg.latency_p50_ms == 0) != (acfg.latency_p99_ms == 0) ||
	    acfg.latency_p99_ms < acfg.latency_p50_ms) {
		fprintf(stderr,
		    "charge-provider-sim: --latency-p50-ms and --latency-p99-ms go together, p50 <= p99\n");
		return EXIT_USAGE;
	}
	if ((wcfg.n_urls > 0) != (wcfg.n_secrets > 0)) {
		fprintf(stderr,
		    "charge-provider-sim: --webhook-url and --webhook-secret go together\n");
		return EXIT_USAGE;
	}
	if (wcfg.retry_max_ms < wcfg.retry_ms) {
		fprintf(stderr,
		    "charge-provider-sim: --webhook-retry-max-ms is below --webhook-retry-ms\n");
		return EXIT_USAGE;
	}
	wcfg.seed = acfg.seed;
	if (wcfg.n_urls > 0)
		scfg.webhooks = &wcfg;
	for (f = 0; f < SIM_FAULT_COUNT; f++)
		if (f != SIM_FAULT_REFUSE)
			sum += acfg.rates[f];
	if (sum > 1.0 + 1e-9) {
		fprintf(stderr,
		    "charge-provider-sim: the --fault-rate probabilities (refuse aside) add up to more than 1\n");
		return EXIT_USAGE;
	}
	/* a write to a connection the client has reset is an error to handle
	 * (EPIPE), not a reason to die */
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
		perror("charge-provider-sim: signal");
		return 1;
	}
	if (acfg.n_secrets == 0)
		acfg.secrets[acfg.n_secrets++] = SIM_DEFAULT_SECRET_KEY;
	for (i = 0; i < acfg.n_secrets; i++)
		acfg.scopes[i] =
		    sim_store_scope(acfg.secrets[i], strlen(acfg.secrets[i]));
	if (sim_store_open(&store, data, fsync_mode, (int64_t)retention,
	        max_keys, (int64_t)time(NULL), err, sizeof(err)) != 0) {
		fprintf(stderr, "charge-provider-sim: --data %s\n", err);
		sim_store_close(&store);
		return 1;
	}
	sim_api_init(&api, &store, &acfg);
	rc = sim_server_run(&scfg, &api, &store);
	sim_store_close(&store);
	return rc == 0 ? 0 : 1;
}
