/*
 * config.c - the configuration as one table of rows. File parsing and
 * CHARGE_<KEY> environment overrides (config_load.c), validation (here) and
 * printing (config_print.c) all walk cfg_rows[]; adding a key means adding a
 * field to struct config and a row. Here too: setting one value within its
 * row's bounds, and the defaults.
 */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "util.h"
#include "log.h"
#include "redis_url.h"

/* Room for a string value: the longest a URL or a path may be. */
#define CFG_VALUE_MAX (URL_MAX_LEN > PATH_MAX_LEN ? URL_MAX_LEN : PATH_MAX_LEN)
#define CONF_ECHO_MAX 48 /* bytes of a bad value quoted back */
#define MS_PER_S 1000L

#define FIELD(f)                                                               \
	.off = offsetof(struct config, f),                                     \
	.size = sizeof(((struct config *)NULL)->f)
#define FIELD_LEN(f) ((long)sizeof(((struct config *)NULL)->f) - 1)

const struct cfg_row cfg_rows[] = {
	{ "redis_url", CFG_URL, 1, FIELD_LEN(redis_url), 0, DEF_REDIS_URL,
	    FIELD(redis_url), 0 },
	/* "<secret>_file": where that key's value is read from (a password in
	 * redis_url); "" or "none": not from a file */
	{ "redis_url_file", CFG_PATH, 0, FIELD_LEN(redis_url_file), 0, "",
	    FIELD(redis_url_file), CFG_F_NONE_OK | CFG_F_SECRET_FILE },
	{ "redis_timeout_ms", CFG_INT, 1, REDIS_TIMEOUT_MS_MAX,
	    DEF_REDIS_TIMEOUT_MS, NULL, FIELD(redis_timeout_ms), 0 },
	{ "redis_min_replicas", CFG_INT, 0, REDIS_MIN_REPLICAS_MAX,
	    DEF_REDIS_MIN_REPLICAS, NULL, FIELD(redis_min_replicas), 0 },
	{ "redis_replica_timeout_ms", CFG_INT, 1, REDIS_REPLICA_TIMEOUT_MS_MAX,
	    DEF_REDIS_REPLICA_TIMEOUT_MS, NULL, FIELD(redis_replica_timeout_ms),
	    0 },
	/* rediss schemes: TLS to every node (struct redis_tls) */
	{ "redis_tls_ca_file", CFG_PATH, 0, FIELD_LEN(redis.tls.ca_file), 0,
	    DEF_REDIS_TLS_CA_FILE, FIELD(redis.tls.ca_file), CFG_F_NONE_OK },
	{ "redis_tls_cert_file", CFG_PATH, 0, FIELD_LEN(redis.tls.cert_file), 0,
	    DEF_REDIS_TLS_CERT_FILE, FIELD(redis.tls.cert_file),
	    CFG_F_NONE_OK },
	{ "redis_tls_key_file", CFG_PATH, 0, FIELD_LEN(redis.tls.key_file), 0,
	    DEF_REDIS_TLS_KEY_FILE, FIELD(redis.tls.key_file), CFG_F_NONE_OK },
	{ "redis_tls_server_name", CFG_STRING, 0,
	    FIELD_LEN(redis.tls.server_name), 0, DEF_REDIS_TLS_SERVER_NAME,
	    FIELD(redis.tls.server_name), CFG_F_TOKEN },
	{ "redis_tls_verify", CFG_INT, 0, 1, DEF_REDIS_TLS_VERIFY, NULL,
	    FIELD(redis.tls.verify), 0 },
	{ "key_prefix", CFG_STRING, 0, KEY_PREFIX_MAX, 0, DEF_KEY_PREFIX,
	    FIELD(key_prefix), CFG_F_TOKEN },
	{ "lock_ttl_s", CFG_INT, 1, TTL_S_MAX, DEF_LOCK_TTL_S, NULL,
	    FIELD(lock_ttl_s), 0 },
	{ "completed_ttl_s", CFG_INT, 1, TTL_S_MAX, DEF_COMPLETED_TTL_S, NULL,
	    FIELD(completed_ttl_s), 0 },
	{ "failed_ttl_s", CFG_INT, 1, TTL_S_MAX, DEF_FAILED_TTL_S, NULL,
	    FIELD(failed_ttl_s), 0 },
	{ "max_request_bytes", CFG_LONG, 1, MAX_REQUEST_BYTES_MAX,
	    DEF_MAX_REQUEST_BYTES, NULL, FIELD(max_request_bytes), CFG_F_LIVE },
	{ "max_wait_s", CFG_INT, 0, MAX_WAIT_S_MAX, DEF_MAX_WAIT_S, NULL,
	    FIELD(max_wait_s), CFG_F_LIVE },
	{ "spill_dir", CFG_PATH, 1, FIELD_LEN(spill_dir), 0, DEF_SPILL_DIR,
	    FIELD(spill_dir), 0 },
	/* Above max_request_bytes it simply never spills. */
	{ "spill_threshold_bytes", CFG_LONG, 0, MAX_REQUEST_BYTES_MAX,
	    DEF_SPILL_THRESHOLD_BYTES, NULL, FIELD(spill_threshold_bytes), 0 },
	{ "spill_gc_interval_s", CFG_INT, 1, SPILL_GC_INTERVAL_S_MAX,
	    DEF_SPILL_GC_INTERVAL_S, NULL, FIELD(spill_gc_interval_s), 0 },
	{ "provider_latency_ms", CFG_INT, 0, PROVIDER_MS_MAX,
	    DEF_PROVIDER_LATENCY_MS, NULL, FIELD(provider_latency_ms), 0 },
	{ "provider_timeout_ms", CFG_INT, 0, PROVIDER_MS_MAX,
	    DEF_PROVIDER_TIMEOUT_MS, NULL, FIELD(provider_timeout_ms), 0 },
	{ "api_keys_file", CFG_PATH, 1, FIELD_LEN(api_keys_file), 0,
	    DEF_API_KEYS_FILE, FIELD(api_keys_file), CFG_F_LIVE },
	{ "provider_ledger", CFG_PATH, 1, FIELD_LEN(provider_ledger), 0,
	    DEF_PROVIDER_LEDGER, FIELD(provider_ledger), 0 },
	{ "provider_secret", CFG_STRING, 1, FIELD_LEN(provider_secret), 0,
	    DEF_PROVIDER_SECRET, FIELD(provider_secret), CFG_F_SECRET },
	{ "provider_secret_file", CFG_PATH, 0, FIELD_LEN(provider_secret_file),
	    0, "", FIELD(provider_secret_file),
	    CFG_F_NONE_OK | CFG_F_SECRET_FILE },
	/* "": the in-process simulation; http://, https:// or unix:/path */
	{ "provider_url", CFG_STRING, 0, FIELD_LEN(provider_url), 0,
	    DEF_PROVIDER_URL, FIELD(provider_url), CFG_F_TOKEN },
	{ "provider_api_key", CFG_STRING, 1, FIELD_LEN(provider_api_key), 0,
	    DEF_PROVIDER_API_KEY, FIELD(provider_api_key),
	    CFG_F_SECRET | CFG_F_TOKEN | CFG_F_LIVE },
	{ "provider_api_key_file", CFG_PATH, 0,
	    FIELD_LEN(provider_api_key_file), 0, "",
	    FIELD(provider_api_key_file),
	    CFG_F_NONE_OK | CFG_F_SECRET_FILE | CFG_F_LIVE },
	{ "provider_connect_timeout_ms", CFG_INT, 1, PROVIDER_MS_MAX,
	    DEF_PROVIDER_CONNECT_TIMEOUT_MS, NULL,
	    FIELD(provider_connect_timeout_ms), 0 },
	{ "provider_deadline_ms", CFG_INT, 1, PROVIDER_MS_MAX,
	    DEF_PROVIDER_DEADLINE_MS, NULL, FIELD(provider_deadline_ms), 0 },
	{ "provider_ca_file", CFG_PATH, 0, FIELD_LEN(provider_ca_file), 0,
	    DEF_PROVIDER_CA_FILE, FIELD(provider_ca_file), CFG_F_NONE_OK },
	{ "provider_tls_verify", CFG_INT, 0, 1, DEF_PROVIDER_TLS_VERIFY, NULL,
	    FIELD(provider_tls_verify), 0 },
	/* no effect (http1.c is the only client): kept so that files load */
	{ "provider_client", CFG_STRING, 1, FIELD_LEN(provider_client), 0,
	    DEF_PROVIDER_CLIENT, FIELD(provider_client), CFG_F_TOKEN },
	{ "provider_execute_window_s", CFG_INT, 1, EXECUTE_WINDOW_S_MAX,
	    DEF_PROVIDER_EXECUTE_WINDOW_S, NULL,
	    FIELD(provider_execute_window_s), 0 },
	{ "provider_execute_max_ms", CFG_INT, 1, PROVIDER_MS_MAX,
	    DEF_PROVIDER_EXECUTE_MAX_MS, NULL, FIELD(provider_execute_max_ms),
	    0 },
	{ "provider_clock_skew_max_s", CFG_INT, 0, CLOCK_SKEW_S_MAX,
	    DEF_PROVIDER_CLOCK_SKEW_MAX_S, NULL,
	    FIELD(provider_clock_skew_max_s), 0 },
	{ "provider_search_lag_s", CFG_INT, 0, SEARCH_LAG_S_MAX,
	    DEF_PROVIDER_SEARCH_LAG_S, NULL, FIELD(provider_search_lag_s), 0 },
	{ "completer_schedule_s", CFG_STRING, 1,
	    FIELD_LEN(completer_schedule_s), 0, DEF_COMPLETER_SCHEDULE_S,
	    FIELD(completer_schedule_s), CFG_F_TOKEN },
	{ "metrics_file", CFG_PATH, 0, FIELD_LEN(metrics_file), 0,
	    DEF_METRICS_FILE, FIELD(metrics_file), CFG_F_NONE_OK },
	{ "log_level", CFG_LOG_LEVEL, LL_ERROR, LL_DEBUG, 0, DEF_LOG_LEVEL,
	    FIELD(log_level), CFG_F_LIVE },
	{ "log_format", CFG_STRING, 1, FIELD_LEN(log_format), 0, DEF_LOG_FORMAT,
	    FIELD(log_format), CFG_F_TOKEN },
	/* 0: one event loop per core */
	{ "threads", CFG_INT, 0, THREADS_MAX, DEF_THREADS, NULL, FIELD(threads),
	    0 },
	{ "io_threads", CFG_INT, 1, IO_THREADS_MAX, DEF_IO_THREADS, NULL,
	    FIELD(io_threads), 0 },
	{ "max_inflight", CFG_INT, 1, MAX_INFLIGHT_MAX, DEF_MAX_INFLIGHT, NULL,
	    FIELD(max_inflight), CFG_F_LIVE },
	{ "drain_timeout_ms", CFG_INT, 0, DRAIN_TIMEOUT_MS_MAX,
	    DEF_DRAIN_TIMEOUT_MS, NULL, FIELD(drain_timeout_ms), CFG_F_LIVE },
	{ "request_timeout_ms", CFG_INT, 1, REQUEST_TIMEOUT_MS_MAX,
	    DEF_REQUEST_TIMEOUT_MS, NULL, FIELD(request_timeout_ms),
	    CFG_F_LIVE },
	{ "keepalive_idle_timeout_ms", CFG_INT, 1,
	    KEEPALIVE_IDLE_TIMEOUT_MS_MAX, DEF_KEEPALIVE_IDLE_TIMEOUT_MS, NULL,
	    FIELD(keepalive_idle_timeout_ms), CFG_F_LIVE },
	{ "conn_output_max_bytes", CFG_LONG, CONN_OUTPUT_MIN_BYTES,
	    CONN_OUTPUT_MAX_BYTES_MAX, DEF_CONN_OUTPUT_MAX_BYTES, NULL,
	    FIELD(conn_output_max_bytes), 0 },
	{ "body_memory_max_bytes", CFG_LONG, 1, BODY_MEMORY_MAX_BYTES_MAX,
	    DEF_BODY_MEMORY_MAX_BYTES, NULL, FIELD(body_memory_max_bytes),
	    CFG_F_LIVE },
	{ "provider_webhook_path", CFG_STRING, 1,
	    FIELD_LEN(provider_webhook_path), 0, DEF_PROVIDER_WEBHOOK_PATH,
	    FIELD(provider_webhook_path), CFG_F_TOKEN },
	/* "": the webhook route is off */
	{ "provider_webhook_secret", CFG_STRING, 0,
	    FIELD_LEN(provider_webhook_secret), 0, DEF_PROVIDER_WEBHOOK_SECRET,
	    FIELD(provider_webhook_secret),
	    CFG_F_SECRET | CFG_F_TOKEN | CFG_F_LIVE },
	{ "provider_webhook_secret_file", CFG_PATH, 0,
	    FIELD_LEN(provider_webhook_secret_file), 0, "",
	    FIELD(provider_webhook_secret_file),
	    CFG_F_NONE_OK | CFG_F_SECRET_FILE | CFG_F_LIVE },
	/* the secret being rolled out of use: its signatures still count */
	{ "provider_webhook_secret_previous", CFG_STRING, 0,
	    FIELD_LEN(provider_webhook_secret_previous), 0,
	    DEF_PROVIDER_WEBHOOK_SECRET,
	    FIELD(provider_webhook_secret_previous),
	    CFG_F_SECRET | CFG_F_TOKEN | CFG_F_LIVE },
	{ "provider_webhook_secret_previous_file", CFG_PATH, 0,
	    FIELD_LEN(provider_webhook_secret_previous_file), 0, "",
	    FIELD(provider_webhook_secret_previous_file),
	    CFG_F_NONE_OK | CFG_F_SECRET_FILE | CFG_F_LIVE },
	{ "provider_webhook_tolerance_s", CFG_INT, 1, WEBHOOK_TOLERANCE_S_MAX,
	    DEF_PROVIDER_WEBHOOK_TOLERANCE_S, NULL,
	    FIELD(provider_webhook_tolerance_s), CFG_F_LIVE },
};

const size_t cfg_nrows = sizeof(cfg_rows) / sizeof(cfg_rows[0]);

const char *
config_fixed_change(const struct config *old, const struct config *new)
{
	const struct cfg_row *r;
	size_t i;

	for (i = 0; i < cfg_nrows; i++) {
		r = &cfg_rows[i];
		if (r->flags & CFG_F_LIVE)
			continue;
		if (r->type == CFG_INT || r->type == CFG_LONG ||
		            r->type == CFG_LOG_LEVEL
		        ? cfg_num(old, r) != cfg_num(new, r)
		        : strcmp(cfg_cstr(old, r), cfg_cstr(new, r)) != 0)
			return r->name;
	}
	return NULL;
}

static int *
cfg_int(struct config *cfg, const struct cfg_row *r)
{
	return (int *)(void *)((char *)cfg + r->off);
}

static long *
cfg_long(struct config *cfg, const struct cfg_row *r)
{
	return (long *)(void *)((char *)cfg + r->off);
}

static char *
cfg_str(struct config *cfg, const struct cfg_row *r)
{
	return (char *)cfg + r->off;
}

const char *
cfg_cstr(const struct config *cfg, const struct cfg_row *r)
{
	return (const char *)cfg + r->off;
}

long
cfg_num(const struct config *cfg, const struct cfg_row *r)
{
	const char *p = (const char *)cfg + r->off;

	if (r->type == CFG_LONG)
		return *(const long *)(const void *)p;
	return *(const int *)(const void *)p;
}

const struct cfg_row *
cfg_row_find(const char *name, size_t n)
{
	size_t i;

	for (i = 0; i < CFG_NROWS; i++)
		if (strlen(cfg_rows[i].name) == n &&
		    memcmp(cfg_rows[i].name, name, n) == 0)
			return &cfg_rows[i];
	return NULL;
}

/*
 * Joins dir and rel into out[outlen]. Leading "./" and "../" of rel are
 * folded into an absolute dir (conf_dir comes from realpath, so this is
 * exact). 0, or -1 when the result does not fit.
 */
static int
cfg_path_resolve(const char *dir, const char *rel, char *out, size_t outlen)
{
	size_t n;
	int r;

	if (rel[0] == '/') {
		n = strlen(rel);
		if (n >= outlen)
			return -1;
		memcpy(out, rel, n + 1);
		return 0;
	}
	n = strlen(dir);
	if (n >= outlen)
		return -1;
	memcpy(out, dir, n + 1);
	while (n > 1 && out[n - 1] == '/')
		out[--n] = '\0';
	for (;;) {
		if (strcmp(rel, ".") == 0)
			rel += 1;
		else if (strncmp(rel, "./", 2) == 0)
			rel += 2;
		else if (out[0] == '/' &&
		    (strcmp(rel, "..") == 0 || strncmp(rel, "../", 3) == 0)) {
			rel += rel[2] == '/' ? 3 : 2;
			while (n > 1 && out[n - 1] != '/')
				n--;
			if (n > 1)
				n--;
			out[n] = '\0';
		} else
			break;
		while (*rel == '/')
			rel++;
	}
	if (*rel == '\0')
		return 0;
	if (n == 0)
		r = snprintf(out, outlen, "%s", rel);
	else
		r = snprintf(out + n, outlen - n, "%s%s",
		    out[n - 1] == '/' ? "" : "/", rel);
	if (r < 0 || (size_t)r >= outlen - n)
		return -1;
	return 0;
}

/*
 * Parses a strictly decimal integer (optional '-', digits only). Returns 0
 * with *out, 1 when it overflows a long (*out saturated), -1 when not a
 * number.
 */
static int
cfg_parse_long(const char *v, size_t n, long *out)
{
	unsigned long long acc;
	int neg = n > 0 && v[0] == '-';
	enum util_dec d;

	d = util_decimal(v + neg, n - (size_t)neg, LONG_MAX, &acc);
	if (d == UTIL_DEC_BAD)
		return -1;
	*out = neg ? -(long)acc : (long)acc;
	return d == UTIL_DEC_OVER;
}

/* Checks a number against the row's bounds; why gets "key: reason". */
static int
cfg_check_num(const struct cfg_row *r, long v, int over, char *why,
    size_t whylen)
{
	if (v < r->min) {
		if (over)
			util_err(why, whylen,
			    "%s: value is below the minimum %ld", r->name,
			    r->min);
		else
			util_err(why, whylen,
			    "%s: %ld is below the minimum %ld", r->name, v,
			    r->min);
		return -1;
	}
	if (v > r->max) {
		if (over)
			util_err(why, whylen,
			    "%s: value is above the maximum %ld", r->name,
			    r->max);
		else
			util_err(why, whylen,
			    "%s: %ld is above the maximum %ld", r->name, v,
			    r->max);
		return -1;
	}
	return 0;
}

/* Checks a string value's length and characters (before resolution). */
static int
cfg_check_chars(const struct cfg_row *r, const char *v, size_t n, char *why,
    size_t whylen)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v[i];

		if (ch < 0x20 || ch == 0x7f) {
			util_err(why, whylen,
			    "%s: contains a control character", r->name);
			return -1;
		}
		if ((r->flags & CFG_F_TOKEN) && ch == ' ') {
			util_err(why, whylen, "%s: must not contain whitespace",
			    r->name);
			return -1;
		}
	}
	return 0;
}

static int
cfg_check_len(const struct cfg_row *r, size_t n, char *why, size_t whylen)
{
	if (n < (size_t)r->min) {
		util_err(why, whylen, "%s: must not be empty", r->name);
		return -1;
	}
	if (n > (size_t)r->max || n >= r->size) {
		util_err(why, whylen,
		    "%s: %zu bytes is more than the maximum %ld", r->name, n,
		    r->max);
		return -1;
	}
	return 0;
}

/*
 * Parses url into *t (setting redis_url fills c->redis, the parsed copy the
 * responder uses; config_validate() only checks). why: "redis_url: reason".
 */
static int
cfg_parse_url(const struct cfg_row *r, const char *url, struct redis_target *t,
    char *why, size_t whylen)
{
	struct redis_target parsed;
	char e[128];
	int on;

	e[0] = '\0';
	if (redis_url_parse(url, &parsed, e, sizeof(e)) != 0) {
		if (e[0] == '\0')
			util_err(why, whylen, "%s: not a valid Redis URL",
			    r->name);
		else if (strncmp(e, r->name, strlen(r->name)) == 0)
			util_err(why, whylen, "%s", e);
		else
			util_err(why, whylen, "%s: %s", r->name, e);
		return -1;
	}
	/* the redis_tls_* keys are kept: the scheme only says whether */
	on = parsed.tls.on;
	parsed.tls = t->tls;
	parsed.tls.on = on;
	*t = parsed;
	return 0;
}

/*
 * A path (buf, *n bytes) resolved against the configuration's directory,
 * and a unix:// URL's relative socket path made absolute (unix:///abs), in
 * place in buf (buflen bytes). 0, or -1 with why.
 */
static int
cfg_resolve(const struct config *cfg, const struct cfg_row *r, char *buf,
    size_t buflen, size_t *n, char *why, size_t whylen)
{
	char res[CFG_VALUE_MAX];

	if (r->type == CFG_PATH &&
	    !((r->flags & CFG_F_NONE_OK) &&
	        (*n == 0 || strcmp(buf, "none") == 0))) {
		if (*n == 0) {
			util_err(why, whylen, "%s: must not be empty", r->name);
			return -1;
		}
		if (cfg_path_resolve(cfg->conf_dir, buf, res, sizeof(res)) !=
		    0) {
			util_err(why, whylen,
			    "%s: resolved path is longer than %ld bytes",
			    r->name, r->max);
			return -1;
		}
		memcpy(buf, res, strlen(res) + 1);
		*n = strlen(buf);
	}
	if (r->type == CFG_URL && strncmp(buf, "unix://", 7) == 0 &&
	    buf[7] != '/') {
		/* A relative socket path is stored resolved: unix:///abs. */
		if (buf[7] == '\0') {
			util_err(why, whylen, "%s: unix:// needs a socket path",
			    r->name);
			return -1;
		}
		if (cfg_path_resolve(cfg->conf_dir, buf + 7, res,
		        sizeof(res)) != 0 ||
		    res[0] != '/' || strlen(res) + 7 >= buflen) {
			util_err(why, whylen,
			    "%s: cannot resolve the socket path against %s",
			    r->name, cfg->conf_dir);
			return -1;
		}
		memcpy(buf + 7, res, strlen(res) + 1);
		*n = strlen(buf);
	}
	return 0;
}

int
cfg_set(struct config *cfg, const struct cfg_row *r, const char *v, size_t n,
    char *why, size_t whylen)
{
	char buf[CFG_VALUE_MAX];
	char echo[CONF_ECHO_MAX];
	long num;
	int over, lvl;

	switch (r->type) {
	case CFG_INT:
	case CFG_LONG:
		over = cfg_parse_long(v, n, &num);
		if (over < 0) {
			(void)log_escape(echo, sizeof(echo), v, n);
			util_err(why, whylen,
			    "%s: '%s' is not a decimal integer", r->name, echo);
			return -1;
		}
		if (cfg_check_num(r, num, over, why, whylen) != 0)
			return -1;
		if (r->type == CFG_INT)
			*cfg_int(cfg, r) = (int)num;
		else
			*cfg_long(cfg, r) = num;
		return 0;
	case CFG_LOG_LEVEL:
		lvl = -1;
		if (n < sizeof(buf)) {
			memcpy(buf, v, n);
			buf[n] = '\0';
			lvl = log_level_parse(buf);
		}
		if (lvl < 0) {
			(void)log_escape(echo, sizeof(echo), v, n);
			util_err(why, whylen,
			    "%s: '%s' is not one of error, warn, info, debug",
			    r->name, echo);
			return -1;
		}
		*cfg_int(cfg, r) = lvl;
		return 0;
	case CFG_STRING:
	case CFG_PATH:
	case CFG_URL: break;
	}

	if (cfg_check_chars(r, v, n, why, whylen) != 0)
		return -1;
	if (n >= sizeof(buf)) {
		util_err(why, whylen,
		    "%s: %zu bytes is more than the maximum %ld", r->name, n,
		    r->max);
		return -1;
	}
	memcpy(buf, v, n);
	buf[n] = '\0';

	if (cfg_resolve(cfg, r, buf, sizeof(buf), &n, why, whylen) != 0)
		return -1;
	if (cfg_check_len(r, n, why, whylen) != 0)
		return -1;
	if (r->type == CFG_URL &&
	    cfg_parse_url(r, buf, &cfg->redis, why, whylen) != 0)
		return -1;
	memcpy(cfg_str(cfg, r), buf, n + 1);
	return 0;
}

int
config_schedule_parse(const char *text, long steps[CONFIG_SCHEDULE_MAX],
    char *errstr, size_t errlen)
{
	const char *p = text, *e;
	unsigned long long v;
	int n = 0;

	for (;;) {
		for (e = p; *e != '\0' && *e != ','; e++)
			;
		if (n == CONFIG_SCHEDULE_MAX) {
			util_err(errstr, errlen,
			    "completer_schedule_s: more than %d steps",
			    CONFIG_SCHEDULE_MAX);
			return -1;
		}
		if (util_decimal(p, (size_t)(e - p), TTL_S_MAX, &v) !=
		        UTIL_DEC_OK ||
		    v < 1 || (n > 0 && (long)v <= steps[n - 1])) {
			util_err(errstr, errlen,
			    "completer_schedule_s: \"%s\" is not a list of increasing ages in seconds (1-%d), such as 1,5,30,300,3600",
			    text, TTL_S_MAX);
			return -1;
		}
		steps[n++] = (long)v;
		if (*e == '\0')
			return n;
		p = e + 1;
	}
}

void
config_defaults(struct config *cfg, const char *base_dir)
{
	char why[CONF_WHY_MAX];
	size_t i, n;

	memset(cfg, 0, sizeof(*cfg));
	if (base_dir == NULL || base_dir[0] == '\0')
		base_dir = ".";
	n = strlen(base_dir);
	if (n < sizeof(cfg->conf_dir))
		memcpy(cfg->conf_dir, base_dir, n + 1);
	for (i = 0; i < CFG_NROWS; i++) {
		const struct cfg_row *r = &cfg_rows[i];

		if (r->type == CFG_INT)
			*cfg_int(cfg, r) = (int)r->defnum;
		else if (r->type == CFG_LONG)
			*cfg_long(cfg, r) = r->defnum;
		else if (cfg_set(cfg, r, r->defstr, strlen(r->defstr), why,
		             sizeof(why)) != 0)
			/* Left empty; config_validate() reports it. */
			cfg_str(cfg, r)[0] = '\0';
	}
}

/*
 * The webhook route's path is its own: absolute, and none of the routes
 * the responder serves already.
 */
static int
cfg_validate_webhook(const struct config *cfg, char *errstr, size_t errlen)
{
	static const char *const taken[] = { "/charge", "/healthz", "/readyz",
		"/metrics" };
	const char *p = cfg->provider_webhook_path;
	size_t i;

	if (p[0] != '/' || strchr(p, '?') != NULL || strchr(p, '#') != NULL) {
		util_err(errstr, errlen,
		    "provider_webhook_path: must be an absolute path (/webhooks/provider), without a query");
		return -1;
	}
	for (i = 0; i < sizeof(taken) / sizeof(taken[0]); i++)
		if (strcmp(p, taken[i]) == 0)
			goto taken;
	if (strncmp(p, "/charge/keys/", 13) == 0)
		goto taken;
	if (cfg->provider_webhook_secret[0] == '\0' &&
	    cfg->provider_webhook_secret_previous[0] != '\0') {
		util_err(errstr, errlen,
		    "provider_webhook_secret_previous: set only together with provider_webhook_secret (the new secret)");
		return -1;
	}
	return 0;
taken:
	util_err(errstr, errlen,
	    "provider_webhook_path: %s is a route of the API already", p);
	return -1;
}

/* The keys whose value is one of a few words. */
static int
cfg_validate_choices(const struct config *cfg, char *errstr, size_t errlen)
{
	if (log_format_parse(cfg->log_format) < 0) {
		util_err(errstr, errlen, "log_format: must be text or json");
		return -1;
	}
	if (strcmp(cfg->provider_client, "native") != 0 &&
	    strcmp(cfg->provider_client, "libcurl") != 0) {
		util_err(errstr, errlen,
		    "provider_client: must be native or libcurl");
		return -1;
	}
	return 0;
}

/* A redis_tls_* file is named ("" and "none" name none). */
static int
cfg_redis_tls_set(const char *f)
{
	return f[0] != '\0' && strcmp(f, "none") != 0;
}

/* A client key needs its certificate. 0, or -1 with errstr. */
static int
cfg_validate_redis_tls(const struct config *cfg, char *errstr, size_t errlen)
{
	if (cfg_redis_tls_set(cfg->redis.tls.key_file) &&
	    !cfg_redis_tls_set(cfg->redis.tls.cert_file)) {
		util_err(errstr, errlen,
		    "redis_tls_key_file: set only together with redis_tls_cert_file");
		return -1;
	}
	return 0;
}

int
config_validate(const struct config *cfg, char *errstr, size_t errlen)
{
	struct redis_target t;
	char why[CONF_WHY_MAX];
	const char *s;
	long long lock_ms, provider_ms;
	long steps[CONFIG_SCHEDULE_MAX];
	size_t i, n;

	memset(&t, 0, sizeof(t));
	for (i = 0; i < CFG_NROWS; i++) {
		const struct cfg_row *r = &cfg_rows[i];

		switch (r->type) {
		case CFG_INT:
		case CFG_LONG:
		case CFG_LOG_LEVEL:
			if (cfg_check_num(r, cfg_num(cfg, r), 0, why,
			        sizeof(why)) != 0)
				goto fail;
			break;
		case CFG_STRING:
		case CFG_PATH:
		case CFG_URL:
			s = cfg_cstr(cfg, r);
			n = strnlen(s, r->size);
			if (cfg_check_len(r, n, why, sizeof(why)) != 0 ||
			    cfg_check_chars(r, s, n, why, sizeof(why)) != 0)
				goto fail;
			if (r->type == CFG_URL &&
			    cfg_parse_url(r, s, &t, why, sizeof(why)) != 0)
				goto fail;
			break;
		}
	}

	if (cfg_validate_redis_tls(cfg, errstr, errlen) != 0)
		return -1;
	/* A lock must outlive the slowest provider call it protects. */
	lock_ms = (long long)cfg->lock_ttl_s * MS_PER_S;
	provider_ms =
	    (long long)cfg->provider_timeout_ms + cfg->provider_latency_ms;
	if (lock_ms <= provider_ms) {
		util_err(errstr, errlen,
		    "lock_ttl_s: %d s must exceed provider_timeout_ms + provider_latency_ms (%lld ms)",
		    cfg->lock_ttl_s, provider_ms);
		return -1;
	}
	if (config_schedule_parse(cfg->completer_schedule_s, steps, errstr,
	        errlen) < 0 ||
	    cfg_validate_webhook(cfg, errstr, errlen) != 0)
		return -1;
	if (cfg_validate_choices(cfg, errstr, errlen) != 0)
		return -1;
	if (cfg->provider_url[0] == '\0')
		return 0;
	if (strncmp(cfg->provider_url, "http://", 7) != 0 &&
	    strncmp(cfg->provider_url, "https://", 8) != 0 &&
	    strncmp(cfg->provider_url, "unix:/", 6) != 0) {
		util_err(errstr, errlen,
		    "provider_url: must be empty (the in-process simulation), http://HOST:PORT, https://HOST:PORT or unix:/path");
		return -1;
	}
	/*
	 * Every attempt of a request, then its record, while the claim holds
	 * the key: the record may take redis_timeout_ms.
	 */
	if ((long long)cfg->provider_deadline_ms + cfg->redis_timeout_ms >=
	    lock_ms) {
		util_err(errstr, errlen,
		    "provider_deadline_ms: %d ms plus redis_timeout_ms (%d ms) must stay below lock_ttl_s (%lld ms)",
		    cfg->provider_deadline_ms, cfg->redis_timeout_ms, lock_ms);
		return -1;
	}
	if (cfg->provider_timeout_ms < 1 ||
	    cfg->provider_timeout_ms > cfg->provider_deadline_ms) {
		util_err(errstr, errlen,
		    "provider_timeout_ms: %d ms must be 1 or more and at most provider_deadline_ms (%d ms) with an HTTP provider",
		    cfg->provider_timeout_ms, cfg->provider_deadline_ms);
		return -1;
	}
	return 0;
fail:
	util_err(errstr, errlen, "%s", why);
	return -1;
}

long long
config_record_margin_ms(const struct config *cfg)
{
	long long record_ms = cfg->redis_timeout_ms, room_ms;

	if (cfg->redis_min_replicas > 0)
		record_ms += cfg->redis_replica_timeout_ms;
	room_ms = (long long)cfg->lock_ttl_s * MS_PER_S -
	    cfg->provider_timeout_ms - cfg->provider_latency_ms;
	if (record_ms > room_ms)
		record_ms = room_ms;
	return record_ms > 0 ? record_ms : 0;
}
