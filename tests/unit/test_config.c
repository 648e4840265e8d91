/*
 * test_config.c - the configuration table: defaults, every type, bounds at
 * their edges, syntax errors, comments, environment overrides, path and
 * redis_url resolution, cross-field checks and masked printing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "config_load.h"
#include "config_print.h"
#include "log.h"

#ifndef CHARGE_DEFAULT_CONF
#define CHARGE_DEFAULT_CONF "conf/charge.conf"
#endif

#define BASE "/srv/charge/conf"

static char tmpdir[] = "/tmp/test_config.XXXXXX";
static char realdir[PATH_MAX];

static int
group_setup(void **state)
{
	(void)state;
	if (mkdtemp(tmpdir) == NULL)
		return -1;
	if (realpath(tmpdir, realdir) == NULL)
		return -1;
	return 0;
}

static const char *const tmpfiles[] = { "a.conf", "b.conf", "c.conf", "secret",
	"secret2", "big", "ctl", "empty", "url" };

static int
group_teardown(void **state)
{
	char p[PATH_MAX];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(tmpfiles) / sizeof(tmpfiles[0]); i++) {
		(void)snprintf(p, sizeof(p), "%s/%s", tmpdir, tmpfiles[i]);
		(void)unlink(p);
	}
	return rmdir(tmpdir);
}

/* Writes text to tmpdir/name and returns the path (static buffer). */
static const char *
write_conf(const char *name, const char *text)
{
	static char p[PATH_MAX];
	FILE *f;

	(void)snprintf(p, sizeof(p), "%s/%s", tmpdir, name);
	f = fopen(p, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	return p;
}

/* Parses text over defaults based at BASE; returns the parse result. */
static int
parse(struct config *c, const char *text, char *err, size_t errlen)
{
	config_defaults(c, BASE);
	err[0] = '\0';
	return config_parse_text(c, text, strlen(text), err, errlen);
}

static void
assert_contains(const char *haystack, const char *needle)
{
	if (strstr(haystack, needle) == NULL)
		fail_msg("\"%s\" does not contain \"%s\"", haystack, needle);
}

static void
test_defaults(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	config_defaults(&c, BASE);
	assert_string_equal(c.conf_dir, BASE);
	assert_string_equal(c.redis_url,
	    "unix:///srv/charge/var/run/redis.sock");
	assert_int_equal(c.redis_timeout_ms, DEF_REDIS_TIMEOUT_MS);
	assert_string_equal(c.key_prefix, DEF_KEY_PREFIX);
	assert_int_equal(c.lock_ttl_s, DEF_LOCK_TTL_S);
	assert_int_equal(c.completed_ttl_s, DEF_COMPLETED_TTL_S);
	assert_int_equal(c.failed_ttl_s, DEF_FAILED_TTL_S);
	assert_int_equal(c.max_request_bytes, DEF_MAX_REQUEST_BYTES);
	assert_int_equal(c.max_wait_s, DEF_MAX_WAIT_S);
	assert_string_equal(c.spill_dir, "/srv/charge/var/spill");
	assert_int_equal(c.spill_threshold_bytes, DEF_SPILL_THRESHOLD_BYTES);
	assert_int_equal(c.provider_latency_ms, DEF_PROVIDER_LATENCY_MS);
	assert_int_equal(c.provider_timeout_ms, DEF_PROVIDER_TIMEOUT_MS);
	assert_string_equal(c.api_keys_file, BASE "/api-keys");
	assert_string_equal(c.provider_ledger,
	    "/srv/charge/var/provider-ledger.log");
	assert_string_equal(c.provider_secret, DEF_PROVIDER_SECRET);
	assert_string_equal(c.metrics_file, "/srv/charge/var/metrics.shm");
	assert_int_equal(c.log_level, LL_INFO);
	assert_int_equal(c.threads, DEF_THREADS);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
}

struct num_key {
	const char *name;
	long min, max;
	size_t off;
	int is_long;
};

#define NUM_INT(f, lo, hi)                                                     \
	{                                                                      \
#f, lo, hi, offsetof(struct config, f), 0                      \
	}
#define NUM_LONG(f, lo, hi)                                                    \
	{                                                                      \
#f, lo, hi, offsetof(struct config, f), 1                      \
	}

static const struct num_key num_keys[] = {
	NUM_INT(redis_timeout_ms, 1, REDIS_TIMEOUT_MS_MAX),
	NUM_INT(lock_ttl_s, 1, TTL_S_MAX),
	NUM_INT(completed_ttl_s, 1, TTL_S_MAX),
	NUM_INT(failed_ttl_s, 1, TTL_S_MAX),
	NUM_LONG(max_request_bytes, 1, MAX_REQUEST_BYTES_MAX),
	NUM_INT(max_wait_s, 0, MAX_WAIT_S_MAX),
	NUM_LONG(spill_threshold_bytes, 0, MAX_REQUEST_BYTES_MAX),
	NUM_INT(spill_gc_interval_s, 1, SPILL_GC_INTERVAL_S_MAX),
	NUM_INT(provider_latency_ms, 0, PROVIDER_MS_MAX),
	NUM_INT(provider_timeout_ms, 0, PROVIDER_MS_MAX),
	NUM_INT(threads, 0, THREADS_MAX),
	NUM_INT(io_threads, 1, IO_THREADS_MAX),
	NUM_INT(max_inflight, 1, MAX_INFLIGHT_MAX),
	NUM_INT(drain_timeout_ms, 0, DRAIN_TIMEOUT_MS_MAX),
};

static long
num_get(const struct config *c, const struct num_key *k)
{
	const char *p = (const char *)c + k->off;

	return k->is_long ? *(const long *)(const void *)p
	                  : *(const int *)(const void *)p;
}

static void
test_int_bounds(void **state)
{
	struct config c;
	char text[128], err[256], want[128];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(num_keys) / sizeof(num_keys[0]); i++) {
		const struct num_key *k = &num_keys[i];

		(void)snprintf(text, sizeof(text), "%s = %ld\n", k->name,
		    k->min - 1);
		assert_int_equal(parse(&c, text, err, sizeof(err)), -1);
		(void)snprintf(want, sizeof(want),
		    "line 1: %s: %ld is below the minimum %ld", k->name,
		    k->min - 1, k->min);
		assert_string_equal(err, want);

		(void)snprintf(text, sizeof(text), "%s = %ld\n", k->name,
		    k->min);
		assert_int_equal(parse(&c, text, err, sizeof(err)), 0);
		assert_int_equal(num_get(&c, k), k->min);

		(void)snprintf(text, sizeof(text), "%s = %ld\n", k->name,
		    k->max);
		assert_int_equal(parse(&c, text, err, sizeof(err)), 0);
		assert_int_equal(num_get(&c, k), k->max);

		(void)snprintf(text, sizeof(text), "\n%s = %ld\n", k->name,
		    k->max + 1);
		assert_int_equal(parse(&c, text, err, sizeof(err)), -1);
		(void)snprintf(want, sizeof(want),
		    "line 2: %s: %ld is above the maximum %ld", k->name,
		    k->max + 1, k->max);
		assert_string_equal(err, want);
	}
}

static void
test_int_syntax(void **state)
{
	static const char *const bad[] = {
		"0x10",
		"+5",
		"5s",
		"1.5",
		"1 2",
		"",
		"-",
		"1e3",
		"\xd9\xa3",
	};
	struct config c;
	char text[128], err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		(void)snprintf(text, sizeof(text), "threads = %s\n", bad[i]);
		assert_int_equal(parse(&c, text, err, sizeof(err)), -1);
		assert_contains(err, "line 1: threads: '");
		assert_contains(err, "is not a decimal integer");
	}
	/* Leading zeros are still decimal. */
	assert_int_equal(parse(&c, "threads = 007\n", err, sizeof(err)), 0);
	assert_int_equal(c.threads, 7);
	/* Overflow of a long is reported as out of bounds, not wrapped. */
	assert_int_equal(parse(&c,
	                     "max_request_bytes = "
	                     "99999999999999999999999999\n",
	                     err, sizeof(err)),
	    -1);
	assert_string_equal(err,
	    "line 1: max_request_bytes: value is above "
	    "the maximum 67108864");
	assert_int_equal(parse(&c, "max_wait_s = -99999999999999999999999\n",
	                     err, sizeof(err)),
	    -1);
	assert_string_equal(err,
	    "line 1: max_wait_s: value is below the "
	    "minimum 0");
	/* 2^32 + 1 must not wrap into a valid int. */
	assert_int_equal(parse(&c, "threads = 4294967297\n", err, sizeof(err)),
	    -1);
	assert_contains(err, "above the maximum 64");
}

static void
test_file_error_format(void **state)
{
	struct config c;
	char err[512], want[512];
	const char *path;

	(void)state;
	path =
	    write_conf("a.conf", "# 1\n#2\n\n\n\n\n\n\n\n\n\nlock_ttl_s = 0\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), -1);
	(void)snprintf(want, sizeof(want),
	    "%s:12: lock_ttl_s: 0 is below the minimum 1", path);
	assert_string_equal(err, want);
}

static void
test_strings(void **state)
{
	struct config c;
	char text[600], err[256], v[300];

	(void)state;
	assert_int_equal(parse(&c, "key_prefix =\n", err, sizeof(err)), 0);
	assert_string_equal(c.key_prefix, "");
	assert_int_equal(parse(&c, "key_prefix = app:v2:\n", err, sizeof(err)),
	    0);
	assert_string_equal(c.key_prefix, "app:v2:");

	memset(v, 'k', KEY_PREFIX_MAX);
	v[KEY_PREFIX_MAX] = '\0';
	(void)snprintf(text, sizeof(text), "key_prefix = %s\n", v);
	assert_int_equal(parse(&c, text, err, sizeof(err)), 0);
	assert_int_equal(strlen(c.key_prefix), KEY_PREFIX_MAX);
	(void)snprintf(text, sizeof(text), "key_prefix = %sk\n", v);
	assert_int_equal(parse(&c, text, err, sizeof(err)), -1);
	assert_string_equal(err,
	    "line 1: key_prefix: 65 bytes is more than "
	    "the maximum 64");

	assert_int_equal(parse(&c, "key_prefix = a b\n", err, sizeof(err)), -1);
	assert_string_equal(err,
	    "line 1: key_prefix: must not contain "
	    "whitespace");
	assert_int_equal(parse(&c, "key_prefix = a\tb\n", err, sizeof(err)),
	    -1);
	assert_contains(err, "key_prefix: contains a control character");
	assert_int_equal(parse(&c, "key_prefix = a\x01\n", err, sizeof(err)),
	    -1);
	assert_contains(err, "key_prefix: contains a control character");

	/* provider_secret: 1..255 bytes, spaces allowed inside. */
	assert_int_equal(parse(&c, "provider_secret =\n", err, sizeof(err)),
	    -1);
	assert_string_equal(err, "line 1: provider_secret: must not be empty");
	assert_int_equal(parse(&c, "provider_secret = two words\n", err,
	                     sizeof(err)),
	    0);
	assert_string_equal(c.provider_secret, "two words");
	memset(v, 's', 255);
	v[255] = '\0';
	(void)snprintf(text, sizeof(text), "provider_secret = %s\n", v);
	assert_int_equal(parse(&c, text, err, sizeof(err)), 0);
	assert_int_equal(strlen(c.provider_secret), 255);
	(void)snprintf(text, sizeof(text), "provider_secret = %ss\n", v);
	assert_int_equal(parse(&c, text, err, sizeof(err)), -1);
	assert_contains(err,
	    "provider_secret: 256 bytes is more than the "
	    "maximum 255");
	/* The secret is never quoted back. */
	assert_null(strstr(err, "sss"));
}

static void
test_paths(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	assert_int_equal(parse(&c,
	                     "spill_dir = spool\n"
	                     "provider_ledger = ../log/ledger\n"
	                     "api_keys_file = /etc/charge/keys\n"
	                     "metrics_file = ./m/../m.shm\n",
	                     err, sizeof(err)),
	    0);
	assert_string_equal(c.spill_dir, BASE "/spool");
	assert_string_equal(c.provider_ledger, "/srv/charge/log/ledger");
	assert_string_equal(c.api_keys_file, "/etc/charge/keys");
	/* Only leading ./ and ../ are folded; the rest is kept verbatim. */
	assert_string_equal(c.metrics_file, BASE "/m/../m.shm");

	assert_int_equal(parse(&c, "spill_dir = ../../../../..\n", err,
	                     sizeof(err)),
	    0);
	assert_string_equal(c.spill_dir, "/");

	assert_int_equal(parse(&c, "spill_dir =\n", err, sizeof(err)), -1);
	assert_string_equal(err, "line 1: spill_dir: must not be empty");

	/* metrics_file: "" and "none" stay as they are. */
	assert_int_equal(parse(&c, "metrics_file = none\n", err, sizeof(err)),
	    0);
	assert_string_equal(c.metrics_file, "none");
	assert_int_equal(parse(&c, "metrics_file =\n", err, sizeof(err)), 0);
	assert_string_equal(c.metrics_file, "");
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
}

static void
test_path_too_long(void **state)
{
	struct config c;
	char text[PATH_MAX_LEN + 32], err[256];
	size_t vlen = PATH_MAX_LEN - 5;

	(void)state;
	/* The value fits on its own, not once joined to conf_dir. */
	memcpy(text, "spill_dir = ", 12);
	memset(text + 12, 'p', vlen);
	text[12 + vlen] = '\0';
	config_defaults(&c, BASE);
	assert_int_equal(config_parse_text(&c, text, strlen(text), err,
	                     sizeof(err)),
	    -1);
	assert_contains(err, "spill_dir: resolved path is longer than");
	/* The same length as an absolute path is fine. */
	text[12] = '/';
	assert_int_equal(config_parse_text(&c, text, strlen(text), err,
	                     sizeof(err)),
	    0);
	assert_int_equal(strlen(c.spill_dir), vlen);
}

static void
test_redis_url(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	assert_int_equal(parse(&c, "redis_url = unix://../run/r.sock\n", err,
	                     sizeof(err)),
	    0);
	assert_string_equal(c.redis_url, "unix:///srv/charge/run/r.sock");
	assert_int_equal(parse(&c, "redis_url = unix://r.sock\n", err,
	                     sizeof(err)),
	    0);
	assert_string_equal(c.redis_url, "unix://" BASE "/r.sock");
	assert_int_equal(parse(&c, "redis_url = unix:///var/run/r.sock\n", err,
	                     sizeof(err)),
	    0);
	assert_string_equal(c.redis_url, "unix:///var/run/r.sock");
	assert_int_equal(parse(&c,
	                     "redis_url = redis://u:p#w@127.0.0.1:6390/2\n",
	                     err, sizeof(err)),
	    0);
	assert_string_equal(c.redis_url, "redis://u:p#w@127.0.0.1:6390/2");

	assert_int_equal(parse(&c, "redis_url = http://127.0.0.1:6390\n", err,
	                     sizeof(err)),
	    -1);
	assert_contains(err, "line 1: redis_url");
	assert_int_equal(parse(&c, "redis_url = unix://\n", err, sizeof(err)),
	    -1);
	assert_contains(err, "line 1: redis_url");
	assert_int_equal(parse(&c, "redis_url =\n", err, sizeof(err)), -1);
	assert_contains(err, "line 1: redis_url");
}

/*
 * The redis_tls_* keys land in the parsed target whichever comes first,
 * they or redis_url; paths resolve against the configuration's directory.
 */
static void
test_redis_tls(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	assert_int_equal(parse(&c,
	                     "redis_tls_ca_file = tls/ca.crt\n"
	                     "redis_url = rediss://u:pw@redis.internal:6380\n"
	                     "redis_tls_server_name = redis.example\n",
	                     err, sizeof(err)),
	    0);
	assert_int_equal(c.redis.tls.on, 1);
	assert_int_equal(c.redis.tls.verify, 1); /* the default */
	assert_string_equal(c.redis.tls.ca_file, BASE "/tls/ca.crt");
	assert_string_equal(c.redis.tls.server_name, "redis.example");
	assert_string_equal(c.redis.tls.cert_file, "");
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	assert_int_equal(parse(&c,
	                     "redis_url = rediss-cluster://h:1,h:2\n"
	                     "redis_tls_cert_file = /etc/c.crt\n"
	                     "redis_tls_key_file = /etc/c.key\n"
	                     "redis_tls_verify = 0\n",
	                     err, sizeof(err)),
	    0);
	assert_int_equal(c.redis.tls.on, 1);
	assert_int_equal(c.redis.tls.verify, 0);
	assert_string_equal(c.redis.tls.key_file, "/etc/c.key");
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	/* a plain URL after them turns TLS off, the keys stay */
	assert_int_equal(parse(&c,
	                     "redis_tls_verify = 0\nredis_url = redis://h:1\n",
	                     err, sizeof(err)),
	    0);
	assert_int_equal(c.redis.tls.on, 0);
	assert_int_equal(c.redis.tls.verify, 0);
	/* edges: verify is 0 or 1; a key needs its certificate */
	assert_int_equal(parse(&c, "redis_tls_verify = 2\n", err, sizeof(err)),
	    -1);
	assert_contains(err, "redis_tls_verify");
	assert_int_equal(parse(&c, "redis_tls_server_name = a b\n", err,
	                     sizeof(err)),
	    -1);
	assert_contains(err, "redis_tls_server_name");
	assert_int_equal(parse(&c, "redis_tls_key_file = /etc/c.key\n", err,
	                     sizeof(err)),
	    0);
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_contains(err, "redis_tls_key_file");
}

static void
test_log_level(void **state)
{
	static const struct {
		const char *s;
		int lvl;
	} ok[] = {
		{ "error", LL_ERROR },
		{ "warn", LL_WARN },
		{ "info", LL_INFO },
		{ "debug", LL_DEBUG },
	};
	struct config c;
	char text[64], err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		(void)snprintf(text, sizeof(text), "log_level = %s\n", ok[i].s);
		assert_int_equal(parse(&c, text, err, sizeof(err)), 0);
		assert_int_equal(c.log_level, ok[i].lvl);
	}
	assert_int_equal(parse(&c, "log_level = DEBUG\n", err, sizeof(err)),
	    -1);
	assert_string_equal(err,
	    "line 1: log_level: 'DEBUG' is not one of "
	    "error, warn, info, debug");
	assert_int_equal(parse(&c, "log_level = verbose\n", err, sizeof(err)),
	    -1);
	assert_int_equal(parse(&c, "log_level =\n", err, sizeof(err)), -1);
}

static void
test_unknown_key(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	assert_int_equal(parse(&c, "threads = 2\n# x\nfoo = 1\n", err,
	                     sizeof(err)),
	    -1);
	assert_string_equal(err, "line 3: unknown key 'foo'");
	/* Keys are case-sensitive. */
	assert_int_equal(parse(&c, "THREADS = 2\n", err, sizeof(err)), -1);
	assert_string_equal(err, "line 1: unknown key 'THREADS'");
	/* Control characters in a key are escaped in the message. */
	assert_int_equal(parse(&c, "a\x1b[2J = 1\n", err, sizeof(err)), -1);
	assert_string_equal(err, "line 1: unknown key 'a\\x1b[2J'");
}

static void
test_syntax_errors(void **state)
{
	static const struct {
		const char *text;
		const char *err;
	} cases[] = {
		{ "threads 2\n", "line 1: expected 'key = value'" },
		{ "\n\n= 2\n", "line 3: expected 'key = value'" },
		{ "threads\n", "line 1: expected 'key = value'" },
		{ "threads = 2\nlock ttl = 3\n",
		    "line 2: expected 'key = value'" },
		{ "threads # = 2\n", "line 1: expected 'key = value'" },
		{ "threads == 2\n",
		    "line 1: threads: '= 2' is not a decimal integer" },
	};
	struct config c;
	char err[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(parse(&c, cases[i].text, err, sizeof(err)),
		    -1);
		assert_string_equal(err, cases[i].err);
	}
	/* A NUL byte inside the text is refused, with its line. */
	config_defaults(&c, BASE);
	assert_int_equal(config_parse_text(&c, "threads = 2\nthr\0eads = 1\n",
	                     25, err, sizeof(err)),
	    -1);
	assert_string_equal(err, "line 2: NUL byte");
}

static void
test_comments(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	assert_int_equal(
	    parse(&c,
	        "# whole line\n"
	        "   # indented comment\n"
	        "\n"
	        "  \t \n"
	        "threads = 3 # trailing comment\n"
	        "max_wait_s=4\t# tab before the comment\n"
	        "provider_secret = ab#cd  # '#' inside a value is kept\n"
	        "key_prefix = # only a comment: empty value\n"
	        "\tlock_ttl_s   =   40   \r\n"
	        "failed_ttl_s = 60",
	        err, sizeof(err)),
	    0);
	assert_int_equal(c.threads, 3);
	assert_int_equal(c.max_wait_s, 4);
	assert_string_equal(c.provider_secret, "ab#cd");
	assert_string_equal(c.key_prefix, "");
	assert_int_equal(c.lock_ttl_s, 40);
	assert_int_equal(c.failed_ttl_s, 60);
	/* An empty text changes nothing. */
	assert_int_equal(parse(&c, "", err, sizeof(err)), 0);
	assert_int_equal(c.threads, DEF_THREADS);
}

static void
test_last_wins(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	assert_int_equal(parse(&c, "threads = 2\nthreads = 5\n", err,
	                     sizeof(err)),
	    0);
	assert_int_equal(c.threads, 5);
}

static void
test_load_and_env(void **state)
{
	struct config c;
	char err[512], want[PATH_MAX + 64];
	char *envp[] = {
		"PATH=/usr/bin",
		"CHARGE_LOCK_TTL_S=50",
		"CHARGE_SPILL_DIR=sp",
		"CHARGE_REDIS_URL=unix://redis.sock",
		"CHARGE_LOG_LEVEL=debug",
		"CHARGE_CONF=/elsewhere.conf", /* the file's path: not a key */
		"XCHARGE_THREADS=9",
		"CHARGE_THREADS", /* no '=': not a variable */
		NULL,
	};
	const char *path;

	(void)state;
	path = write_conf("b.conf",
	    "lock_ttl_s = 40\nthreads = 2\nprovider_ledger = ledger\n");
	assert_int_equal(config_load(&c, path, envp, err, sizeof(err)), 0);
	assert_string_equal(c.conf_dir, realdir);
	assert_int_equal(c.lock_ttl_s, 50); /* env wins over the file */
	assert_int_equal(c.threads, 2);     /* the file, not XCHARGE_ */
	assert_int_equal(c.log_level, LL_DEBUG);
	(void)snprintf(want, sizeof(want), "%s/ledger", realdir);
	assert_string_equal(c.provider_ledger, want);
	(void)snprintf(want, sizeof(want), "%s/sp", realdir);
	assert_string_equal(c.spill_dir, want);
	(void)snprintf(want, sizeof(want), "unix://%s/redis.sock", realdir);
	assert_string_equal(c.redis_url, want);
	(void)snprintf(want, sizeof(want), "%s/api-keys", realdir);
	assert_string_equal(c.api_keys_file, want);
}

static void
test_env_errors(void **state)
{
	struct config c;
	char err[256];
	char *bad_num[] = { "CHARGE_IO_THREADS=0", NULL };
	char *bad_syntax[] = { "CHARGE_MAX_WAIT_S=ten", NULL };
	char *bad_level[] = { "CHARGE_LOG_LEVEL=loud", NULL };
	char *bad_nl[] = { "CHARGE_PROVIDER_SECRET=a\nb", NULL };
	char *empty[] = { NULL };

	(void)state;
	config_defaults(&c, BASE);
	assert_int_equal(config_apply_env(&c, bad_num, err, sizeof(err)), -1);
	assert_string_equal(err,
	    "CHARGE_IO_THREADS: io_threads: 0 is below the "
	    "minimum 1");
	assert_int_equal(config_apply_env(&c, bad_syntax, err, sizeof(err)),
	    -1);
	assert_contains(err, "CHARGE_MAX_WAIT_S");
	assert_int_equal(config_apply_env(&c, bad_level, err, sizeof(err)), -1);
	assert_contains(err, "CHARGE_LOG_LEVEL");
	assert_int_equal(config_apply_env(&c, bad_nl, err, sizeof(err)), -1);
	assert_contains(err, "CHARGE_PROVIDER_SECRET");
	assert_int_equal(config_apply_env(&c, empty, err, sizeof(err)), 0);
	assert_int_equal(config_apply_env(&c, NULL, err, sizeof(err)), 0);
	assert_int_equal(c.threads, DEF_THREADS);

	/* Through config_load the variable is named as well. */
	assert_int_equal(config_load(&c, write_conf("c.conf", "threads = 2\n"),
	                     bad_num, err, sizeof(err)),
	    -1);
	assert_contains(err, "CHARGE_IO_THREADS");
}

/*
 * A CHARGE_ variable that names no key (a typo) refuses the start, as an
 * unknown key in the file does, naming it and the key it resembles.
 */
static void
test_env_unknown(void **state)
{
	struct config c;
	char err[512];
	char *typo[] = { "CHARGE_REDIS_TIMOUT_MS=5", NULL };
	char *extra[] = { "CHARGE_THREADSX=9", NULL };
	char *other[] = { "CHARGE_UNKNOWN_THING=1", NULL };
	char *ctl[] = { "CHARGE_\x1b[2J=1", NULL };

	(void)state;
	config_defaults(&c, BASE);
	assert_int_equal(config_apply_env(&c, typo, err, sizeof(err)), -1);
	assert_string_equal(err,
	    "CHARGE_REDIS_TIMOUT_MS: not a configuration key (did you mean "
	    "CHARGE_REDIS_TIMEOUT_MS?)");
	assert_int_equal(c.redis_timeout_ms, DEF_REDIS_TIMEOUT_MS);
	assert_int_equal(config_apply_env(&c, extra, err, sizeof(err)), -1);
	assert_string_equal(err,
	    "CHARGE_THREADSX: not a configuration key (did you mean "
	    "CHARGE_THREADS?)");
	assert_int_equal(config_apply_env(&c, other, err, sizeof(err)), -1);
	assert_string_equal(err,
	    "CHARGE_UNKNOWN_THING: not a configuration "
	    "key (charge --check-config lists them)");
	assert_int_equal(config_apply_env(&c, ctl, err, sizeof(err)), -1);
	assert_contains(err, "CHARGE_\\x1b[2J: not a configuration key");
	/* through config_load too */
	assert_int_equal(config_load(&c, write_conf("c.conf", "threads = 2\n"),
	                     typo, err, sizeof(err)),
	    -1);
	assert_contains(err, "CHARGE_REDIS_TIMOUT_MS");
}

static void
test_load_missing(void **state)
{
	struct config c;
	char err[512], path[PATH_MAX];

	(void)state;
	(void)snprintf(path, sizeof(path), "%s/missing.conf", tmpdir);
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), -1);
	assert_contains(err, path);
	assert_contains(err, "No such file");
	assert_int_equal(config_load(&c, "/nonexistent-dir/x.conf", NULL, err,
	                     sizeof(err)),
	    -1);
	assert_contains(err, "/nonexistent-dir/x.conf");
	assert_int_equal(config_load(&c, tmpdir, NULL, err, sizeof(err)), -1);
	assert_contains(err, "not a regular file");
}

static void
test_cross_check(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	/* 5 s lock versus 4800 + 200 ms of provider time: not enough. */
	assert_int_equal(parse(&c,
	                     "lock_ttl_s = 5\nprovider_timeout_ms = "
	                     "4800\nprovider_latency_ms = 200\n",
	                     err, sizeof(err)),
	    0);
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_contains(err, "lock_ttl_s");
	assert_contains(err, "5000 ms");
	c.provider_timeout_ms = 4799;
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	/* Defaults pass; the shortest lock fails with the default timeout. */
	config_defaults(&c, BASE);
	c.lock_ttl_s = 5;
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	/* failed_ttl_s may exceed completed_ttl_s. */
	config_defaults(&c, BASE);
	c.failed_ttl_s = 1000;
	c.completed_ttl_s = 10;
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
}

/*
 * The provider's margin before the claim lapses covers the record's whole
 * deadline: with replicas, the WAIT after it too.
 */
static void
test_record_margin(void **state)
{
	struct config c;

	(void)state;
	config_defaults(&c, BASE);
	c.redis_timeout_ms = 1000;
	c.redis_replica_timeout_ms = 700;
	c.redis_min_replicas = 0;
	assert_int_equal(config_record_margin_ms(&c), 1000);
	c.redis_min_replicas = 1;
	assert_int_equal(config_record_margin_ms(&c), 1700);
	/* a lock that leaves less room past the provider's own time */
	c.lock_ttl_s = 6;
	c.provider_timeout_ms = 4500;
	c.provider_latency_ms = 0;
	assert_int_equal(config_record_margin_ms(&c), 1500);
	c.provider_timeout_ms = 6500;
	assert_int_equal(config_record_margin_ms(&c), 0);
}

static void
test_validate_table(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	config_defaults(&c, BASE);
	c.threads = THREADS_MAX + 1;
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_string_equal(err, "threads: 65 is above the maximum 64");
	config_defaults(&c, BASE);
	c.log_level = 7;
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_contains(err, "log_level");
	config_defaults(&c, BASE);
	c.api_keys_file[0] = '\0';
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_string_equal(err, "api_keys_file: must not be empty");
	config_defaults(&c, BASE);
	(void)snprintf(c.redis_url, sizeof(c.redis_url), "ftp://x");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_contains(err, "redis_url");
}

/*
 * The webhook route: off by default; its path is its own; the previous
 * secret only beside a current one; both masked when printed.
 */
static void test_webhook(void **state);

/* config_print() into a malloc'd string the caller frees. */
static char *
print_config(const struct config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	f = open_memstream(&buf, &len);
	assert_non_null(f);
	config_print(c, f);
	assert_int_equal(fclose(f), 0);
	assert_non_null(buf);
	return buf;
}

/*
 * Every secret has its "<key>_file" form (issue 37): the value read from
 * the file, one trailing newline stripped, relative to the file's
 * directory; both in one source is an error; the environment's either one
 * replaces the file's; a missing, oversized or control-bearing file is
 * refused without quoting it; the secret printed masked, its file shown.
 */
static void
test_secret_files(void **state)
{
	struct config c;
	char err[512], text[1024], path2[PATH_MAX], envv[PATH_MAX + 64];
	char big[300], *out;
	const char *path;
	char *envp[] = { envv, NULL };
	size_t i, nfile = 0;

	(void)state;
	/* the table: each secret has one, each names a secret */
	for (i = 0; i < cfg_nrows; i++) {
		const struct cfg_row *r = &cfg_rows[i], *k;
		char name[128];

		if (r->flags & CFG_F_SECRET) {
			(void)snprintf(name, sizeof(name), "%s_file", r->name);
			k = cfg_row_find(name, strlen(name));
			assert_non_null(k);
			assert_true(k->flags & CFG_F_SECRET_FILE);
		}
		if (!(r->flags & CFG_F_SECRET_FILE))
			continue;
		nfile++;
		assert_int_equal(r->type, CFG_PATH);
		k = cfg_row_find(r->name, strlen(r->name) - 5);
		assert_non_null(k);
		assert_true((k->flags & CFG_F_SECRET) || k->type == CFG_URL);
	}
	assert_int_equal(nfile, 5);
	assert_true(cfg_nrows <= 128); /* config_load.c's CONF_ROWS_MAX */

	(void)write_conf("secret", "s3cret-from-file\n");
	(void)snprintf(path2, sizeof(path2), "%s",
	    write_conf("secret2", "key-two\r\n"));
	(void)write_conf("url", "redis://app:pw@127.0.0.1:6390/2");
	path = write_conf("a.conf",
	    "provider_secret_file = secret\n"
	    "provider_api_key_file = secret2\n"
	    "redis_url_file = url\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.provider_secret, "s3cret-from-file");
	assert_string_equal(c.provider_api_key, "key-two");
	assert_string_equal(c.redis_url, "redis://app:pw@127.0.0.1:6390/2");
	assert_int_equal(c.redis.port, 6390);
	(void)snprintf(text, sizeof(text), "%s/secret", realdir);
	assert_string_equal(c.provider_secret_file, text);
	out = print_config(&c);
	assert_null(strstr(out, "s3cret"));
	assert_null(strstr(out, "key-two"));
	assert_contains(out, "provider_secret_file = ");
	free(out);

	/* both in the file: an error naming both */
	path = write_conf("b.conf",
	    "provider_secret = inline\nprovider_secret_file = secret\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), -1);
	assert_string_equal(err,
	    "provider_secret and provider_secret_file are both set: keep one (the value, or the file that holds it)");
	/* both in the environment: the same */
	(void)snprintf(envv, sizeof(envv), "CHARGE_PROVIDER_API_KEY=x");
	{
		char *both[] = { envv, "CHARGE_PROVIDER_API_KEY_FILE=secret",
			NULL };

		path = write_conf("b.conf", "threads = 1\n");
		assert_int_equal(config_load(&c, path, both, err, sizeof(err)),
		    -1);
		assert_contains(err,
		    "provider_api_key and "
		    "provider_api_key_file are both set");
	}
	/* the environment's file over the file's value, and the reverse */
	path = write_conf("b.conf", "provider_secret = inline\n");
	(void)snprintf(envv, sizeof(envv), "CHARGE_PROVIDER_SECRET_FILE=%s",
	    path2);
	assert_int_equal(config_load(&c, path, envp, err, sizeof(err)), 0);
	assert_string_equal(c.provider_secret, "key-two");
	path = write_conf("b.conf", "provider_secret_file = secret\n");
	(void)snprintf(envv, sizeof(envv), "CHARGE_PROVIDER_SECRET=from-env");
	assert_int_equal(config_load(&c, path, envp, err, sizeof(err)), 0);
	assert_string_equal(c.provider_secret, "from-env");
	assert_string_equal(c.provider_secret_file, ""); /* replaced */
	/* "" and "none": not from a file */
	path = write_conf("b.conf",
	    "provider_secret = inline\nprovider_secret_file = none\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.provider_secret, "inline");
	assert_int_equal(parse(&c, "provider_secret_file =\n", err,
	                     sizeof(err)),
	    0);
	assert_string_equal(c.provider_secret, DEF_PROVIDER_SECRET);

	/* refused: missing, empty for a key that needs a value, a control
	 * byte inside, one byte over the field (255 + a newline fits) */
	path = write_conf("b.conf", "provider_secret_file = no-such\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), -1);
	assert_contains(err, "provider_secret_file: ");
	assert_contains(err, "no-such");
	(void)write_conf("empty", "\n");
	path = write_conf("b.conf", "provider_secret_file = empty\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), -1);
	assert_contains(err, "provider_secret: must not be empty");
	(void)write_conf("ctl", "line1\nline2\n");
	path = write_conf("b.conf", "provider_api_key_file = ctl\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), -1);
	assert_contains(err, "provider_api_key: contains a control character");
	assert_null(strstr(err, "line1"));
	memset(big, 'k', sizeof(big));
	big[255] = '\n';
	big[256] = '\0';
	(void)write_conf("big", big);
	path = write_conf("b.conf", "provider_secret_file = big\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), 0);
	assert_int_equal(strlen(c.provider_secret), 255);
	big[255] = 'k';
	big[256] = '\n';
	big[257] = '\0';
	(void)write_conf("big", big);
	path = write_conf("b.conf", "provider_secret_file = big\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), -1);
	assert_contains(err, "provider_secret");
	assert_null(strstr(err, "kkkk"));
	/* a webhook secret from its file turns the route on */
	(void)write_conf("secret", "whsec_abc\n");
	assert_int_equal(parse(&c, "", err, sizeof(err)), 0);
	path = write_conf("b.conf", "provider_webhook_secret_file = secret\n");
	assert_int_equal(config_load(&c, path, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.provider_webhook_secret, "whsec_abc");
}

static void
test_print(void **state)
{
	static const char *const order[] = {
		"redis_url = ",
		"redis_timeout_ms = 1000\n",
		"key_prefix = ",
		"lock_ttl_s = 30\n",
		"completed_ttl_s = 86400\n",
		"failed_ttl_s = 300\n",
		"max_request_bytes = 1048576\n",
		"max_wait_s = 10\n",
		"spill_dir = ",
		"spill_threshold_bytes = ",
		"spill_gc_interval_s = 3600\n",
		"provider_latency_ms = 200\n",
		"provider_timeout_ms = 5000\n",
		"api_keys_file = ",
		"provider_ledger = ",
		"provider_secret = ",
		"metrics_file = ",
		"log_level = warn\n",
		"threads = 0\n",
		"io_threads = 2\n",
		"max_inflight = 16384\n",
		"drain_timeout_ms = 15000\n",
	};
	struct config c, back;
	char err[256], *out, *out2;
	const char *p;
	size_t i;

	(void)state;
	assert_int_equal(parse(&c,
	                     "provider_secret = hunter2-secret\n"
	                     "log_level = warn\n",
	                     err, sizeof(err)),
	    0);
	out = print_config(&c);
	assert_null(strstr(out, "hunter2"));
	assert_contains(out, "\nprovider_secret = ********\n");
	p = "redis_url = unix:///srv/charge/var/run/redis.sock\n";
	assert_int_equal(strncmp(out, p, strlen(p)), 0);
	/* One line per key, in table order. */
	for (p = out, i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		p = strstr(p, order[i]);
		if (p == NULL)
			fail_msg("\"%s\" missing or out of order", order[i]);
	}
	/* The output reads back as a configuration giving the same print. */
	config_defaults(&back, "/elsewhere");
	assert_int_equal(config_parse_text(&back, out, strlen(out), err,
	                     sizeof(err)),
	    0);
	out2 = print_config(&back);
	assert_string_equal(out, out2);
	free(out2);
	free(out);

	/* A password in redis_url is masked too. */
	assert_int_equal(
	    parse(&c, "redis_url = redis://app:hunter2@127.0.0.1:6390/1\n", err,
	        sizeof(err)),
	    0);
	out = print_config(&c);
	assert_null(strstr(out, "hunter2"));
	assert_contains(out,
	    "redis_url = redis://app:********@127.0.0.1:6390/1\n");
	free(out);
	assert_int_equal(parse(&c,
	                     "redis_url = redis://hunter2@127.0.0.1:6390\n",
	                     err, sizeof(err)),
	    0);
	out = print_config(&c);
	assert_null(strstr(out, "hunter2"));
	free(out);
}

static void
test_default_path(void **state)
{
	char *set[] = { "A=1", "CHARGE_CONF=/etc/charge/x.conf", NULL };
	char *empty[] = { "CHARGE_CONF=", NULL };
	char *none[] = { "CHARGE_CONFIG=/y", NULL };

	(void)state;
	assert_string_equal(config_default_path(set), "/etc/charge/x.conf");
	assert_string_equal(config_default_path(empty), CHARGE_DEFAULT_CONF);
	assert_string_equal(config_default_path(none), CHARGE_DEFAULT_CONF);
	assert_string_equal(config_default_path(NULL), CHARGE_DEFAULT_CONF);
}

/* The shipped conf/charge.conf loads and equals the compiled-in defaults. */
static void
test_shipped_conf(void **state)
{
	struct config c, d;
	char err[512], *a, *b;
	char *envp[] = { NULL };

	(void)state;
	if (config_load(&c, config_default_path(envp), envp, err,
	        sizeof(err)) != 0)
		fail_msg("%s", err);
	config_defaults(&d, c.conf_dir);
	a = print_config(&c);
	b = print_config(&d);
	assert_string_equal(a, b);
	assert_string_equal(c.provider_secret, DEF_PROVIDER_SECRET);
	free(a);
	free(b);
}

static void
test_webhook(void **state)
{
	struct config c;
	char err[256], *out;

	(void)state;
	config_defaults(&c, BASE);
	assert_string_equal(c.provider_webhook_path, "/webhooks/provider");
	assert_string_equal(c.provider_webhook_secret, "");
	assert_int_equal(c.provider_webhook_tolerance_s, 300);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	(void)snprintf(c.provider_webhook_path, sizeof(c.provider_webhook_path),
	    "/charge");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_string_equal(err,
	    "provider_webhook_path: /charge is a route of the API already");
	(void)snprintf(c.provider_webhook_path, sizeof(c.provider_webhook_path),
	    "/charge/keys/x");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	(void)snprintf(c.provider_webhook_path, sizeof(c.provider_webhook_path),
	    "hooks");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_contains(err, "absolute path");
	(void)snprintf(c.provider_webhook_path, sizeof(c.provider_webhook_path),
	    "/hooks?x=1");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	config_defaults(&c, BASE);
	(void)snprintf(c.provider_webhook_secret_previous,
	    sizeof(c.provider_webhook_secret_previous), "whsec_old");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -1);
	assert_contains(err, "provider_webhook_secret_previous");
	assert_int_equal(parse(&c,
	                     "provider_webhook_secret = whsec_new\n"
	                     "provider_webhook_secret_previous = whsec_old\n"
	                     "provider_webhook_tolerance_s = 600\n",
	                     err, sizeof(err)),
	    0);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	assert_int_equal(c.provider_webhook_tolerance_s, 600);
	assert_int_equal(parse(&c, "provider_webhook_tolerance_s = 0\n", err,
	                     sizeof(err)),
	    -1);
	assert_int_equal(parse(&c, "provider_webhook_secret = two words\n", err,
	                     sizeof(err)),
	    -1);
	assert_int_equal(parse(&c,
	                     "provider_webhook_secret = whsec_new\n"
	                     "provider_webhook_secret_previous = whsec_old\n",
	                     err, sizeof(err)),
	    0);
	out = print_config(&c);
	assert_contains(out, "provider_webhook_secret = ********\n");
	assert_contains(out, "provider_webhook_secret_previous = ********\n");
	assert_null(strstr(out, "whsec_"));
	free(out);
	config_defaults(&c, BASE);
	out = print_config(&c);
	assert_contains(out, "provider_webhook_secret = \n");
	free(out);
}

/* A reload: which keys may differ from the configuration in force. */
static void
test_fixed_change(void **state)
{
	static const char *const live[] = { "api_keys_file = /k2",
		"provider_api_key = sk_other",
		"provider_webhook_secret = whsec_2",
		"provider_webhook_secret_previous = whsec_1",
		"log_level = debug", "max_wait_s = 3",
		"max_request_bytes = 2048", "max_inflight = 7",
		"request_timeout_ms = 999", "keepalive_idle_timeout_ms = 999",
		"drain_timeout_ms = 999", "body_memory_max_bytes = 99999",
		"provider_webhook_tolerance_s = 30" };
	static const struct {
		const char *text, *key;
	} fixed[] = {
		{ "redis_url = redis://10.0.0.9:6379", "redis_url" },
		{ "provider_secret = another-secret", "provider_secret" },
		{ "threads = 3", "threads" },
		{ "spill_dir = /elsewhere", "spill_dir" },
		{ "provider_url = http://127.0.0.1:9", "provider_url" },
		{ "lock_ttl_s = 99", "lock_ttl_s" },
	};
	struct config a, b;
	char err[256];
	size_t i;

	(void)state;
	assert_int_equal(parse(&a, "", err, sizeof(err)), 0);
	assert_int_equal(parse(&b, "", err, sizeof(err)), 0);
	assert_null(config_fixed_change(&a, &b));
	for (i = 0; i < sizeof(live) / sizeof(live[0]); i++) {
		assert_int_equal(parse(&b, live[i], err, sizeof(err)), 0);
		if (config_fixed_change(&a, &b) != NULL)
			fail_msg("%s: refused as %s", live[i],
			    config_fixed_change(&a, &b));
	}
	for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		assert_int_equal(parse(&b, fixed[i].text, err, sizeof(err)), 0);
		assert_non_null(config_fixed_change(&a, &b));
		assert_string_equal(config_fixed_change(&a, &b), fixed[i].key);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_record_margin),
		cmocka_unit_test(test_redis_tls),
		cmocka_unit_test(test_int_bounds),
		cmocka_unit_test(test_int_syntax),
		cmocka_unit_test(test_file_error_format),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_path_too_long),
		cmocka_unit_test(test_redis_url),
		cmocka_unit_test(test_log_level),
		cmocka_unit_test(test_unknown_key),
		cmocka_unit_test(test_syntax_errors),
		cmocka_unit_test(test_comments),
		cmocka_unit_test(test_last_wins),
		cmocka_unit_test(test_load_and_env),
		cmocka_unit_test(test_env_errors),
		cmocka_unit_test(test_env_unknown),
		cmocka_unit_test(test_load_missing),
		cmocka_unit_test(test_cross_check),
		cmocka_unit_test(test_validate_table),
		cmocka_unit_test(test_webhook),
		cmocka_unit_test(test_print),
		cmocka_unit_test(test_secret_files),
		cmocka_unit_test(test_default_path),
		cmocka_unit_test(test_shipped_conf),
		cmocka_unit_test(test_fixed_change),
	};

	return cmocka_run_group_tests_name("config", tests, group_setup,
	    group_teardown);
}
