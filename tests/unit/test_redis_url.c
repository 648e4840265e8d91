/*
 * test_redis_url.c - redis_url_parse(): redis://[user:password@]host:port[/db]
 * and unix:// paths (absolute, or relative to the configuration directory);
 * redis-sentinel:// and redis-cluster:// host lists at every edge; their
 * TLS forms rediss://, rediss-sentinel:// and rediss-cluster://.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis_url.h"

static void
parse_ok(const char *url, struct redis_target *t)
{
	char err[128];

	memset(t, 'X', sizeof(*t));
	err[0] = '\0';
	if (redis_url_parse(url, t, err, sizeof(err)) != 0)
		fail_msg("redis_url_parse(\"%s\") failed: %s", url, err);
}

static void
parse_fails(const char *url)
{
	struct redis_target t;
	char err[128];

	err[0] = '\0';
	if (redis_url_parse(url, &t, err, sizeof(err)) != -1)
		fail_msg("redis_url_parse(\"%s\") accepted it", url);
	if (strlen(err) == 0)
		fail_msg("redis_url_parse(\"%s\") gave no reason", url);
}

static void
test_tcp(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("redis://127.0.0.1:6380", &t);
	assert_int_equal(t.is_unix, 0);
	assert_string_equal(t.host, "127.0.0.1");
	assert_int_equal(t.port, 6380);
	assert_int_equal(t.db, 0);
	assert_string_equal(t.user, "");
	assert_string_equal(t.password, "");
	assert_string_equal(t.path, "");

	parse_ok("redis://localhost:1", &t);
	assert_string_equal(t.host, "localhost");
	assert_int_equal(t.port, 1);
	parse_ok("redis://redis.example.com:65535", &t);
	assert_string_equal(t.host, "redis.example.com");
	assert_int_equal(t.port, 65535);
}

static void
test_tcp_db(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("redis://127.0.0.1:6380/3", &t);
	assert_string_equal(t.host, "127.0.0.1");
	assert_int_equal(t.port, 6380);
	assert_int_equal(t.db, 3);
	parse_ok("redis://h:7000/0", &t);
	assert_int_equal(t.db, 0);
	parse_ok("redis://h:7000/15", &t);
	assert_int_equal(t.db, 15);
	/* a trailing slash names no database */
	parse_ok("redis://h:7000/", &t);
	assert_int_equal(t.port, 7000);
	assert_int_equal(t.db, 0);
}

static void
test_tcp_credentials(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("redis://alice:s3cr3t@10.0.0.5:6381/2", &t);
	assert_string_equal(t.user, "alice");
	assert_string_equal(t.password, "s3cr3t");
	assert_string_equal(t.host, "10.0.0.5");
	assert_int_equal(t.port, 6381);
	assert_int_equal(t.db, 2);

	/* password only (as redis-cli accepts) */
	parse_ok("redis://onlypass@h:6380", &t);
	assert_string_equal(t.user, "");
	assert_string_equal(t.password, "onlypass");
	assert_string_equal(t.host, "h");
	assert_int_equal(t.port, 6380);

	/* empty user: the default user with a password */
	parse_ok("redis://:pw@h:6380", &t);
	assert_string_equal(t.user, "");
	assert_string_equal(t.password, "pw");

	/* a colon inside the password belongs to the password */
	parse_ok("redis://u:a:b@h:6380", &t);
	assert_string_equal(t.user, "u");
	assert_string_equal(t.password, "a:b");
	assert_string_equal(t.host, "h");
}

static void
test_unix(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("unix:///var/run/redis/redis.sock", &t);
	assert_int_equal(t.is_unix, 1);
	assert_string_equal(t.path, "/var/run/redis/redis.sock");
	assert_string_equal(t.host, "");
	assert_int_equal(t.port, 0);

	/* relative: left as given (the configuration resolves it first,
	 * see test_config.c) */
	parse_ok("unix://redis.sock", &t);
	assert_string_equal(t.path, "redis.sock");
}

static void
test_errors(void **state)
{
	struct redis_target t;
	char err[128];

	(void)state;
	parse_fails("");
	err[0] = '\0';
	assert_int_equal(redis_url_parse(NULL, &t, err, sizeof(err)), -1);
	assert_true(strlen(err) > 0);
	/* other schemes */
	parse_fails("http://127.0.0.1:6380");
	parse_fails("rediss:/127.0.0.1:6380"); /* rediss://: test_tls_schemes */
	parse_fails("REDIS://127.0.0.1:6380");
	parse_fails("127.0.0.1:6380");
	parse_fails("redis:/127.0.0.1:6380");
	parse_fails("unix:");
	parse_fails("unix://");
	/* host and port */
	parse_fails("redis://");
	parse_fails("redis://127.0.0.1");
	parse_fails("redis://127.0.0.1/0");
	parse_fails("redis://:6380");
	parse_fails("redis://127.0.0.1:");
	parse_fails("redis://127.0.0.1:/0");
	parse_fails("redis://127.0.0.1:0");
	parse_fails("redis://127.0.0.1:65536");
	parse_fails("redis://127.0.0.1:99999999999999999999");
	parse_fails("redis://127.0.0.1:-1");
	parse_fails("redis://127.0.0.1:abc");
	parse_fails("redis://127.0.0.1:63 80");
	parse_fails("redis://127.0.0.1:6380x");
	parse_fails("redis://127.0.0.1:0x10");
	parse_fails("redis://u:p@127.0.0.1");
	parse_fails("redis://u:p@:6380");
	/* database */
	parse_fails("redis://h:6380/x");
	parse_fails("redis://h:6380/-1");
	parse_fails("redis://h:6380/+1");
	parse_fails("redis://h:6380/1x");
	parse_fails("redis://h:6380/1/2");
	parse_fails("redis://h:6380/99999999999999999999");
}

/* A port is digits only (RFC 3986 port = *DIGIT): no sign, no blanks. */
static void
test_port_digits_only(void **state)
{
	(void)state;
	parse_fails("redis://127.0.0.1:+6380");
	parse_fails("redis://127.0.0.1: 6380");
}

static void
test_too_long(void **state)
{
	struct redis_target t;
	char url[4096], err[128];
	int n;

	(void)state;
	/* host: 255 bytes fit, 256 do not */
	n = snprintf(url, sizeof(url), "redis://%0255d:6380", 0);
	assert_true(n > 0);
	parse_ok(url, &t);
	assert_int_equal(strlen(t.host), 255);
	(void)snprintf(url, sizeof(url), "redis://%0256d:6380", 0);
	parse_fails(url);
	/* user: 127 / 128 */
	(void)snprintf(url, sizeof(url), "redis://%0127d:pw@h:6380", 0);
	parse_ok(url, &t);
	assert_int_equal(strlen(t.user), 127);
	(void)snprintf(url, sizeof(url), "redis://%0128d:pw@h:6380", 0);
	parse_fails(url);
	/* password: 255 / 256, with and without a user */
	(void)snprintf(url, sizeof(url), "redis://u:%0255d@h:6380", 0);
	parse_ok(url, &t);
	assert_int_equal(strlen(t.password), 255);
	(void)snprintf(url, sizeof(url), "redis://u:%0256d@h:6380", 0);
	parse_fails(url);
	(void)snprintf(url, sizeof(url), "redis://%0256d@h:6380", 0);
	parse_fails(url);
	/* port digits beyond the buffer */
	(void)snprintf(url, sizeof(url), "redis://h:%040d", 6380);
	parse_fails(url);
	/* unix path: PATH_MAX_LEN - 1 fits, PATH_MAX_LEN does not */
	(void)snprintf(url, sizeof(url), "unix:///%0*d", PATH_MAX_LEN - 2, 0);
	parse_ok(url, &t);
	assert_int_equal(strlen(t.path), PATH_MAX_LEN - 1);
	(void)snprintf(url, sizeof(url), "unix:///%0*d", PATH_MAX_LEN - 1, 0);
	parse_fails(url);
	(void)snprintf(url, sizeof(url), "unix://%0*d", PATH_MAX_LEN - 10, 0);
	parse_ok(url, &t);
	/* a small error buffer is still terminated */
	memset(err, 'Z', sizeof(err));
	assert_int_equal(redis_url_parse("ftp://x", &t, err, 8), -1);
	assert_int_equal(strlen(err), 7);
}

static void
test_single_mode(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("redis://h:1", &t);
	assert_int_equal(t.mode, REDIS_MODE_SINGLE);
	assert_int_equal(t.nhosts, 0);
	parse_ok("unix:///s", &t);
	assert_int_equal(t.mode, REDIS_MODE_SINGLE);
	assert_int_equal(t.nhosts, 0);
}

static void
test_sentinel(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("redis-sentinel://127.0.0.1:26379,127.0.0.1:26380,"
	         "sentinel-3.example:26381/mymaster",
	    &t);
	assert_int_equal(t.mode, REDIS_MODE_SENTINEL);
	assert_int_equal(t.nhosts, 3);
	assert_string_equal(t.hosts[0].host, "127.0.0.1");
	assert_int_equal(t.hosts[0].port, 26379);
	assert_int_equal(t.hosts[1].port, 26380);
	assert_string_equal(t.hosts[2].host, "sentinel-3.example");
	assert_int_equal(t.hosts[2].port, 26381);
	assert_string_equal(t.master_name, "mymaster");
	assert_int_equal(t.db, 0);
	assert_string_equal(t.password, "");
	assert_string_equal(t.user, "");
	/* the single-Redis fields stay empty */
	assert_string_equal(t.host, "");
	assert_int_equal(t.port, 0);
	assert_int_equal(t.is_unix, 0);

	parse_ok("redis-sentinel://h:1/m", &t);
	assert_int_equal(t.nhosts, 1);
	assert_string_equal(t.master_name, "m");
	parse_ok("redis-sentinel://h:1/charge-primary_2.eu", &t);
	assert_string_equal(t.master_name, "charge-primary_2.eu");
}

static void
test_sentinel_db(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("redis-sentinel://h:1/m?db=0", &t);
	assert_int_equal(t.db, 0);
	assert_string_equal(t.master_name, "m");
	parse_ok("redis-sentinel://h:1,h:2/m?db=3", &t);
	assert_int_equal(t.db, 3);
	assert_int_equal(t.nhosts, 2);
	parse_ok("redis-sentinel://h:1/m?db=65535", &t);
	assert_int_equal(t.db, 65535);
	parse_fails("redis-sentinel://h:1/m?db=65536");
	parse_fails("redis-sentinel://h:1/m?db=99999999999999999999");
	parse_fails("redis-sentinel://h:1/m?db=");
	parse_fails("redis-sentinel://h:1/m?db=-1");
	parse_fails("redis-sentinel://h:1/m?db=+1");
	parse_fails("redis-sentinel://h:1/m?db=1x");
	parse_fails("redis-sentinel://h:1/m?db= 1");
	parse_fails("redis-sentinel://h:1/m?db=1&db=2");
	parse_fails("redis-sentinel://h:1/m?");
	parse_fails("redis-sentinel://h:1/m?DB=1");
	parse_fails("redis-sentinel://h:1/m?timeout=1");
	parse_fails("redis-sentinel://h:1/m/1");
}

static void
test_sentinel_credentials(void **state)
{
	struct redis_target t;

	(void)state;
	/* the form of the issue: an empty user, then the password */
	parse_ok("redis-sentinel://:s3cr3t@h:1,h:2/m", &t);
	assert_string_equal(t.user, "");
	assert_string_equal(t.password, "s3cr3t");
	assert_int_equal(t.nhosts, 2);
	assert_string_equal(t.hosts[0].host, "h");
	/* the other forms redis:// accepts */
	parse_ok("redis-sentinel://onlypass@h:1/m", &t);
	assert_string_equal(t.user, "");
	assert_string_equal(t.password, "onlypass");
	parse_ok("redis-sentinel://alice:pw@h:1/m?db=2", &t);
	assert_string_equal(t.user, "alice");
	assert_string_equal(t.password, "pw");
	assert_int_equal(t.db, 2);
	/* a colon or a comma inside the password belongs to it */
	parse_ok("redis-sentinel://u:a:b,c@h:1/m", &t);
	assert_string_equal(t.user, "u");
	assert_string_equal(t.password, "a:b,c");
	assert_int_equal(t.nhosts, 1);
	/* an empty password is allowed (no AUTH is sent) */
	parse_ok("redis-sentinel://:@h:1/m", &t);
	assert_string_equal(t.password, "");
	parse_fails("redis-sentinel://:pw@/m");
	parse_fails("redis-sentinel://:pw@h/m");
}

static void
test_sentinel_errors(void **state)
{
	(void)state;
	/* missing master name */
	parse_fails("redis-sentinel://h:1");
	parse_fails("redis-sentinel://h:1/");
	parse_fails("redis-sentinel://h:1/?db=1");
	parse_fails("redis-sentinel://h:1,h:2");
	/* empty host list, empty entries */
	parse_fails("redis-sentinel://");
	parse_fails("redis-sentinel:///m");
	parse_fails("redis-sentinel://,/m");
	parse_fails("redis-sentinel://h:1,,h:2/m");
	parse_fails("redis-sentinel://,h:1/m");
	parse_fails("redis-sentinel://h:1,/m");
	/* bad ports, anywhere in the list */
	parse_fails("redis-sentinel://h/m");
	parse_fails("redis-sentinel://h:/m");
	parse_fails("redis-sentinel://:1/m");
	parse_fails("redis-sentinel://h:0/m");
	parse_fails("redis-sentinel://h:65536/m");
	parse_fails("redis-sentinel://h:1,h:0/m");
	parse_fails("redis-sentinel://h:1,h:x/m");
	parse_fails("redis-sentinel://h:1,h:+2/m");
	parse_fails("redis-sentinel://h:1,h: 2/m");
	parse_fails("redis-sentinel://h:1,h/m");
	parse_fails("redis-sentinel://h:1?db=1/m");
	/* bad master names */
	parse_fails("redis-sentinel://h:1/my master");
	parse_fails("redis-sentinel://h:1/m@x");
	parse_fails("redis-sentinel://h:1/m:1");
	parse_fails("redis-sentinel://h:1/m\xc3\xa9");
	/* the scheme is exact */
	parse_fails("redis-sentinels://h:1/m");
	parse_fails("REDIS-SENTINEL://h:1/m");
	parse_fails("redis-sentinel:/h:1/m");
	parse_fails("sentinel://h:1/m");
}

/* REDIS_URL_HOSTS_MAX hosts fit; one more does not. */
static void
test_host_count(void **state)
{
	struct redis_target t;
	char url[1024];
	size_t n;
	int i;

	(void)state;
	n = (size_t)snprintf(url, sizeof(url), "redis-sentinel://");
	for (i = 0; i < REDIS_URL_HOSTS_MAX; i++)
		n += (size_t)snprintf(url + n, sizeof(url) - n,
		    "%s10.0.0.%d:%d", i ? "," : "", i, 26379 + i);
	(void)snprintf(url + n, sizeof(url) - n, "/m");
	parse_ok(url, &t);
	assert_int_equal(t.nhosts, REDIS_URL_HOSTS_MAX);
	assert_string_equal(t.hosts[REDIS_URL_HOSTS_MAX - 1].host, "10.0.0.15");
	assert_int_equal(t.hosts[REDIS_URL_HOSTS_MAX - 1].port,
	    26379 + REDIS_URL_HOSTS_MAX - 1);
	(void)snprintf(url + n, sizeof(url) - n, ",h:1/m");
	parse_fails(url);

	n = (size_t)snprintf(url, sizeof(url), "redis-cluster://");
	for (i = 0; i < REDIS_URL_HOSTS_MAX; i++)
		n += (size_t)snprintf(url + n, sizeof(url) - n, "%sh%d:%d",
		    i ? "," : "", i, 7000 + i);
	parse_ok(url, &t);
	assert_int_equal(t.nhosts, REDIS_URL_HOSTS_MAX);
	(void)snprintf(url + n, sizeof(url) - n, ",h:1");
	parse_fails(url);
}

static void
test_sentinel_too_long(void **state)
{
	struct redis_target t;
	char url[4096];

	(void)state;
	/* master name: REDIS_MASTER_NAME_MAX fits, one more does not */
	(void)snprintf(url, sizeof(url), "redis-sentinel://h:1/%0*d",
	    REDIS_MASTER_NAME_MAX, 0);
	parse_ok(url, &t);
	assert_int_equal(strlen(t.master_name), REDIS_MASTER_NAME_MAX);
	(void)snprintf(url, sizeof(url), "redis-sentinel://h:1/%0*d?db=1",
	    REDIS_MASTER_NAME_MAX, 0);
	parse_ok(url, &t);
	assert_int_equal(t.db, 1);
	(void)snprintf(url, sizeof(url), "redis-sentinel://h:1/%0*d",
	    REDIS_MASTER_NAME_MAX + 1, 0);
	parse_fails(url);
	/* a host in the list: 255 bytes fit, 256 do not */
	(void)snprintf(url, sizeof(url), "redis-sentinel://h:1,%0255d:2/m", 0);
	parse_ok(url, &t);
	assert_int_equal(strlen(t.hosts[1].host), 255);
	(void)snprintf(url, sizeof(url), "redis-sentinel://h:1,%0256d:2/m", 0);
	parse_fails(url);
	/* password: 255 / 256 */
	(void)snprintf(url, sizeof(url), "redis-sentinel://:%0255d@h:1/m", 0);
	parse_ok(url, &t);
	(void)snprintf(url, sizeof(url), "redis-sentinel://:%0256d@h:1/m", 0);
	parse_fails(url);
}

static void
test_cluster(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("redis-cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
	    &t);
	assert_int_equal(t.mode, REDIS_MODE_CLUSTER);
	assert_int_equal(t.nhosts, 3);
	assert_int_equal(t.hosts[0].port, 7000);
	assert_int_equal(t.hosts[2].port, 7002);
	assert_string_equal(t.hosts[1].host, "127.0.0.1");
	assert_string_equal(t.master_name, "");
	assert_int_equal(t.db, 0);
	assert_string_equal(t.host, "");
	parse_ok("redis-cluster://seed.example:6379", &t);
	assert_int_equal(t.nhosts, 1);
	/* a trailing slash names nothing */
	parse_ok("redis-cluster://h:1,h:2/", &t);
	assert_int_equal(t.nhosts, 2);
	parse_ok("redis-cluster://:pw@h:1,h:2", &t);
	assert_string_equal(t.password, "pw");
	assert_string_equal(t.user, "");
	parse_ok("redis-cluster://u:pw@h:1", &t);
	assert_string_equal(t.user, "u");
	parse_ok("redis-cluster://pw@h:1", &t);
	assert_string_equal(t.password, "pw");
	/* a cluster has database 0 only and no master name */
	parse_fails("redis-cluster://h:1/0");
	parse_fails("redis-cluster://h:1/m");
	parse_fails("redis-cluster://h:1?db=1");
	parse_fails("redis-cluster://h:1/?db=1");
	parse_fails("redis-cluster://");
	parse_fails("redis-cluster:///");
	parse_fails("redis-cluster://h:1,,h:2");
	parse_fails("redis-cluster://h:1,");
	parse_fails("redis-cluster://h:1,h");
	parse_fails("redis-cluster://h:1,h:65536");
	parse_fails("redis-cluster://h:1,:2");
	parse_fails("redis-cluster://:pw@");
	parse_fails("rediscluster://h:1");
}

/* rediss schemes: the forms of their plain counterparts, TLS on. */
static void
test_tls_schemes(void **state)
{
	struct redis_target t;

	(void)state;
	parse_ok("rediss://redis.example:6380", &t);
	assert_int_equal(t.mode, REDIS_MODE_SINGLE);
	assert_int_equal(t.tls.on, 1);
	assert_int_equal(t.is_unix, 0);
	assert_string_equal(t.host, "redis.example");
	assert_int_equal(t.port, 6380);
	/* the parser leaves the redis_tls_* settings to the configuration */
	assert_int_equal(t.tls.verify, 0);
	assert_string_equal(t.tls.ca_file, "");
	assert_string_equal(t.tls.server_name, "");
	parse_ok("rediss://u:p%w@10.0.0.1:65535/15", &t);
	assert_int_equal(t.tls.on, 1);
	assert_string_equal(t.user, "u");
	assert_string_equal(t.password, "p%w");
	assert_int_equal(t.port, 65535);
	assert_int_equal(t.db, 15);
	parse_ok("rediss://:pw@h:1", &t);
	assert_string_equal(t.user, "");
	assert_string_equal(t.password, "pw");
	parse_ok("rediss://pw@h:1", &t);
	assert_string_equal(t.password, "pw");
	parse_ok("redis://h:1", &t);
	assert_int_equal(t.tls.on, 0);
	parse_ok("unix:///tmp/r.sock", &t);
	assert_int_equal(t.tls.on, 0);

	parse_ok("rediss-sentinel://u:pw@s1:26379,s2:26380/mymaster?db=2", &t);
	assert_int_equal(t.mode, REDIS_MODE_SENTINEL);
	assert_int_equal(t.tls.on, 1);
	assert_int_equal(t.nhosts, 2);
	assert_string_equal(t.hosts[1].host, "s2");
	assert_int_equal(t.hosts[1].port, 26380);
	assert_string_equal(t.master_name, "mymaster");
	assert_int_equal(t.db, 2);
	assert_string_equal(t.user, "u");
	parse_ok("redis-sentinel://s1:26379/m", &t);
	assert_int_equal(t.tls.on, 0);

	parse_ok("rediss-cluster://:pw@a:7000,b:7001,c:7002", &t);
	assert_int_equal(t.mode, REDIS_MODE_CLUSTER);
	assert_int_equal(t.tls.on, 1);
	assert_int_equal(t.nhosts, 3);
	assert_string_equal(t.hosts[2].host, "c");
	assert_string_equal(t.password, "pw");
	parse_ok("redis-cluster://a:7000", &t);
	assert_int_equal(t.tls.on, 0);
}

/* rediss schemes refuse what their plain counterparts refuse. */
static void
test_tls_errors(void **state)
{
	char url[512];
	int i;

	(void)state;
	parse_fails("rediss://");
	parse_fails("rediss://h");
	parse_fails("rediss://h:0");
	parse_fails("rediss://h:65536");
	parse_fails("rediss://h:1/x");
	parse_fails("rediss://h:1/65536");
	parse_fails("rediss:///tmp/r.sock"); /* TLS is for TCP only */
	parse_fails("rediss-unix:///tmp/r.sock");
	parse_fails("redisss://h:1");
	parse_fails("REDISS://h:1");
	parse_fails("rediss-sentinel://s:1");
	parse_fails("rediss-sentinel://s:1/");
	parse_fails("rediss-sentinel://s:1/m?db=x");
	parse_fails("rediss-sentinel://s:1,,s:2/m");
	parse_fails("rediss-cluster://h:1/0");
	parse_fails("rediss-cluster://h:1,");
	parse_fails("rediss-cluster://");
	/* REDIS_URL_HOSTS_MAX hosts, and one more */
	(void)snprintf(url, sizeof(url), "rediss-cluster://h:1");
	for (i = 1; i < REDIS_URL_HOSTS_MAX; i++)
		(void)snprintf(url + strlen(url), sizeof(url) - strlen(url),
		    ",h:%d", i + 1);
	{
		struct redis_target t;

		parse_ok(url, &t);
		assert_int_equal(t.nhosts, REDIS_URL_HOSTS_MAX);
		assert_int_equal(t.tls.on, 1);
	}
	(void)snprintf(url + strlen(url), sizeof(url) - strlen(url), ",h:99");
	parse_fails(url);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp),
		cmocka_unit_test(test_tcp_db),
		cmocka_unit_test(test_tcp_credentials),
		cmocka_unit_test(test_unix),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_port_digits_only),
		cmocka_unit_test(test_too_long),
		cmocka_unit_test(test_single_mode),
		cmocka_unit_test(test_sentinel),
		cmocka_unit_test(test_sentinel_db),
		cmocka_unit_test(test_sentinel_credentials),
		cmocka_unit_test(test_sentinel_errors),
		cmocka_unit_test(test_host_count),
		cmocka_unit_test(test_sentinel_too_long),
		cmocka_unit_test(test_cluster),
		cmocka_unit_test(test_tls_schemes),
		cmocka_unit_test(test_tls_errors),
	};

	return cmocka_run_group_tests_name("redis_url", tests, NULL, NULL);
}
