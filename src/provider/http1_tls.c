/*
 * http1_tls.c - the TLS of http1_tls.h.
 */
#include <string.h>

#include <openssl/err.h>

#include "http1_tls.h"
#include "util.h"

SSL_CTX *
h1_tls_ctx(int verify, const char *ca, int *ca_bad, char *errstr, size_t errlen)
{
	SSL_CTX *ctx;

	*ca_bad = 0;
	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		util_err(errstr, errlen, "provider: SSL_CTX_new failed");
		return NULL;
	}
	(void)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	if (!verify) {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
		return ctx;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (ca != NULL && ca[0] != '\0' && strcmp(ca, "none") != 0) {
		/* a file that cannot be read fails every request, as libcurl did */
		if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
			*ca_bad = 1;
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		*ca_bad = 1;
	}
	ERR_clear_error();
	return ctx;
}

SSL *
h1_tls_new(SSL_CTX *ctx, const char *host, int sni, int verify, size_t bio_buf,
    BIO **net)
{
	BIO *inner = NULL;
	SSL *ssl;

	*net = NULL;
	if ((ssl = SSL_new(ctx)) == NULL)
		return NULL;
	if (BIO_new_bio_pair(&inner, bio_buf, net, bio_buf) != 1) {
		SSL_free(ssl);
		return NULL;
	}
	/* the SSL owns the inner side from here */
	SSL_set_bio(ssl, inner, inner);
	SSL_set_connect_state(ssl);
	if ((sni && SSL_set_tlsext_host_name(ssl, host) != 1) ||
	    (verify && SSL_set1_host(ssl, host) != 1)) {
		SSL_free(ssl);
		BIO_free(*net);
		*net = NULL;
		return NULL;
	}
	return ssl;
}
