/*
 * main.c - charge-provider-sim: a Stripe-compatible payment provider
 * simulator (a v1 subset) for testing and demonstrating charge against a
 * real network peer. The command line, then the store, the rules and the
 * server; see docs/provider-sim.md and charge-provider-sim(8).
 */
#include <errno.h>
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
    "       charge-provider-sim --help | --version\n"
    "fault names: error, charged_then_500, charged_then_close, charged_then_reset,\n"
    "  charged_then_late, reset, refuse, trickle, rate_limited\n";

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
	const char *data = NULL;
	enum sim_fsync fsync_mode = SIM_FSYNC_BATCH;
	unsigned long retention = SIM_DEFAULT_RETENTION_S, v,
	              max_keys = SIM_DEFAULT_MAX_KEYS;
	double sum = 0;
	char err[512];
	size_t i;
	int o, f, rc;

	scfg.late_ms = SIM_DEFAULT_LATE_MS;
	scfg.trickle_ms = SIM_DEFAULT_TRICKLE_MS;
	scfg.idle_timeout_s = SIM_DEFAULT_IDLE_TIMEOUT_S;
	scfg.max_connections = SIM_DEFAULT_MAX_CONNECTIONS;
	acfg.seed = SIM_DEFAULT_SEED;
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
