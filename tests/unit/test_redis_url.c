/*
 * test_redis_url.c - redis_url_parse(): redis://[user:password@]host:port[/db]
 * and unix:// paths (absolute, or relative to the configuration directory).
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
	assert_int_equal(redis_url_parse(NULL, &t, err, sizeof(err)),
	    -1);
	assert_true(strlen(err) > 0);
	/* other schemes */
	parse_fails("http://127.0.0.1:6380");
	parse_fails("rediss://127.0.0.1:6380");
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
	};

	return cmocka_run_group_tests_name("redis_url", tests, NULL, NULL);
}
