/*
 * rc_main.c - charge-reconcile: the options, the configuration the
 * responder reads, one run, the report on stdout (a table, or JSON), the
 * textfile for Prometheus, a progress line on a terminal, the exit status
 * (0 clean, 1 findings, 2 usage, configuration or a source unreadable).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "config_load.h"
#include "digest.h"
#include "provider_sync.h"
#include "rc_run.h"
#include "rc_wire.h"
#include "timefmt.h"
#include "util.h"

extern char **environ;

#define RC_EXIT_CLEAN 0
#define RC_EXIT_FOUND 1
#define RC_EXIT_ERROR 2
#define RC_PROGRESS_EVERY_MS 200 /* redraws of the progress line */
#define RC_PROM_MODE 0644        /* the textfile: node-exporter reads it */
#define RC_PROM_TMP_MAX (PATH_MAX_LEN + 32) /* "<FILE>.<pid>.tmp" */

struct progress {
	int on;
	long long last_ms;
	int drawn;
};

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: charge-reconcile [-c FILE] [--since WHEN] [--until WHEN] [--json]\n"
	    "                        [--prometheus FILE] [--max-charges N] [--max-pages N]\n"
	    "                        [--quiet]\n"
	    "       charge-reconcile --help | --version\n"
	    "\n"
	    "Reads the provider's charges of a window and the records in Redis, and\n"
	    "reports orphans (a charge without its completed record), phantoms (a\n"
	    "completed record whose charge the provider lacks) and duplicates (two\n"
	    "charges for one request). Reads only.\n"
	    "\n"
	    "  -c FILE            the responder's configuration (default $CHARGE_CONF or\n"
	    "                     %s); CHARGE_<KEY> overrides apply\n"
	    "  --since WHEN       start of the window (default 24h): 24h, 90m, 3600s, 7d\n"
	    "                     before now, @UNIX, 2026-11-26T10:00:00Z, 2026-11-26\n"
	    "  --until WHEN       end of the window (default now)\n"
	    "  --json             one JSON object instead of the table\n"
	    "  --prometheus FILE  also write the result as a textfile-collector file\n"
	    "  --max-charges N    charges the window may hold (default %d; 24 bytes each)\n"
	    "  --max-pages N      pages of the provider's list one walk reads (default %d)\n"
	    "  --quiet            no progress line on a terminal\n"
	    "\n"
	    "Exit status: 0 clean, 1 orphans, phantoms or duplicates found, 2 usage,\n"
	    "configuration, or the provider or Redis could not be read. See\n"
	    "charge-reconcile(8).\n",
	    config_default_path(environ), RC_MAX_CHARGES_DEF, RC_MAX_PAGES_DEF);
}

static void
on_progress(const struct rc_report *r, const char *phase, void *arg)
{
	struct progress *p = arg;
	long long now = now_mono_us() / 1000;

	if (!p->on || now - p->last_ms < RC_PROGRESS_EVERY_MS)
		return;
	p->last_ms = now;
	p->drawn = 1;
	fprintf(stderr,
	    "\r\033[Kcharge-reconcile: %s: %lld charges, %lld records scanned, %lld orphans, %lld phantoms",
	    phase, r->n.charges, r->n.records, r->n.orphans, r->n.phantoms);
	(void)fflush(stderr);
}

static void
progress_clear(struct progress *p)
{
	if (p->drawn)
		fprintf(stderr, "\r\033[K");
	p->drawn = 0;
}

/*
 * Writes the textfile to path atomically: a temporary file beside it,
 * created new (O_EXCL | O_NOFOLLOW: a name planted there, a symlink
 * above all, is an error and is never written through, whoever runs
 * this), mode 0644 whatever the umask (node-exporter reads it), fsync,
 * rename over path (a collector never reads half a file). 0 or -1.
 */
static int
prometheus_write(const char *path, const struct rc_report *r, int ok,
    char tmp[RC_PROM_TMP_MAX])
{
	FILE *f = NULL;
	int fd = -1, rc = -1, made = 0;

	if ((size_t)snprintf(tmp, RC_PROM_TMP_MAX, "%s.%ld.tmp", path,
	        (long)getpid()) >= RC_PROM_TMP_MAX) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if ((fd = open(tmp,
	         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	         RC_PROM_MODE)) < 0)
		goto done;
	made = 1;
	if (fchmod(fd, RC_PROM_MODE) != 0 || (f = fdopen(fd, "w")) == NULL)
		goto done;
	fd = -1;
	if (rc_report_prometheus(r, ok, now_wall_ms(), f) != 0 ||
	    fsync(fileno(f)) != 0)
		goto done;
	if (fclose(f) != 0) {
		f = NULL;
		goto done;
	}
	f = NULL;
	if (rename(tmp, path) != 0)
		goto done;
	rc = 0;
done:
	if (f != NULL)
		(void)fclose(f);
	if (fd >= 0)
		(void)close(fd);
	if (rc != 0 && made) {
		int e = errno;

		(void)unlink(tmp);
		errno = e;
	}
	return rc;
}

/* What the command line asks besides struct rc_options. */
struct args {
	const char *conf;
	const char *since;
	const char *until;
	const char *prom;
	int json;
	int quiet;
};

/* Reads the options into a and o: -1 to go on, or the status to exit with
 * (--help, --version: 0; a usage error: 2). */
static int
parse_args(int argc, char **argv, struct args *a, struct rc_options *o)
{
	unsigned long long v;
	int i;

	for (i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(arg, "--help") == 0) {
			usage(stdout);
			return RC_EXIT_CLEAN;
		} else if (strcmp(arg, "--version") == 0) {
			printf("charge-reconcile %s\n", CHARGE_VERSION);
			return RC_EXIT_CLEAN;
		} else if (strcmp(arg, "--json") == 0)
			a->json = 1;
		else if (strcmp(arg, "--quiet") == 0)
			a->quiet = 1;
		else if (val != NULL && strcmp(arg, "-c") == 0)
			a->conf = argv[++i];
		else if (val != NULL && strcmp(arg, "--since") == 0)
			a->since = argv[++i];
		else if (val != NULL && strcmp(arg, "--until") == 0)
			a->until = argv[++i];
		else if (val != NULL && strcmp(arg, "--prometheus") == 0)
			a->prom = argv[++i];
		else if (val != NULL && strcmp(arg, "--max-charges") == 0 &&
		    util_decimal(val, strlen(val), 1000000000ULL, &v) ==
		        UTIL_DEC_OK &&
		    v > 0) {
			o->max_charges = (size_t)v;
			i++;
		} else if (val != NULL && strcmp(arg, "--max-pages") == 0 &&
		    util_decimal(val, strlen(val), 1000000000ULL, &v) ==
		        UTIL_DEC_OK &&
		    v > 0) {
			o->max_pages = (long long)v;
			i++;
		} else {
			usage(stderr);
			return RC_EXIT_ERROR;
		}
	}
	return -1;
}

/* The window into o and the configuration into cfg, with a warning when
 * the window reaches before the records' lifetime; 0, or -1 said. */
static int
window_and_config(const struct args *a, struct rc_options *o,
    struct config *cfg)
{
	char err[512], tb[RFC3339_MS_LEN + 1];
	long long now_s = now_wall_ms() / 1000;

	if (rc_time_parse(a->since, now_s, &o->since_s, err, sizeof(err)) !=
	        0 ||
	    rc_time_parse(a->until, now_s, &o->until_s, err, sizeof(err)) !=
	        0) {
		fprintf(stderr, "charge-reconcile: %s\n", err);
		return -1;
	}
	if (o->since_s > o->until_s) {
		fprintf(stderr,
		    "charge-reconcile: --since is after --until: an empty window\n");
		return -1;
	}
	if (config_load(cfg,
	        a->conf != NULL ? a->conf : config_default_path(environ),
	        environ, err, sizeof(err)) != 0) {
		fprintf(stderr, "charge-reconcile: configuration: %s\n", err);
		return -1;
	}
	if (o->since_s * 1000 < now_wall_ms() - 1000LL * cfg->completed_ttl_s) {
		(void)timefmt_rfc3339_ms(now_wall_ms() -
		        1000LL * cfg->completed_ttl_s,
		    tb, sizeof(tb));
		fprintf(stderr,
		    "charge-reconcile: warning: records of charges before %s have expired (completed_ttl_s %d): such charges are reported as orphans (no-record)\n",
		    tb, cfg->completed_ttl_s);
	}
	return 0;
}

/* One run, its report on stdout and the textfile; the exit status. */
static int
run_and_report(const struct args *a, const struct config *cfg,
    struct rc_options *o)
{
	struct progress pg = { 0, 0, 0 };
	struct rc_report rep;
	char err[512], shown[RC_PRINT_MAX(512)], tmp[RC_PROM_TMP_MAX] = "";
	int rc = RC_EXIT_ERROR, ran = 0;

	pg.on = !a->quiet && isatty(STDERR_FILENO);
	o->progress = on_progress;
	o->progress_arg = &pg;
	(void)rc_report_init(&rep);
	if (rc_run(cfg, o, &rep, err, sizeof(err)) != 0) {
		progress_clear(&pg);
		/* it may quote the provider: escaped like the table */
		fprintf(stderr, "charge-reconcile: %s\n",
		    rc_printable(err, shown, sizeof(shown)));
		goto out;
	}
	ran = 1;
	progress_clear(&pg);
	if ((a->json ? rc_report_json(&rep, stdout)
	             : rc_report_text(&rep, stdout)) != 0) {
		fprintf(stderr, "charge-reconcile: cannot write the report\n");
		goto out;
	}
	rc = rc_report_clean(&rep) ? RC_EXIT_CLEAN : RC_EXIT_FOUND;
out:
	if (a->prom != NULL &&
	    prometheus_write(a->prom, ran ? &rep : NULL, ran, tmp) != 0) {
		fprintf(stderr,
		    "charge-reconcile: --prometheus %s: its temporary file %s: %s\n",
		    a->prom, tmp, strerror(errno));
		rc = RC_EXIT_ERROR;
	}
	rc_report_free(&rep);
	return rc;
}

int
main(int argc, char **argv)
{
	static struct config cfg;
	struct args a = { NULL, "24h", "now", NULL, 0, 0 };
	struct rc_options o = { 0, 0, RC_MAX_CHARGES_DEF, RC_MAX_PAGES_DEF,
		NULL, NULL };
	int rc;

	if ((rc = parse_args(argc, argv, &a, &o)) >= 0)
		return rc;
	if (window_and_config(&a, &o, &cfg) != 0)
		return RC_EXIT_ERROR;
	if (digest_init() != 0 || provider_sync_global_init() != 0) {
		fprintf(stderr,
		    "charge-reconcile: OpenSSL or libcurl cannot be initialised\n");
		return RC_EXIT_ERROR;
	}
	rc = run_and_report(&a, &cfg, &o);
	digest_thread_done();
	provider_sync_global_done();
	return rc;
}
