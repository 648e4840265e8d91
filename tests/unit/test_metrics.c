/*
 * test_metrics.c - the shared metrics file: truncated under a running
 * process (by an operator, a log rotation) it must not kill the process
 * with SIGBUS; processes that create it at the same moment must not zero
 * each other's counts.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "metrics.h"

#define RACERS 8      /* processes opening the file at once */
#define RACE_INCS 500 /* increments each */
#define RACE_ROUNDS 20

/* The value of one counter line of the exposition text, -1 if absent. */
static long long
counter(const char *name)
{
	size_t len = 0;
	char *text = metrics_render(&len), *p;
	char want[128];
	long long v = -1;

	assert_non_null(text);
	(void)snprintf(want, sizeof(want), "\n%s ", name);
	p = strstr(text, want);
	if (p != NULL)
		v = strtoll(p + strlen(want), NULL, 10);
	free(text);
	return v;
}

static void
temp_path(char *buf, size_t n)
{
	int fd;

	(void)snprintf(buf, n, "/tmp/test_metrics.XXXXXX");
	fd = mkstemp(buf);
	assert_true(fd >= 0);
	assert_int_equal(close(fd), 0);
	assert_int_equal(unlink(buf), 0);
}

/*
 * The file cut to 0 bytes while mapped: counting and rendering go on
 * (before: SIGBUS on the next add); the file is whole again.
 */
static void
test_truncated_file(void **state)
{
	char path[64];
	struct stat st;
	pid_t pid;
	int status;

	(void)state;
	temp_path(path, sizeof(path));
	/* in a child: a SIGBUS there is a failed test, not a crashed run */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* cmocka's handler would turn SIGBUS into a report in here */
		(void)signal(SIGBUS, SIG_DFL);
		if (metrics_open(path) != 0)
			_exit(2);
		metrics_inc(MC_REPLAYS);
		if (truncate(path, 0) != 0)
			_exit(3);
		metrics_inc(MC_REPLAYS);
		metrics_request("created", 1234);
		if (counter("charge_replays_total") < 1)
			_exit(4);
		if (stat(path, &st) != 0 || st.st_size < 64) /* grown back */
			_exit(7);
		if (truncate(path, 10) != 0) /* part of the first page */
			_exit(5);
		metrics_inc(MC_CONFLICTS);
		if (counter("charge_conflicts_total") != 1)
			_exit(6);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("the process died of signal %d (%s)", WTERMSIG(status),
		    strsignal(WTERMSIG(status)));
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(unlink(path), 0);
}

/*
 * RACERS processes create one new file at the same moment and count: no
 * count is lost to another process zeroing a file it thought was new.
 */
static void
test_create_race(void **state)
{
	char path[64];
	int round, i, go[2], status;
	pid_t pids[RACERS];
	long long total;

	(void)state;
	for (round = 0; round < RACE_ROUNDS; round++) {
		temp_path(path, sizeof(path));
		assert_int_equal(pipe(go), 0);
		for (i = 0; i < RACERS; i++) {
			char c;

			pids[i] = fork();
			assert_true(pids[i] >= 0);
			if (pids[i] != 0)
				continue;
			(void)close(go[1]);
			if (read(go[0], &c, 1) != 0) /* EOF: everybody goes */
				_exit(2);
			if (metrics_open(path) != 0)
				_exit(3);
			for (int k = 0; k < RACE_INCS; k++)
				metrics_inc(MC_PROVIDER_CALLS);
			_exit(0);
		}
		(void)close(go[0]);
		(void)close(go[1]);
		for (i = 0; i < RACERS; i++) {
			assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
			assert_true(
			    WIFEXITED(status) && WEXITSTATUS(status) == 0);
		}
		pids[0] = fork();
		assert_true(pids[0] >= 0);
		if (pids[0] == 0) {
			if (metrics_open(path) != 0)
				_exit(3);
			total = counter("charge_provider_calls_total");
			_exit(total == (long long)RACERS * RACE_INCS ? 0 : 1);
		}
		assert_int_equal(waitpid(pids[0], &status, 0), pids[0]);
		assert_int_equal(unlink(path), 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fail_msg("round %d: counts were lost to a concurrent "
			         "creation of the file",
			    round);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_truncated_file),
		cmocka_unit_test(test_create_race),
	};

	return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
