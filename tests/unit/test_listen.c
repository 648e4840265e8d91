/*
 * test_listen.c - the socket-activation protocol (listen_inherited: LISTEN_PID,
 * LISTEN_FDS, LISTEN_FDNAMES) and the sd_notify datagram (notify_send) on
 * real sockets: a passed listener is found, one meant for another process
 * or absent is not, bad variables and a descriptor that is no listener are
 * refused, the named one of several is chosen; READY=1 reaches a datagram
 * socket by path and by abstract name.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "listen.h"
#include "notify.h"

/* A listening unix socket (abstract name: no file) on descriptor fd. */
static void
listener_at(int fd)
{
	struct sockaddr_un sa;
	int s = socket(AF_UNIX, SOCK_STREAM, 0);

	assert_true(s >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	/* autobind: an abstract address of the kernel's choosing */
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa_family_t)),
	    0);
	assert_int_equal(listen(s, 4), 0);
	if (s != fd) {
		assert_int_equal(dup2(s, fd), fd);
		(void)close(s);
	}
}

static void
set_env(const char *pid, const char *fds, const char *names)
{
	char own[32];

	if (pid != NULL && strcmp(pid, "self") == 0) {
		(void)snprintf(own, sizeof(own), "%ld", (long)getpid());
		pid = own;
	}
	(void)unsetenv("LISTEN_PID");
	(void)unsetenv("LISTEN_FDS");
	(void)unsetenv("LISTEN_FDNAMES");
	if (pid != NULL)
		assert_int_equal(setenv("LISTEN_PID", pid, 1), 0);
	if (fds != NULL)
		assert_int_equal(setenv("LISTEN_FDS", fds, 1), 0);
	if (names != NULL)
		assert_int_equal(setenv("LISTEN_FDNAMES", names, 1), 0);
}

static void
test_passed_listener(void **state)
{
	char err[128];

	(void)state;
	listener_at(3);
	set_env("self", "1", "charge");
	assert_int_equal(listen_inherited(err, sizeof(err)), 3);
	/* the variables are gone (a child does not inherit them) */
	assert_null(getenv("LISTEN_PID"));
	assert_null(getenv("LISTEN_FDS"));
	assert_null(getenv("LISTEN_FDNAMES"));
	assert_true((fcntl(3, F_GETFD) & FD_CLOEXEC) != 0);
	(void)close(3);
}

static void
test_none_or_other(void **state)
{
	char err[128];

	(void)state;
	set_env(NULL, NULL, NULL);
	assert_int_equal(listen_inherited(err, sizeof(err)), -1);
	/* meant for another process: left alone */
	set_env("1", "1", NULL);
	assert_int_equal(listen_inherited(err, sizeof(err)), -1);
	set_env("self", "0", NULL);
	assert_int_equal(listen_inherited(err, sizeof(err)), -1);
}

static void
test_bad_variables(void **state)
{
	char err[128];

	(void)state;
	set_env("self", "one", NULL);
	assert_int_equal(listen_inherited(err, sizeof(err)), -2);
	assert_non_null(strstr(err, "LISTEN_FDS"));
	set_env("12x", "1", NULL);
	assert_int_equal(listen_inherited(err, sizeof(err)), -2);
	/* over LISTEN_FDS_MAX */
	set_env("self", "65", NULL);
	assert_int_equal(listen_inherited(err, sizeof(err)), -2);
	/* descriptor 3 is a pipe: no listening socket */
	{
		int p[2];

		assert_int_equal(pipe(p), 0);
		if (p[0] != 3)
			assert_int_equal(dup2(p[0], 3), 3);
		set_env("self", "1", NULL);
		assert_int_equal(listen_inherited(err, sizeof(err)), -2);
		assert_non_null(strstr(err, "not a listening socket"));
		(void)close(3);
		if (p[0] != 3)
			(void)close(p[0]);
		(void)close(p[1]);
	}
}

static void
test_named_of_several(void **state)
{
	char err[128];

	(void)state;
	listener_at(3);
	listener_at(4);
	set_env("self", "2", "metrics:charge");
	assert_int_equal(listen_inherited(err, sizeof(err)), 4);
	/* systemd's default name is the socket unit's */
	set_env("self", "2", "other.socket:charge.socket");
	assert_int_equal(listen_inherited(err, sizeof(err)), 4);
	/* no such name: the first */
	set_env("self", "2", "a:b");
	assert_int_equal(listen_inherited(err, sizeof(err)), 3);
	(void)close(3);
	(void)close(4);
}

/* A datagram socket bound at path (abstract when path starts with '@'). */
static int
dgram_at(const char *path)
{
	struct sockaddr_un sa;
	socklen_t len;
	int s = socket(AF_UNIX, SOCK_DGRAM, 0);

	assert_true(s >= 0);
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, strlen(path));
	len =
	    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	else
		len++;
	assert_int_equal(bind(s, (struct sockaddr *)&sa, len), 0);
	return s;
}

static void
test_notify(void **state)
{
	char path[64], got[64];
	ssize_t n;
	int s;

	(void)state;
	(void)unsetenv("NOTIFY_SOCKET");
	assert_int_equal(notify_send("READY=1"), 0);
	(void)snprintf(path, sizeof(path), "/tmp/charge-test-notify.%ld",
	    (long)getpid());
	(void)unlink(path);
	s = dgram_at(path);
	assert_int_equal(setenv("NOTIFY_SOCKET", path, 1), 0);
	assert_int_equal(notify_send("READY=1\nSTATUS=serving"), 1);
	n = recv(s, got, sizeof(got) - 1, 0);
	assert_int_equal(n, (ssize_t)strlen("READY=1\nSTATUS=serving"));
	got[n] = '\0';
	assert_string_equal(got, "READY=1\nSTATUS=serving");
	(void)close(s);
	(void)unlink(path);
	/* nobody listens there any more: a failure, said */
	assert_int_equal(notify_send("STOPPING=1"), -1);
	(void)snprintf(path, sizeof(path), "@charge-test-notify.%ld",
	    (long)getpid());
	s = dgram_at(path);
	assert_int_equal(setenv("NOTIFY_SOCKET", path, 1), 0);
	assert_int_equal(notify_send("RELOADING=1"), 1);
	n = recv(s, got, sizeof(got) - 1, 0);
	assert_int_equal(n, (ssize_t)strlen("RELOADING=1"));
	(void)close(s);
	assert_int_equal(setenv("NOTIFY_SOCKET", "relative", 1), 0);
	assert_int_equal(notify_send("READY=1"), -1);
	(void)unsetenv("NOTIFY_SOCKET");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_passed_listener),
		cmocka_unit_test(test_none_or_other),
		cmocka_unit_test(test_bad_variables),
		cmocka_unit_test(test_named_of_several),
		cmocka_unit_test(test_notify),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
