/*
 * config.h - the configuration: conf/charge.conf ("key = value", '#'
 * comments), each key overridable by CHARGE_<KEY> in the environment.
 * One table of rows (name, type, bounds, default, field) drives parsing,
 * validation and printing. Read-only after start-up. Reading the file and
 * the environment: config_load.h; printing: config_print.h.
 */
#ifndef CHARGE_CONFIG_H
#define CHARGE_CONFIG_H

#include <stddef.h>

#include "defaults.h"
#include "redis_url.h"

struct config {
	char redis_url[URL_MAX_LEN]; /* as given; relative socket resolved */
	char redis_url_file[PATH_MAX_LEN]; /* "": none; else redis_url's file */
	struct redis_target redis; /* redis_url, parsed when it is set */
	int redis_timeout_ms;
	int redis_min_replicas; /* WAIT after a record; 0: none */
	int redis_replica_timeout_ms;
	char key_prefix[KEY_PREFIX_MAX + 1];
	int lock_ttl_s;
	int completed_ttl_s;
	int failed_ttl_s;
	long max_request_bytes;
	int max_wait_s;
	char spill_dir[PATH_MAX_LEN];
	long spill_threshold_bytes;
	int spill_gc_interval_s; /* every process collects this often */
	int provider_latency_ms;
	int provider_timeout_ms;
	char api_keys_file[PATH_MAX_LEN];
	char provider_ledger[PATH_MAX_LEN];
	char provider_secret[256];
	char provider_secret_file[PATH_MAX_LEN];
	char provider_url[URL_MAX_LEN]; /* "": the in-process simulation */
	char provider_api_key[256];
	char provider_api_key_file[PATH_MAX_LEN];
	int provider_connect_timeout_ms;
	int provider_deadline_ms;            /* every attempt of one request */
	char provider_ca_file[PATH_MAX_LEN]; /* "": the system's store */
	int provider_tls_verify;
	char provider_client[16]; /* "native" or "libcurl": no effect */
	int provider_execute_window_s; /* re-send an unknown only this long after its request */
	int provider_execute_max_ms; /* a delivery may execute this long after its send */
	int provider_clock_skew_max_s; /* |provider's clock - ours| that still proves absence */
	int provider_search_lag_s; /* search shows a charge this long after it; 0: no search */
	char completer_schedule_s[256]; /* "1,5,30,90,300,3600" */
	char
	    metrics_file[PATH_MAX_LEN]; /* "" or "none": per-process counters */
	int log_level;                  /* enum log_level */
	char log_format[8];             /* "text" or "json" */
	int threads;          /* event loops (threads) per process; 0: cores */
	int io_threads;       /* the I/O thread pool for spill files */
	int max_inflight;     /* requests in progress per process */
	int drain_timeout_ms; /* after SIGTERM, for requests in progress */
	int request_timeout_ms;        /* reading params and body */
	int keepalive_idle_timeout_ms; /* a kept connection between requests */
	long conn_output_max_bytes;    /* unsent; above it reading pauses */
	long body_memory_max_bytes;    /* bodies held by the process */
	char provider_webhook_path[256];   /* POST: the provider's events */
	char provider_webhook_secret[256]; /* "": the route is off (404) */
	char provider_webhook_secret_file[PATH_MAX_LEN];
	char provider_webhook_secret_previous[256]; /* while rolling it */
	char provider_webhook_secret_previous_file[PATH_MAX_LEN];
	int provider_webhook_tolerance_s; /* Stripe-Signature t, either way */
	char conf_dir
	    [PATH_MAX_LEN]; /* directory of the file; base of relative paths */
};

/* Fills c with the compiled-in defaults; conf_dir is set to base_dir. */
void config_defaults(struct config *cfg, const char *base_dir);

/*
 * Checks every value and the cross-field rules (e.g. lock_ttl_s must exceed
 * the provider timeout). 0 or -1 with errstr naming the key.
 */
int config_validate(const struct config *cfg, char *errstr, size_t errlen);

#define CONFIG_SCHEDULE_MAX 16

/*
 * Parses completer_schedule_s ("1,5,30,300,3600": ages in seconds,
 * strictly increasing, 1 to CONFIG_SCHEDULE_MAX steps, each 1..TTL_S_MAX).
 * The number of steps, or -1 with errstr naming the key.
 */
int config_schedule_parse(const char *text, long steps[CONFIG_SCHEDULE_MAX],
    char *errstr, size_t errlen);

/*
 * How long before its claim lapses a charge's provider call must end, in
 * ms: the longest a record may take to land after it, redis_timeout_ms
 * plus, with redis_min_replicas > 0, the WAIT that follows the record
 * (redis_replica_timeout_ms: redis.h's deadline of a command sent with
 * wait), so that the record lands while the claim holds. Less where
 * lock_ttl_s leaves less room past the provider's own time (config_validate
 * only asks that it exceed that); never negative.
 */
long long config_record_margin_ms(const struct config *cfg);

/*
 * The table itself, for config_load.c and config_print.c: one row per key,
 * in the order --check-config prints them.
 */
enum cfg_type {
	CFG_INT,      /* int field, bounds are values */
	CFG_LONG,     /* long field, bounds are values */
	CFG_STRING,   /* char[] field, bounds are lengths in bytes */
	CFG_PATH,     /* like CFG_STRING; relative: against conf_dir */
	CFG_URL,      /* redis_url: checked by redis_url_parse() */
	CFG_LOG_LEVEL /* int field holding an enum log_level */
};

#define CFG_F_SECRET 0x1  /* masked by config_print */
#define CFG_F_NONE_OK 0x2 /* path: "" and "none" are kept as they are */
#define CFG_F_TOKEN 0x4   /* string: no whitespace */
/*
 * path: "<key>_file", the file that holds the value of the row <key> (a
 * secret): read when set (not "" or "none"), one trailing newline
 * stripped; setting both in one source (the file, or the environment) is
 * an error, a later source's either one replaces an earlier one's.
 */
#define CFG_F_SECRET_FILE 0x8
#define CFG_FILE_SUFFIX "_file"
#define CFG_F_LIVE 0x10 /* a reload (SIGHUP) may change it */

struct cfg_row {
	const char *name;
	enum cfg_type type;
	long min, max;
	long defnum;        /* CFG_INT, CFG_LONG */
	const char *defstr; /* the other types */
	size_t off, size;
	int flags;
};

#define CONF_WHY_MAX 512 /* bytes of one error reason */

extern const struct cfg_row cfg_rows[];
extern const size_t cfg_nrows;
#define CFG_NROWS cfg_nrows

/*
 * The first key that old and new set differently and a reload may not
 * change (no CFG_F_LIVE: the listening address, Redis, provider_secret,
 * threads...), or NULL when every difference may change live.
 */
const char *config_fixed_change(const struct config *old,
    const struct config *new);

/* The row named name[0..n), or NULL. */
const struct cfg_row *cfg_row_find(const char *name, size_t n);

/* The row's field of c: a number (CFG_LONG, else an int), a string. */
long cfg_num(const struct config *cfg, const struct cfg_row *r);
const char *cfg_cstr(const struct config *cfg, const struct cfg_row *r);

/*
 * Sets the row's field of c from v[0..n). 0, or -1 with why holding
 * "key: reason" (secrets are never quoted back).
 */
int cfg_set(struct config *cfg, const struct cfg_row *r, const char *v,
    size_t n, char *why, size_t whylen);

#endif
