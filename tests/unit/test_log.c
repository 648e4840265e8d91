#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "log.h"

/* Runs fn with stderr redirected to a pipe; returns what was written. */
static char captured[8192];
static size_t
capture_begin(int *saved, int p[2])
{
	assert_int_equal(pipe(p), 0);
	*saved = dup(2);
	assert_true(*saved >= 0);
	assert_int_equal(dup2(p[1], 2), 2);
	return 0;
}
static size_t
capture_end(int saved, int p[2])
{
	ssize_t n;
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	close(p[1]);
	n = read(p[0], captured, sizeof(captured) - 1);
	assert_true(n >= 0);
	captured[n] = '\0';
	close(p[0]);
	return (size_t)n;
}

static void
test_escape(void **s)
{
	char d[64];
	(void)s;
	assert_int_equal(log_escape(d, sizeof(d), "abc", 3), 3);
	assert_string_equal(d, "abc");
	assert_int_equal(log_escape(d, sizeof(d), "a\nb\\c\x7f\xff\0z", 9), 24);
	assert_string_equal(d, "a\\x0ab\\x5cc\\x7f\\xff\\x00z");
	assert_int_equal(log_escape(d, 8, "abcdefghij", 10), 7);
	assert_string_equal(d, "abcd...");
	assert_int_equal(log_escape(d, 8, "abcdefg", 7), 7);
	assert_string_equal(d, "abcdefg");
	assert_int_equal(log_escape(d, 8, "ab\ncdefg", 8), 5);
	assert_string_equal(d, "ab..."); /* \x0a does not fit with "..." */
	assert_int_equal(log_escape(d, 1, "abc", 3), 0);
	assert_string_equal(d, "");
	assert_int_equal(log_escape(d, 3, "abc", 3), 2);
	assert_string_equal(d, "..");
	assert_int_equal(log_escape(d, 4, "abc", 3), 3);
	assert_string_equal(d, "abc");
	assert_int_equal(log_escape(d, 4, "abcd", 4), 3);
	assert_string_equal(d, "...");
	assert_int_equal(log_escape(d, 5, "abcd", 4), 4);
	assert_int_equal(log_escape(d, 5, "abcde", 5), 4);
	assert_string_equal(d, "a...");
	assert_int_equal(log_escape(d, sizeof(d), NULL, 0), 0);
	assert_int_equal(log_escape(NULL, 0, "x", 1), 0);
}

static void
test_levels(void **s)
{
	(void)s;
	assert_int_equal(log_level_parse("error"), LL_ERROR);
	assert_int_equal(log_level_parse("debug"), LL_DEBUG);
	assert_int_equal(log_level_parse("Debug"), -1);
	assert_int_equal(log_level_parse(NULL), -1);
	log_set_level(LL_WARN);
	assert_true(log_enabled(LL_ERROR));
	assert_true(log_enabled(LL_WARN));
	assert_false(log_enabled(LL_INFO));
	log_set_level(99);
	assert_true(log_enabled(LL_DEBUG));
	log_set_level(LL_INFO);
}

static void
test_line(void **s)
{
	int saved, p[2];
	regex_t re;
	char want[128];
	(void)s;
	log_set_level(LL_INFO);
	capture_begin(&saved, p);
	errno = 42;
	log_info("0123abcd", "hello %s %d\nforged line", "x", 7);
	assert_int_equal(errno, 42);
	log_debug(NULL, "hidden");
	log_error(NULL, "no rid");
	capture_end(saved, p);
	assert_int_equal(
	    regcomp(&re,
	        "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z info \\[[0-9]+\\] \\[0123abcd\\] hello x 7\\\\x0aforged line\n[0-9T:.Z-]{24} error \\[[0-9]+\\] \\[-\\] no rid\n$",
	        REG_EXTENDED),
	    0);
	assert_int_equal(regexec(&re, captured, 0, NULL, 0), 0);
	regfree(&re);
	snprintf(want, sizeof(want), "[%ld]", (long)getpid());
	assert_non_null(strstr(captured, want));
}

static void
test_truncate(void **s)
{
	int saved, p[2];
	char *big = malloc(5000);
	size_t n;
	(void)s;
	memset(big, 'x', 4999);
	big[4999] = '\0';
	capture_begin(&saved, p);
	log_warn("r", "%s", big);
	n = capture_end(saved, p);
	assert_int_equal(n, 2048);
	assert_int_equal(captured[n - 1], '\n');
	assert_memory_equal(captured + n - 4, "...", 3);
	assert_null(memchr(captured, '\n', n - 1));
	/* control characters near the end do not overflow */
	memset(big, '\x01', 4999);
	capture_begin(&saved, p);
	log_warn("r", "%s", big);
	n = capture_end(saved, p);
	assert_true(n <= 2048);
	assert_int_equal(captured[n - 1], '\n');
	free(big);
}

/* log_format json: one object per line, the documented fields, every
 * string escaped for JSON, a truncated line still closed. */
static void
test_json(void **s)
{
	int saved, p[2];
	regex_t re;
	char *big = malloc(5000);
	size_t n;
	(void)s;
	assert_int_equal(log_format_parse("json"), LF_JSON);
	assert_int_equal(log_format_parse("text"), LF_TEXT);
	assert_int_equal(log_format_parse("JSON"), -1);
	assert_int_equal(log_format_parse(NULL), -1);
	log_set_level(LL_INFO);
	log_set_format(LF_JSON);
	capture_begin(&saved, p);
	log_event(LL_WARN, "ord-1", "4bf92f3577b34da6a3ce929d0e0e4736",
	    "say \"hi\"\\ \x01\n\xc3\xa9 %d", 7);
	log_error(NULL, "no ids");
	capture_end(saved, p);
	assert_int_equal(
	    regcomp(&re,
	        "^\\{\"ts\":\"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z\",\"level\":\"warn\",\"pid\":[0-9]+,\"request_id\":\"ord-1\",\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\",\"msg\":\"say \\\\\"hi\\\\\"\\\\\\\\ \\\\u0001\\\\u000a\\\\u00c3\\\\u00a9 7\"\\}\n"
	        "\\{\"ts\":\"[0-9T:.Z-]{24}\",\"level\":\"error\",\"pid\":[0-9]+,\"msg\":\"no ids\"\\}\n$",
	        REG_EXTENDED),
	    0);
	if (regexec(&re, captured, 0, NULL, 0) != 0)
		fail_msg("%s", captured);
	regfree(&re);
	/* a line cut at its bound is still one object */
	memset(big, '"', 4999);
	big[4999] = '\0';
	capture_begin(&saved, p);
	log_warn("r", "%s", big);
	n = capture_end(saved, p);
	assert_true(n <= 2048);
	assert_memory_equal(captured + n - 6, "...\"}\n", 6);
	assert_null(memchr(captured, '\n', n - 1));
	/* card numbers are masked, other numbers kept */
	log_set_format(LF_TEXT);
	capture_begin(&saved, p);
	log_warn("r",
	    "/charge/keys/4242424242424242 404 | 4000 0566 5566 5556 x | "
	    "378282246310005 | 1796000000000123 | 4242424242424241 | "
	    "a4111-1111-1111-1111 | 4242424242424242424242");
	capture_end(saved, p);
	assert_non_null(strstr(captured,
	    "/charge/keys/************4242 404 | **** **** **** 5556 x | "
	    "***********0005 | 1796000000000123 | 4242424242424241 | "
	    "a****-****-****-1111 | 4242424242424242424242\n"));
	/* text: the trace beside the request id */
	log_set_format(LF_TEXT);
	capture_begin(&saved, p);
	log_event(LL_INFO, "ord-1", "4bf92f3577b34da6a3ce929d0e0e4736", "x");
	capture_end(saved, p);
	assert_non_null(strstr(captured,
	    " [ord-1 trace=4bf92f3577b34da6a3ce929d0e0e4736] x\n"));
	free(big);
}

int
main(void)
{
	const struct CMUnitTest t[] = { cmocka_unit_test(test_escape),
		cmocka_unit_test(test_levels), cmocka_unit_test(test_line),
		cmocka_unit_test(test_truncate), cmocka_unit_test(test_json) };
	return cmocka_run_group_tests_name("log", t, NULL, NULL);
}
