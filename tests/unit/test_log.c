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

int
main(void)
{
	const struct CMUnitTest t[] = { cmocka_unit_test(test_escape),
		cmocka_unit_test(test_levels), cmocka_unit_test(test_line),
		cmocka_unit_test(test_truncate) };
	return cmocka_run_group_tests_name("log", t, NULL, NULL);
}
