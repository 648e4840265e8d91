/*
 * digest.c - SHA-256, SHA-1, HMAC-SHA256 and random tokens (OpenSSL 3).
 * The EVP_MD objects are fetched once per process (digest_init) because an
 * implicit fetch on every call costs a lock and a lookup.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "digest.h"

#define HMAC_KEY_MAX 256        /* bytes; provider_secret is at most 255 */

static EVP_MD *md_sha256;
static EVP_MD *md_sha1;
static EVP_MAC *mac_hmac;

/*
 * One keyed HMAC context, copied for each use: keying HMAC through
 * EVP_Q_mac looks up two algorithms by name on every call, which cost more
 * than the hashing itself. The lock only guards the copy.
 */
static pthread_mutex_t hmac_lock = PTHREAD_MUTEX_INITIALIZER;
static EVP_MAC_CTX *hmac_template;
static unsigned char hmac_key[HMAC_KEY_MAX];
static size_t hmac_keylen;

int
digest_init(void)
{
	if (md_sha256 == NULL)
		md_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (md_sha1 == NULL)
		md_sha1 = EVP_MD_fetch(NULL, "SHA1", NULL);
	if (mac_hmac == NULL)
		mac_hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	return (md_sha256 != NULL && md_sha1 != NULL && mac_hmac != NULL) ?
	    0 : -1;
}

static const EVP_MD *
sha256(void)
{
	return md_sha256 != NULL ? md_sha256 : EVP_sha256();
}

void
digest_hex(const unsigned char *in, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 0x0f];
	}
	out[2 * n] = '\0';
}

int
digest_sha256_parts(const struct digest_part *parts, size_t nparts,
    unsigned char out[SHA256_LEN])
{
	EVP_MD_CTX *ctx = NULL;
	unsigned int outlen = 0;
	size_t i;
	int rc = -1;

	if ((ctx = EVP_MD_CTX_new()) == NULL)
		goto fail;
	if (EVP_DigestInit_ex2(ctx, sha256(), NULL) != 1)
		goto fail;
	for (i = 0; i < nparts; i++)
		if (EVP_DigestUpdate(ctx, parts[i].p, parts[i].n) != 1)
			goto fail;
	if (EVP_DigestFinal_ex(ctx, out, &outlen) != 1 || outlen != SHA256_LEN)
		goto fail;
	rc = 0;
fail:
	EVP_MD_CTX_free(ctx);
	return rc;
}

int
digest_sha256(const void *p, size_t n, unsigned char out[SHA256_LEN])
{
	unsigned int outlen = 0;

	if (EVP_Digest(p, n, out, &outlen, sha256(), NULL) != 1 ||
	    outlen != SHA256_LEN)
		return -1;
	return 0;
}

int
digest_sha256_hex(const void *p, size_t n, char out[2 * SHA256_LEN + 1])
{
	unsigned char md[SHA256_LEN];

	if (digest_sha256(p, n, md) != 0)
		return -1;
	digest_hex(md, sizeof(md), out);
	return 0;
}

int
digest_sha1_hex(const void *p, size_t n, char out[41])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int outlen = 0;

	if (EVP_Digest(p, n, md, &outlen,
	    md_sha1 != NULL ? md_sha1 : EVP_sha1(), NULL) != 1 || outlen != 20)
		return -1;
	digest_hex(md, 20, out);
	return 0;
}

/* Returns a fresh copy of the context keyed with key; NULL on failure. */
static EVP_MAC_CTX *
hmac_ctx_for(const void *key, size_t keylen)
{
	OSSL_PARAM params[2];
	EVP_MAC_CTX *ctx = NULL, *t;

	if (keylen > HMAC_KEY_MAX || pthread_mutex_lock(&hmac_lock) != 0)
		return NULL;
	if (mac_hmac == NULL && (mac_hmac = EVP_MAC_fetch(NULL, "HMAC",
	    NULL)) == NULL)
		goto done;
	if (hmac_template == NULL || keylen != hmac_keylen ||
	    memcmp(key, hmac_key, keylen) != 0) {
		params[0] = OSSL_PARAM_construct_utf8_string(
		    OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0);
		params[1] = OSSL_PARAM_construct_end();
		if ((t = EVP_MAC_CTX_new(mac_hmac)) == NULL ||
		    EVP_MAC_init(t, key, keylen, params) != 1) {
			EVP_MAC_CTX_free(t);
			goto done;
		}
		EVP_MAC_CTX_free(hmac_template);
		hmac_template = t;
		memcpy(hmac_key, key, keylen);
		hmac_keylen = keylen;
	}
	ctx = EVP_MAC_CTX_dup(hmac_template);
done:
	(void)pthread_mutex_unlock(&hmac_lock);
	return ctx;
}

int
digest_hmac_sha256(const void *key, size_t keylen, const void *data, size_t n,
    unsigned char out[SHA256_LEN])
{
	EVP_MAC_CTX *ctx;
	size_t macl = 0;
	int rc = -1;

	if ((ctx = hmac_ctx_for(key, keylen)) == NULL)
		return -1;
	if (EVP_MAC_update(ctx, data, n) == 1 &&
	    EVP_MAC_final(ctx, out, &macl, SHA256_LEN) == 1 && macl == SHA256_LEN)
		rc = 0;
	EVP_MAC_CTX_free(ctx);
	return rc;
}

/*
 * Random bytes from the kernel's CSPRNG (getrandom(2)), fetched 512 bytes at
 * a time into a per-thread pool: a request needs two 16-byte tokens, and one
 * system call per 16 requests instead of two per request is measurable. The
 * process never forks after start-up, so no pool is ever shared.
 */
#define RANDOM_POOL 512

static _Thread_local unsigned char random_pool[RANDOM_POOL];
static _Thread_local size_t random_left;

int
digest_random_hex(char *out, size_t nbytes)
{
	unsigned char *p;
	size_t got = 0;
	ssize_t n;

	if (nbytes > 64)
		return -1;
	if (random_left < nbytes) {
		while (got < sizeof(random_pool)) {
			n = getrandom(random_pool + got, sizeof(random_pool) - got, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return -1;
			got += (size_t)n;
		}
		random_left = sizeof(random_pool);
	}
	p = random_pool + sizeof(random_pool) - random_left;
	digest_hex(p, nbytes, out);
	/* a byte is handed out once: wipe it */
	memset(p, 0, nbytes);
	random_left -= nbytes;
	return 0;
}
