/*
 * notify.c - the sd_notify(3) protocol, written out (docs/decisions.md):
 * one datagram of newline-separated assignments to the AF_UNIX socket
 * named by $NOTIFY_SOCKET, a path or, with a leading '@', an abstract name.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"

int
notify_send(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	size_t len;
	socklen_t salen;
	ssize_t n;
	int fd, saved;

	if (path == NULL || path[0] == '\0')
		return 0;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path)) {
		errno = EINVAL;
		return -1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* the abstract namespace */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
	    (path[0] == '/' ? 1 : 0));
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	do
		n = sendto(fd, state, strlen(state), MSG_NOSIGNAL,
		    (struct sockaddr *)&sa, salen);
	while (n < 0 && errno == EINTR);
	saved = errno;
	(void)close(fd);
	errno = saved;
	return n == (ssize_t)strlen(state) ? 1 : -1;
}
