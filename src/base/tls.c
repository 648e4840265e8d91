/*
 * tls.c - the OpenSSL layer of tls.h.
 */
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "tls.h"
#include "util.h"

static int
tls_file_set(const char *f)
{
	return f != NULL && f[0] != '\0' && strcmp(f, "none") != 0;
}

/* The client certificate and its key into ctx. 0, or -1 with errstr. */
static int
tls_ctx_cert(SSL_CTX *ctx, const struct tls_opts *o, char *errstr,
    size_t errlen)
{
	const char *key =
	    tls_file_set(o->key_file) ? o->key_file : o->cert_file;

	if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1) {
		util_err(errstr, errlen,
		    "TLS: cannot load the client certificate %s: %s",
		    o->cert_file,
		    ERR_reason_error_string(ERR_peek_last_error()));
		return -1;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		util_err(errstr, errlen,
		    "TLS: cannot load the client key %s: %s", key,
		    ERR_reason_error_string(ERR_peek_last_error()));
		return -1;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		util_err(errstr, errlen,
		    "TLS: the key %s does not match the certificate %s", key,
		    o->cert_file);
		return -1;
	}
	return 0;
}

SSL_CTX *
tls_ctx_new(const struct tls_opts *o, int *ca_bad, char *errstr, size_t errlen)
{
	SSL_CTX *ctx;
	int bad = 0;

	if (ca_bad != NULL)
		*ca_bad = 0;
	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		util_err(errstr, errlen, "TLS: SSL_CTX_new failed");
		return NULL;
	}
	(void)SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	if (tls_file_set(o->cert_file) && tls_ctx_cert(ctx, o, errstr, errlen))
		goto fail;
	SSL_CTX_set_verify(ctx, o->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE,
	    NULL);
	if (o->verify) {
		if (tls_file_set(o->ca_file))
			bad = SSL_CTX_load_verify_locations(ctx, o->ca_file,
			          NULL) != 1;
		else
			bad = SSL_CTX_set_default_verify_paths(ctx) != 1;
	}
	if (bad && ca_bad == NULL) {
		util_err(errstr, errlen, "TLS: cannot load the CA file %s: %s",
		    tls_file_set(o->ca_file) ? o->ca_file : "(the system's)",
		    ERR_reason_error_string(ERR_peek_last_error()));
		goto fail;
	}
	if (bad)
		*ca_bad = 1;
	ERR_clear_error();
	return ctx;
fail:
	ERR_clear_error();
	SSL_CTX_free(ctx);
	return NULL;
}

/* name's certificate check: an IP literal by address, else by DNS name. */
static int
tls_set_name(SSL *ssl, const char *name, int verify)
{
	X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
	int ip = X509_VERIFY_PARAM_set1_ip_asc(vp, name) == 1;

	if (!ip && SSL_set_tlsext_host_name(ssl, name) != 1)
		return -1;
	if (!verify || ip)
		return 0;
	X509_VERIFY_PARAM_set_hostflags(vp,
	    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	return X509_VERIFY_PARAM_set1_host(vp, name, 0) == 1 ? 0 : -1;
}

SSL *
tls_new(SSL_CTX *ctx, const char *name, int verify, size_t bio_buf, BIO **net)
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
	if (tls_set_name(ssl, name, verify) != 0) {
		SSL_free(ssl);
		BIO_free(*net);
		*net = NULL;
		ERR_clear_error();
		return NULL;
	}
	return ssl;
}

SSL *
tls_new_fd(SSL_CTX *ctx, const char *name, int verify, int fd)
{
	SSL *ssl;

	if ((ssl = SSL_new(ctx)) == NULL)
		return NULL;
	SSL_set_connect_state(ssl);
	if (SSL_set_fd(ssl, fd) != 1 || tls_set_name(ssl, name, verify) != 0) {
		SSL_free(ssl);
		ERR_clear_error();
		return NULL;
	}
	return ssl;
}

/* The reason of OpenSSL's last error, and a hint when it says plain text. */
static void
tls_why_error(unsigned long e, char *why, size_t whylen)
{
	int r = ERR_GET_REASON(e);
	const char *s = ERR_reason_error_string(e);

	if (r == SSL_R_WRONG_VERSION_NUMBER ||
	    r == SSL_R_PACKET_LENGTH_TOO_LONG || r == SSL_R_UNKNOWN_PROTOCOL ||
	    r == SSL_R_RECORD_LENGTH_MISMATCH || r == SSL_R_HTTP_REQUEST)
		util_err(why, whylen,
		    "TLS: %s (the server does not speak TLS on this port)",
		    s != NULL ? s : "not TLS");
	else
		util_err(why, whylen, "TLS: %s",
		    s != NULL ? s : "protocol error");
}

/* A failed step's SSL_get_error code err (rc: the call's result) classified. */
static enum tls_step
tls_classify(SSL *ssl, int rc, char *why, size_t whylen)
{
	int err = SSL_get_error(ssl, rc);
	long v;
	unsigned long e;

	switch (err) {
	case SSL_ERROR_WANT_READ: return TLS_WANT_READ;
	case SSL_ERROR_WANT_WRITE: return TLS_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		util_err(why, whylen, "TLS: the server closed the session");
		return TLS_CLOSED;
	default: break;
	}
	if (!SSL_is_init_finished(ssl) &&
	    (v = SSL_get_verify_result(ssl)) != X509_V_OK)
		util_err(why, whylen, "TLS: certificate verify failed: %s",
		    X509_verify_cert_error_string(v));
	else if ((e = ERR_peek_last_error()) != 0)
		tls_why_error(e, why, whylen);
	else
		util_err(why, whylen, "TLS: the connection broke (%s)",
		    err == SSL_ERROR_SYSCALL ? "unexpected end" : "SSL error");
	ERR_clear_error();
	return TLS_FAIL;
}

enum tls_step
tls_handshake(SSL *ssl, char *why, size_t whylen)
{
	int rc;

	ERR_clear_error();
	if ((rc = SSL_do_handshake(ssl)) == 1)
		return TLS_OK;
	return tls_classify(ssl, rc, why, whylen);
}

enum tls_step
tls_read(SSL *ssl, void *buf, size_t n, size_t *got, char *why, size_t whylen)
{
	enum tls_step st;
	size_t k = 0;
	int rc;

	*got = 0;
	ERR_clear_error();
	if ((rc = SSL_read_ex(ssl, buf, n, &k)) == 1) {
		*got = k;
		st = TLS_OK;
	} else if ((st = tls_classify(ssl, rc, why, whylen)) != TLS_WANT_READ)
		return st;
	/*
	 * A KeyUpdate that asked for ours: OpenSSL would send it with our next
	 * write; written into the BIO pair now, for the caller to send.
	 */
	if (SSL_get_key_update_type(ssl) != SSL_KEY_UPDATE_NONE &&
	    SSL_do_handshake(ssl) != 1) {
		ERR_clear_error();
		if (st == TLS_WANT_READ)
			return TLS_WANT_WRITE; /* the pair is full: send, read again */
	}
	return st;
}

enum tls_step
tls_write(SSL *ssl, const void *buf, size_t n, size_t *put, char *why,
    size_t whylen)
{
	size_t k = 0;
	int rc;

	*put = 0;
	ERR_clear_error();
	if ((rc = SSL_write_ex(ssl, buf, n, &k)) == 1) {
		*put = k;
		return TLS_OK;
	}
	return tls_classify(ssl, rc, why, whylen);
}

int
tls_read_more(SSL *ssl)
{
	return SSL_has_pending(ssl) || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0;
}

size_t
tls_net_out(BIO *net, char **p)
{
	int n = BIO_nread0(net, p);

	return n > 0 ? (size_t)n : 0;
}

void
tls_net_out_done(BIO *net, size_t n)
{
	char *p;

	(void)BIO_nread(net, &p, (int)n);
}

size_t
tls_net_in(BIO *net, char **p)
{
	int n = BIO_nwrite0(net, p);

	return n > 0 ? (size_t)n : 0;
}

void
tls_net_in_done(BIO *net, size_t n)
{
	char *p;

	(void)BIO_nwrite(net, &p, (int)n);
}
