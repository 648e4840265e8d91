/*
 * digest.c - SHA-256, SHA-1, HMAC-SHA256 and random tokens (OpenSSL 3).
 * The EVP_MD objects are fetched once per process (digest_init) because an
 * implicit fetch on every call costs a lock and a lookup.
 */
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "digest.h"

static EVP_MD *md_sha256;
static EVP_MD *md_sha1;

int
digest_init(void)
{
	if (md_sha256 == NULL)
		md_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
	if (md_sha1 == NULL)
		md_sha1 = EVP_MD_fetch(NULL, "SHA1", NULL);
	return (md_sha256 != NULL && md_sha1 != NULL) ? 0 : -1;
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

int
digest_hmac_sha256(const void *key, size_t keylen, const void *data, size_t n,
    unsigned char out[SHA256_LEN])
{
	unsigned int outlen = 0;

	if (keylen > (size_t)INT32_MAX)
		return -1;
	if (HMAC(sha256(), key, (int)keylen, data, n, out, &outlen) == NULL ||
	    outlen != SHA256_LEN)
		return -1;
	return 0;
}

int
digest_random_hex(char *out, size_t nbytes)
{
	unsigned char buf[64];

	if (nbytes > sizeof(buf) || nbytes > (size_t)INT32_MAX)
		return -1;
	if (RAND_bytes(buf, (int)nbytes) != 1)
		return -1;
	digest_hex(buf, nbytes, out);
	return 0;
}
