/*
 * listen.c - the listening socket of a FastCGI process: recognised on fd 0,
 * or opened for --listen (a unix socket, or TCP on every address a name
 * resolves to, the first that binds).
 */
#include <errno.h>
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
