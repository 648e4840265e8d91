/*
 * config.h - the configuration: conf/charge.conf ("key = value", '#'
 * comments), each key overridable by CHARGE_<KEY> in the environment.
 * One table of rows (name, type, bounds, default, field) drives parsing,
 * validation and printing. Read-only after start-up.
 */
#ifndef CHARGE_CONFIG_H
#define CHARGE_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "defaults.h"
#include "redis_url.h"

struct config {
	char redis_url[URL_MAX_LEN]; /* as given; relative socket resolved */
	struct redis_target redis;   /* redis_url, parsed when it is set */
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
	int provider_latency_ms;
	int provider_timeout_ms;
	char api_keys_file[PATH_MAX_LEN];
	char provider_ledger[PATH_MAX_LEN];
	char provider_secret[256];
	char
	    metrics_file[PATH_MAX_LEN]; /* "" or "none": per-process counters */
	int log_level;                  /* enum log_level */
	int threads;          /* event loops (threads) per process; 0: cores */
	int io_threads;       /* the worker pool for spill files */
	int max_inflight;     /* requests in progress per process */
	int drain_timeout_ms; /* after SIGTERM, for requests in progress */
	int request_timeout_ms; /* reading params and body */
	char conf_dir
	    [PATH_MAX_LEN]; /* directory of the file; base of relative paths */
};

/* Fills c with the compiled-in defaults; conf_dir is set to base_dir. */
void config_defaults(struct config *c, const char *base_dir);

/*
 * Applies "key = value" lines from text[0..len) to c. Relative paths are
 * resolved against c->conf_dir. Returns 0, or -1 with errstr naming the key
 * (or the line number for syntax errors).
 */
int config_parse_text(struct config *c, const char *text, size_t len,
    char *errstr, size_t errlen);

/* Applies CHARGE_<KEY>=value entries of envp (NULL-terminated). 0 or -1. */
int config_apply_env(struct config *c, char *const *envp, char *errstr,
    size_t errlen);

/*
 * Checks every value and the cross-field rules (e.g. lock_ttl_s must exceed
 * the provider timeout). 0 or -1 with errstr naming the key.
 */
int config_validate(const struct config *c, char *errstr, size_t errlen);

/*
 * Loads defaults, the file at path (CHARGE_CONF, else the compiled-in
 * project path), the environment, then validates. 0 or -1 with errstr.
 */
int config_load(struct config *c, const char *path, char *const *envp,
    char *errstr, size_t errlen);

/* Prints every key and its effective value (secrets masked). */
void config_print(const struct config *c, FILE *f);

/* The configuration file to use: $CHARGE_CONF or the compiled-in default. */
const char *config_default_path(char *const *envp);

#endif
