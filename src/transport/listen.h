/*
 * listen.h - the listening socket of a FastCGI process: inherited as fd 0
 * (lighttpd bin-path, mod_fcgid, spawn-fcgi), passed by a service manager
 * (systemd socket activation: LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES), or
 * opened for --listen.
 */
#ifndef CHARGE_LISTEN_H
#define CHARGE_LISTEN_H

#include <stddef.h>

/* 1 when fd is a listening socket (FastCGI's fd 0), else 0: CGI. */
int listen_fd_is_listener(int fd);

/*
 * --listen ADDR: a unix socket path (a stale socket there is replaced), or
 * HOST:PORT, [V6]:PORT or :PORT (every address). The descriptor, or -1
 * (errno, or a getaddrinfo failure).
 */
int listen_open(const char *addr);

/* The first descriptor of socket activation (SD_LISTEN_FDS_START). */
#define LISTEN_FDS_START 3
#define LISTEN_FDS_MAX 64 /* descriptors a manager may pass us, at most */

/*
 * The socket a service manager passed with the socket-activation protocol:
 * LISTEN_PID is this process and LISTEN_FDS counts descriptors from fd 3;
 * with several, the one LISTEN_FDNAMES names "charge" or "charge.socket"
 * (else the first).
 * The variables are removed (a child would not inherit them) and the
 * descriptor made close-on-exec. The descriptor; -1 when none was passed;
 * -2 when the variables are wrong or the descriptor is no listening socket
 * (err says why).
 */
int listen_inherited(char *err, size_t errlen);

#endif
