/*
 * http1_proxy.h - the proxy of the native HTTP/1.1 client (http1.h), taken
 * from the environment as libcurl takes it: https_proxy (or HTTPS_PROXY)
 * for an https provider, http_proxy (lower case only: under CGI,
 * HTTP_PROXY may come from a request's Proxy: header) for an http one,
 * all_proxy (or ALL_PROXY) for either when those are unset, and no_proxy
 * (or NO_PROXY) naming the hosts reached directly. No I/O: the proxy's
 * address, the Proxy-Authorization line, and the reading of the answer to
 * CONNECT.
 */
#ifndef CHARGE_HTTP1_PROXY_H
#define CHARGE_HTTP1_PROXY_H

#include <stddef.h>

#define H1_PROXY_PORT 1080 /* libcurl's default for a proxy URL without one */

/* An http:// proxy. */
struct h1_proxy {
	char host[256]; /* a name or an address literal (no brackets) */
	int port;
	char auth[400]; /* "Proxy-Authorization: Basic ...\r\n", or "" */
};

/*
 * The proxy for a provider at host (tls: https), from the environment: 1
 * with *out filled, 0 when none applies (no variable set, or no_proxy
 * names the host), -1 when the variable cannot be used (not http://, too
 * long, no host: errstr).
 */
int h1_proxy_env(int tls, const char *host, struct h1_proxy *out, char *errstr,
    size_t errlen);

/* 1 when the no_proxy list names host (libcurl's rules), 0 otherwise. */
int h1_proxy_skip(const char *no_proxy, const char *host);

/* The CONNECT request for authority ("host:port") in buf; its length or -1. */
int h1_proxy_connect(const struct h1_proxy *px, const char *authority,
    char *buf, size_t cap);

/*
 * Reads the proxy's answer to CONNECT in buf[0..len): 0 while its head is
 * incomplete; its length (the bytes up to and including the empty line)
 * with *status set; -1 as soon as it is not an HTTP/1.0 or HTTP/1.1
 * status line with a status 100-999.
 */
int h1_proxy_answer(const char *buf, size_t len, int *status);

#endif
