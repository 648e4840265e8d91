/*
 * listen.c - the listening socket of a FastCGI process: recognised on fd 0,
 * passed by a service manager (the socket-activation protocol of
 * sd_listen_fds(3), read here: three environment variables), or opened
 * for --listen (a unix socket, or TCP on every address a name
 * resolves to, the first that binds).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "listen.h"

#define LISTEN_BACKLOG 1024 /* connections the kernel queues for us */

int
listen_fd_is_listener(int fd)
{
	int v = 0;
	socklen_t len = sizeof(v);

	return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 &&
	    v != 0;
}

/* A unix socket at path (a stale socket there is replaced). -1: errno. */
static int
listen_unix(const char *path)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		(void)unlink(path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, LISTEN_BACKLOG) != 0) {
		(void)close(fd);
		return -1;
	}
	return fd;
}
/* HOST:PORT, [V6]:PORT or :PORT (every address). -1: errno or EAI. */
static int
listen_tcp(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints, *ai = NULL, *a;
	size_t hl = (size_t)(colon - addr);
	int fd = -1, on = 1;

	if (hl >= sizeof(host))
		return -1;
	memcpy(host, addr, hl);
	host[hl] = '\0';
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (getaddrinfo(host[0] != '\0' ? host : NULL, colon + 1, &hints,
	        &ai) != 0)
		return -1;
	for (a = ai; a != NULL; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC,
		    a->ai_protocol);
		if (fd < 0)
			continue;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) ==
		        0 &&
		    bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
		    listen(fd, LISTEN_BACKLOG) == 0)
			break;
		(void)close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

int
listen_open(const char *addr)
{
	if (addr[0] == '/' || strchr(addr, ':') == NULL)
		return listen_unix(addr);
	return listen_tcp(addr);
}

/* A decimal environment value in [min, max], or -1. */
static long
env_number(const char *name, long min, long max)
{
	const char *v = getenv(name);
	char *end;
	long n;

	if (v == NULL || *v == '\0')
		return -1;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno != 0 || *end != '\0' || n < min || n > max)
		return -1;
	return n;
}

/* 1 when the name at p (ended by ':' or NUL) is want. */
static int
listen_name_is(const char *p, const char *want)
{
	size_t n = strlen(want);

	return strncmp(p, want, n) == 0 && (p[n] == ':' || p[n] == '\0');
}

/*
 * The index of "charge" (FileDescriptorName=) or "charge.socket" (systemd's
 * default, the unit's name) in the colon-separated names, or 0.
 */
static int
listen_pick_named(const char *names, int n)
{
	const char *p = names;
	int i;

	for (i = 0; p != NULL && i < n; i++) {
		if (listen_name_is(p, "charge") ||
		    listen_name_is(p, "charge.socket"))
			return i;
		p = strchr(p, ':');
		if (p != NULL)
			p++;
	}
	return 0;
}

int
listen_inherited(char *err, size_t errlen)
{
	long pid = env_number("LISTEN_PID", 1, 0x7fffffffL);
	long n = env_number("LISTEN_FDS", 0, LISTEN_FDS_MAX);
	const char *names = getenv("LISTEN_FDNAMES");
	int fd, fl;

	if (getenv("LISTEN_PID") == NULL && getenv("LISTEN_FDS") == NULL)
		return -1;
	if (pid < 0 || n < 0) {
		(void)snprintf(err, errlen,
		    "LISTEN_PID or LISTEN_FDS is not a number in range");
		return -2;
	}
	if (pid != (long)getpid())
		return -1; /* meant for another process (the manager's parent) */
	fd = LISTEN_FDS_START +
	    (names != NULL ? listen_pick_named(names, (int)n) : 0);
	(void)unsetenv("LISTEN_PID");
	(void)unsetenv("LISTEN_FDS");
	(void)unsetenv("LISTEN_FDNAMES");
	if (n == 0)
		return -1;
	if ((fl = fcntl(fd, F_GETFD)) < 0 ||
	    fcntl(fd, F_SETFD, fl | FD_CLOEXEC) != 0) {
		(void)snprintf(err, errlen, "passed descriptor %d: %s", fd,
		    strerror(errno));
		return -2;
	}
	if (!listen_fd_is_listener(fd)) {
		(void)snprintf(err, errlen,
		    "passed descriptor %d is not a listening socket", fd);
		return -2;
	}
	return fd;
}
