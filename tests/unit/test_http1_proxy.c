/*
 * test_http1_proxy.c - the proxy of the native provider client
 * (http1_proxy.c): the environment read as libcurl reads it (which
 * variable for which scheme, HTTP_PROXY never), no_proxy's matching, the
 * proxy URL (default port 1080, user:password as Basic), the CONNECT
 * request and the reading of its answer.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "http1_proxy.h"

static const char *const vars[] = { "http_proxy", "HTTP_PROXY", "https_proxy",
	"HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY" };

static int
clear_env(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		assert_int_equal(unsetenv(vars[i]), 0);
	return 0;
}

static int
env(int tls, const char *host, struct h1_proxy *px)
{
	char err[200] = "";

	return h1_proxy_env(tls, host, px, err, sizeof(err));
}

static void
test_which_variable(void **state)
{
	struct h1_proxy px;

	(void)state;
	assert_int_equal(env(1, "api.example.com", &px), 0);
	/* HTTP_PROXY is never read (under CGI it is a request header) */
	assert_int_equal(setenv("HTTP_PROXY", "http://evil:1", 1), 0);
	assert_int_equal(env(0, "api.example.com", &px), 0);
	assert_int_equal(env(1, "api.example.com", &px), 0);
	assert_int_equal(setenv("HTTPS_PROXY", "http://upper:3128", 1), 0);
	assert_int_equal(env(1, "api.example.com", &px), 1);
	assert_string_equal(px.host, "upper");
	assert_int_equal(px.port, 3128);
	assert_int_equal(env(0, "api.example.com", &px), 0);
	/* the lower case one first; an empty one is unset */
	assert_int_equal(setenv("https_proxy", "", 1), 0);
	assert_int_equal(env(1, "api.example.com", &px), 1);
	assert_string_equal(px.host, "upper");
	assert_int_equal(setenv("https_proxy", "lower", 1), 0);
	assert_int_equal(env(1, "api.example.com", &px), 1);
	assert_string_equal(px.host, "lower");
	assert_int_equal(px.port, H1_PROXY_PORT);
	assert_int_equal(setenv("http_proxy", "http://plain:8080/", 1), 0);
	assert_int_equal(env(0, "api.example.com", &px), 1);
	assert_string_equal(px.host, "plain");
	assert_int_equal(px.port, 8080);
	assert_string_equal(px.auth, "");
	/* all_proxy for a scheme without its own */
	assert_int_equal(unsetenv("http_proxy"), 0);
	assert_int_equal(setenv("ALL_PROXY", "http://all:1", 1), 0);
	assert_int_equal(env(0, "api.example.com", &px), 1);
	assert_string_equal(px.host, "all");
}

static void
test_url(void **state)
{
	struct h1_proxy px;

	(void)state;
	assert_int_equal(setenv("https_proxy", "http://u%40x:p%3Aw@[::1]:99",
	                     1),
	    0);
	assert_int_equal(env(1, "h", &px), 1);
	assert_string_equal(px.host, "::1");
	assert_int_equal(px.port, 99);
	/* base64("u@x:p:w") */
	assert_string_equal(px.auth,
	    "Proxy-Authorization: Basic dUB4OnA6dw==\r\n");
	assert_int_equal(setenv("https_proxy", "HTTP://Proxy.Local", 1), 0);
	assert_int_equal(env(1, "h", &px), 1);
	assert_string_equal(px.host, "Proxy.Local");
	assert_int_equal(px.port, 1080);
	/* what the native client does not speak: refused at start */
	assert_int_equal(setenv("https_proxy", "socks5://p:1080", 1), 0);
	assert_int_equal(env(1, "h", &px), -1);
	assert_int_equal(setenv("https_proxy", "https://p:443", 1), 0);
	assert_int_equal(env(1, "h", &px), -1);
	assert_int_equal(setenv("https_proxy", "http://p:0", 1), 0);
	assert_int_equal(env(1, "h", &px), -1);
	assert_int_equal(setenv("https_proxy", "http://:80", 1), 0);
	assert_int_equal(env(1, "h", &px), -1);
}

static void
test_no_proxy(void **state)
{
	struct h1_proxy px;

	(void)state;
	assert_true(h1_proxy_skip("*", "anything"));
	assert_true(h1_proxy_skip("example.com", "example.com"));
	assert_true(h1_proxy_skip("example.com", "api.example.com"));
	assert_true(h1_proxy_skip(".example.com", "api.example.com"));
	assert_true(h1_proxy_skip(".example.com", "example.com"));
	assert_true(h1_proxy_skip("EXAMPLE.com.", "api.example.COM."));
	assert_false(h1_proxy_skip("example.com", "nonexample.com"));
	assert_false(h1_proxy_skip("api.example.com", "example.com"));
	assert_true(h1_proxy_skip("a.b, c.d ,localhost", "localhost"));
	assert_true(h1_proxy_skip("a.b c.d", "x.c.d"));
	assert_false(h1_proxy_skip("", "localhost"));
	assert_false(h1_proxy_skip("*.example.com", "api.example.com"));
	assert_true(h1_proxy_skip("127.0.0.1", "127.0.0.1"));
	assert_false(h1_proxy_skip("127.0.0.1", "127.0.0.2"));
	assert_true(h1_proxy_skip("10.0.0.0/8", "10.1.2.3"));
	assert_false(h1_proxy_skip("10.0.0.0/8", "11.1.2.3"));
	assert_true(h1_proxy_skip("192.168.1.0/25", "192.168.1.127"));
	assert_false(h1_proxy_skip("192.168.1.0/25", "192.168.1.128"));
	assert_true(h1_proxy_skip("::1", "::1"));
	assert_true(h1_proxy_skip("fd00::/8", "fd12::5"));
	/* through the environment: NO_PROXY when no_proxy is unset */
	assert_int_equal(setenv("https_proxy", "http://p:1", 1), 0);
	assert_int_equal(setenv("NO_PROXY", "example.com", 1), 0);
	assert_int_equal(env(1, "api.example.com", &px), 0);
	assert_int_equal(env(1, "api.example.org", &px), 1);
	assert_int_equal(setenv("no_proxy", "example.org", 1), 0);
	assert_int_equal(env(1, "api.example.com", &px), 1);
	assert_int_equal(env(1, "api.example.org", &px), 0);
}

static void
test_connect(void **state)
{
	struct h1_proxy px;
	char buf[200];
	int st = 0, n;
	const char *ok =
	    "HTTP/1.1 200 Connection established\r\nProxy-agent: t\r\n\r\n";

	(void)state;
	memset(&px, 0, sizeof(px));
	n = h1_proxy_connect(&px, "api.example.com:443", buf, sizeof(buf));
	assert_int_equal(n, (int)strlen(buf));
	assert_string_equal(buf,
	    "CONNECT api.example.com:443 HTTP/1.1\r\n"
	    "Host: api.example.com:443\r\n\r\n");
	assert_int_equal(h1_proxy_connect(&px, "x:1", buf, 10), -1);
	assert_int_equal(h1_proxy_answer(ok, 5, &st), 0);
	assert_int_equal(h1_proxy_answer(ok, strlen(ok) - 1, &st), 0);
	assert_int_equal(h1_proxy_answer(ok, strlen(ok), &st), (int)strlen(ok));
	assert_int_equal(st, 200);
	assert_int_equal(h1_proxy_answer("HTTP/1.0 403 Forbidden\r\n\r\nxx", 28,
	                     &st),
	    26);
	assert_int_equal(st, 403);
	assert_int_equal(h1_proxy_answer("SSH-2.0-OpenSSH\r\n\r\n", 19, &st),
	    -1);
}

/* The status line as llhttp reads it (found by tests/fuzz: fuzz_http1.c). */
static void
test_connect_status_line(void **state)
{
	static const char *const bad[] = {
		"HTTP/1.1 2000 OK\r\n\r\n", /* was read as 200 */
		"HTTP/1.1 200\xff\r\n\r\n",
		"HTTP/1.1 200\tOK\r\n\r\n",
		"HTTP/1.5 200 OK\r\n\r\n",
		"HTTP/1.1 099 OK\r\n\r\n",
		"HTTP/1.1 20x OK\r\n\r\n",
	};
	size_t i;
	int st = -1;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(h1_proxy_answer(bad[i], strlen(bad[i]), &st),
		    -1);
	/* refused as soon as the bytes so far cannot begin one */
	assert_int_equal(h1_proxy_answer("SSH-2", 5, &st), -1);
	assert_int_equal(h1_proxy_answer("HTTP/1.1 2000", 13, &st), -1);
	assert_int_equal(h1_proxy_answer("HTTP/1.1 200", 12, &st), 0);
	/* no reason phrase; the lowest and highest statuses */
	assert_int_equal(h1_proxy_answer("HTTP/1.1 200\r\n\r\n", 16, &st), 16);
	assert_int_equal(st, 200);
	assert_int_equal(h1_proxy_answer("HTTP/1.0 100 \r\n\r\n", 17, &st), 17);
	assert_int_equal(st, 100);
	assert_int_equal(h1_proxy_answer("HTTP/1.1 999 x\r\n\r\n", 18, &st),
	    18);
	assert_int_equal(st, 999);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_which_variable, clear_env),
		cmocka_unit_test_setup(test_url, clear_env),
		cmocka_unit_test_setup(test_no_proxy, clear_env),
		cmocka_unit_test_setup(test_connect, clear_env),
		cmocka_unit_test_setup(test_connect_status_line, clear_env),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
