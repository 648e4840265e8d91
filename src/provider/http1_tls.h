/*
 * http1_tls.h - the TLS of the native HTTP/1.1 client (http1.h), with
 * OpenSSL: a context that verifies against a CA file or the system's
 * store, and a connection's SSL on a BIO pair (the client moves the
 * records between the pair and its socket).
 */
#ifndef CHARGE_HTTP1_TLS_H
#define CHARGE_HTTP1_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

/*
 * A client context, TLS 1.2 or later; verify: the peer's certificate
 * against ca (a file; "" or "none": the system's store). A store that
 * cannot be read sets *ca_bad (every request then fails, as with
 * libcurl). NULL with errstr when OpenSSL cannot make one.
 */
SSL_CTX *h1_tls_ctx(int verify, const char *ca, int *ca_bad, char *errstr,
    size_t errlen);

/*
 * A connection's SSL in the connect state, for host (sni: sent as the
 * server name; verify: the certificate must carry it), on a BIO pair of
 * bio_buf bytes each way whose network side is *net. NULL on ENOMEM.
 */
SSL *h1_tls_new(SSL_CTX *ctx, const char *host, int sni, int verify,
    size_t bio_buf, BIO **net);

#endif
