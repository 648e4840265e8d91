/*
 * tls.h - the one OpenSSL layer of the project's clients: the provider's
 * HTTP/1.1 client (provider/http1.c) and the Redis clients (redis/). A
 * context that verifies (a CA file or the system's store, an optional
 * client certificate), a connection's SSL on a BIO pair whose network side
 * the caller moves to and from its socket, and the steps of the
 * non-blocking state machine, each classified, with the cause of a
 * failure in one line. No I/O of its own: nothing here can block.
 */
#ifndef CHARGE_TLS_H
#define CHARGE_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

#define TLS_WHY_MAX 160 /* bytes of a failure's cause */

struct tls_opts {
	int verify;            /* the peer's certificate and name */
	const char *ca_file;   /* NULL, "" or "none": the system's store */
	const char *cert_file; /* a client certificate (mutual TLS), or "" */
	const char *key_file;  /* its key ("": in cert_file) */
};

/*
 * A client context, TLS 1.2 or later. A CA store that cannot be read sets
 * *ca_bad when ca_bad is not NULL (the caller fails each connection
 * instead), else it is an error. NULL with errstr when OpenSSL cannot make
 * one or the client certificate or key cannot be loaded. SSL_CTX_free().
 */
SSL_CTX *tls_ctx_new(const struct tls_opts *o, int *ca_bad, char *errstr,
    size_t errlen);

/*
 * A connection's SSL in the connect state, on a BIO pair of bio_buf bytes
 * each way whose network side is *net (freed by the caller; the SSL frees
 * its own side). name: sent as the server name when it is a DNS name, and
 * with verify the certificate must carry it (a DNS name, or an IP address
 * among the certificate's addresses). NULL on ENOMEM or a bad name.
 */
SSL *tls_new(SSL_CTX *ctx, const char *name, int verify, size_t bio_buf,
    BIO **net);

/*
 * A connection's SSL in the connect state straight on the socket fd (a
 * blocking one: charge-reconcile's reads, bounded by the socket's
 * SO_RCVTIMEO and SO_SNDTIMEO); name and verify as tls_new(). NULL on
 * ENOMEM or a bad name.
 */
SSL *tls_new_fd(SSL_CTX *ctx, const char *name, int verify, int fd);

/* What a step of the state machine came to. */
enum tls_step {
	TLS_OK,         /* done: bytes moved, or the handshake finished */
	TLS_WANT_READ,  /* needs records from the peer first */
	TLS_WANT_WRITE, /* the BIO pair is full: move it to the socket first */
	TLS_CLOSED,     /* the peer closed the TLS session (close_notify) */
	TLS_FAIL,       /* a protocol or verification error: *why says which */
};

/*
 * The handshake, a step: TLS_OK when it is done (verified when asked),
 * TLS_WANT_* to be called again, else TLS_FAIL (or TLS_CLOSED when the
 * peer hung up mid-way) with why.
 */
enum tls_step tls_handshake(SSL *ssl, char *why, size_t whylen);

/*
 * Up to n bytes of plain text into buf: their number in *got (TLS_OK). A
 * record read may carry a key update or a renegotiation request whose
 * answer goes into the BIO pair (a TLS 1.3 KeyUpdate that asks for ours
 * too: written here, not with the next write as OpenSSL would): the caller
 * moves the pair's output to the socket after reading, and retries a write
 * that wanted to read.
 */
enum tls_step tls_read(SSL *ssl, void *buf, size_t n, size_t *got, char *why,
    size_t whylen);

/*
 * n bytes of plain text from buf into records in the BIO pair, or with
 * SSL_MODE_ENABLE_PARTIAL_WRITE set on ssl fewer: their number in *put
 * (TLS_OK). A retry passes the same bytes (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER
 * lets them move). TLS_WANT_WRITE: move the pair to the socket and call
 * again; TLS_WANT_READ (a renegotiation under way): call again after
 * reading.
 */
enum tls_step tls_write(SSL *ssl, const void *buf, size_t n, size_t *put,
    char *why, size_t whylen);

/*
 * 1 when a tls_read() may give more: records read but not yet decrypted,
 * or bytes the BIO pair holds for the SSL. 0: it would want to read.
 */
int tls_read_more(SSL *ssl);

/*
 * The BIO pair's network side without copies: the bytes waiting for the
 * socket (*p, their number returned; 0: none) and, once sent, n of them
 * consumed; the room for bytes read from the socket (*p, its size) and n
 * of them filled.
 */
size_t tls_net_out(BIO *net, char **p);
void tls_net_out_done(BIO *net, size_t n);
size_t tls_net_in(BIO *net, char **p);
void tls_net_in_done(BIO *net, size_t n);

#endif
