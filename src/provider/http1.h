/*
 * http1.h - a small HTTP/1.1 client on a libuv loop, for the provider's
 * kept connections: TCP or a unix socket, TLS with OpenSSL (certificate
 * and host name verified), answers parsed with llhttp (Content-Length,
 * chunked, or until the connection closes). One request per connection at
 * a time; idle connections are kept per pool and reused last in, first
 * out. A request is one write: its head and body in one buffer.
 *
 * What a request came to says what the provider may have seen: sends
 * counts the deliveries (a byte of the request written to a socket); a
 * kept connection found dead before any byte of the request was written
 * is left and the request goes out on another one, uncounted.
 *
 * Through a proxy (http1_proxy.h), a connection is to the proxy: for an
 * https provider, a CONNECT tunnel to it first, then TLS through the
 * tunnel, verified against the provider's name as without a proxy.
 */
#ifndef CHARGE_HTTP1_H
#define CHARGE_HTTP1_H

#include <stddef.h>

#include <uv.h>

#include "http1_proxy.h"
#include "http1_read.h"

struct h1_pool;
struct h1_req;

/* Where a pool connects, and how. */
struct h1_target {
	const char *host; /* a name or an address literal; "" for unix: */
	int port;
	int tls;
	const char *unix_path; /* "" : TCP */
	const char *ca_file;   /* "" or "none": the system's store */
	int verify;            /* 0: no certificate verification (tests) */
	int connect_timeout_ms;
	int max_idle_s; /* a kept connection idle longer is closed, not reused */
	int idle_max;   /* idle connections kept at most */
	/*
	 * NULL, or the proxy every connection goes through (not with
	 * unix_path): https through a CONNECT tunnel, http with the request
	 * target in absolute form.
	 */
	const struct h1_proxy *proxy;
};

/* How a request ended. */
enum h1_err {
	H1_OK,         /* a complete answer: status */
	H1_RESOLVE,    /* the host name did not resolve */
	H1_CONNECT,    /* no connection (refused, unreachable; or the proxy) */
	H1_TLS_VERIFY, /* the certificate or its name was refused */
	H1_TLS_CA,     /* the CA file cannot be read */
	H1_TLS,        /* the TLS handshake failed otherwise */
	H1_PROXY,      /* the proxy refused the tunnel (CONNECT not 2xx) */
	H1_TIMEOUT,    /* the connect or total timeout */
	H1_CLOSED,     /* the connection closed or reset before a full answer */
	H1_BAD_RESPONSE, /* not an HTTP/1.x answer */
	H1_ABORTED,      /* the body callback refused the answer */
	H1_NOMEM,
};

struct h1_result {
	enum h1_err err;
	int status;      /* the answer's; 0 unless H1_OK */
	int sends;       /* deliveries: writes of a byte of the request */
	const char *why; /* static text of err, for the log */
};

/* h1_header_fn, h1_body_fn (-1: H1_ABORTED): http1_read.h */
/* The request is over; the request is freed after it returns. */
typedef void h1_done_fn(void *arg, const struct h1_result *r);

/*
 * A pool on loop for target (copied). NULL with errstr on failure (the
 * TLS context cannot be made).
 */
struct h1_pool *h1_pool_new(uv_loop_t *loop, const struct h1_target *t,
    char *errstr, size_t errlen);

/*
 * Closes every connection; the pool is freed once libuv closed them. No
 * request may be in flight (h1_cancel them first). NULL-safe.
 */
void h1_pool_free(struct h1_pool *p);

/*
 * Starts method target (origin form: "/v1/charges") with the header
 * lines of hdrs (a NULL-terminated list of strings, each of whole lines
 * ending "\r\n"; Host and, with a body, Content-Length are added) and
 * body[0..bodylen) (NULL: none), ending within timeout_ms. done is called
 * once, never before h1_request returned. NULL on ENOMEM.
 */
struct h1_req *h1_request(struct h1_pool *p, const char *method,
    const char *target, const char *const *hdrs, const char *body,
    size_t bodylen, long timeout_ms, h1_header_fn *header, h1_body_fn *bodyfn,
    h1_done_fn *done, void *arg);

/* Ends a request without calling done (its connection is closed). */
void h1_cancel(struct h1_req *r);

#endif
