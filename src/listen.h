/*
 * listen.h - the listening socket of a FastCGI process: inherited as fd 0
 * (lighttpd bin-path, mod_fcgid, spawn-fcgi) or opened for --listen.
 */
#ifndef CHARGE_LISTEN_H
#define CHARGE_LISTEN_H

/* 1 when fd is a listening socket (FastCGI's fd 0), else 0: CGI. */
int listen_fd_is_listener(int fd);

/*
 * --listen ADDR: a unix socket path (a stale socket there is replaced), or
 * HOST:PORT, [V6]:PORT or :PORT (every address). The descriptor, or -1
 * (errno, or a getaddrinfo failure).
 */
int listen_open(const char *addr);

#endif
