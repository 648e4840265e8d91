/*
 * digest.c - SHA-256, SHA-1, HMAC-SHA256 and random tokens (OpenSSL 3).
 * The EVP_MD objects are fetched once per process (digest_init) because an
 * implicit fetch on every call costs a lock and a lookup.
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "digest.h"

#define HMAC_KEY_MAX 256 /* bytes; provider_secret is at most 255 */
#define SHA256_BLOCK 64  /* bytes: the HMAC block size */

static EVP_MD *md_sha256;
static EVP_MD *md_sha1;
/*
 * Each thread keeps its own digest contexts: one to work in, and HMAC's
 * inner and outer states with the key already absorbed, so an HMAC costs
 * two context copies and no key schedule, and nothing is shared between
 * threads (no lock). digest_thread_done() frees them.
 */
struct digest_tls {
	EVP_MD_CTX *work, *inner, *outer;
	unsigned char key[HMAC_KEY_MAX];
	size_t keylen;
	int keyed;
};

static _Thread_local struct digest_tls tls;

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

/* This thread's work context, created on first use; NULL on ENOMEM. */
static EVP_MD_CTX *
work_ctx(void)
{
	if (tls.work == NULL)
		tls.work = EVP_MD_CTX_new();
	return tls.work;
}

void
digest_thread_done(void)
{
	EVP_MD_CTX_free(tls.work);
	EVP_MD_CTX_free(tls.inner);
	EVP_MD_CTX_free(tls.outer);
	OPENSSL_cleanse(&tls,
	    sizeof(tls)); /* zeroes it: pointers NULL, keyed 0 */
}

int
digest_sha256_parts(const struct digest_part *parts, size_t nparts,
    unsigned char out[SHA256_LEN])
{
	EVP_MD_CTX *ctx = work_ctx();
	unsigned int outlen = 0;
	size_t i;

	if (ctx == NULL || EVP_DigestInit_ex2(ctx, sha256(), NULL) != 1)
		return -1;
	for (i = 0; i < nparts; i++)
		if (EVP_DigestUpdate(ctx, parts[i].p, parts[i].n) != 1)
			return -1;
	if (EVP_DigestFinal_ex(ctx, out, &outlen) != 1 || outlen != SHA256_LEN)
		return -1;
	return 0;
}

int
digest_sha256(const void *p, size_t n, unsigned char out[SHA256_LEN])
{
	struct digest_part part = { p, n };

	return digest_sha256_parts(&part, 1, out);
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
	        md_sha1 != NULL ? md_sha1 : EVP_sha1(), NULL) != 1 ||
	    outlen != 20)
		return -1;
	digest_hex(md, 20, out);
	return 0;
}

/* Absorbs the key padded with pad (0x36 or 0x5c) into a fresh *ctx. */
static int
hmac_half(EVP_MD_CTX **ctx, const unsigned char k0[SHA256_BLOCK],
    unsigned char pad)
{
	unsigned char block[SHA256_BLOCK];
	size_t i;
	int rc;

	if (*ctx == NULL && (*ctx = EVP_MD_CTX_new()) == NULL)
		return -1;
	for (i = 0; i < SHA256_BLOCK; i++)
		block[i] = k0[i] ^ pad;
	rc = EVP_DigestInit_ex2(*ctx, sha256(), NULL) == 1 &&
	        EVP_DigestUpdate(*ctx, block, sizeof(block)) == 1
	    ? 0
	    : -1;
	OPENSSL_cleanse(block, sizeof(block));
	return rc;
}

/* Keys this thread's HMAC states with key (RFC 2104), once per key. */
static int
hmac_key(const void *key, size_t keylen)
{
	unsigned char k0[SHA256_BLOCK];
	int rc = -1;

	if (keylen > HMAC_KEY_MAX)
		return -1;
	if (tls.keyed && keylen == tls.keylen &&
	    memcmp(key, tls.key, keylen) == 0)
		return 0;
	tls.keyed = 0;
	memset(k0, 0, sizeof(k0));
	if (keylen > SHA256_BLOCK) {
		if (digest_sha256(key, keylen, k0) != 0)
			goto done;
	} else
		memcpy(k0, key, keylen);
	if (hmac_half(&tls.inner, k0, 0x36) != 0 ||
	    hmac_half(&tls.outer, k0, 0x5c) != 0)
		goto done;
	memcpy(tls.key, key, keylen);
	tls.keylen = keylen;
	tls.keyed = 1;
	rc = 0;
done:
	OPENSSL_cleanse(k0, sizeof(k0));
	return rc;
}

int
digest_hmac_sha256_parts(const void *key, size_t keylen,
    const struct digest_part *parts, size_t nparts,
    unsigned char out[SHA256_LEN])
{
	EVP_MD_CTX *ctx = work_ctx();
	unsigned char in[SHA256_LEN];
	unsigned int l1 = 0, l2 = 0;
	size_t i;
	int rc = -1;

	if (ctx == NULL || hmac_key(key, keylen) != 0 ||
	    EVP_MD_CTX_copy_ex(ctx, tls.inner) != 1)
		return -1;
	for (i = 0; i < nparts; i++)
		if (EVP_DigestUpdate(ctx, parts[i].p, parts[i].n) != 1)
			return -1;
	if (EVP_DigestFinal_ex(ctx, in, &l1) == 1 && l1 == SHA256_LEN &&
	    EVP_MD_CTX_copy_ex(ctx, tls.outer) == 1 &&
	    EVP_DigestUpdate(ctx, in, sizeof(in)) == 1 &&
	    EVP_DigestFinal_ex(ctx, out, &l2) == 1 && l2 == SHA256_LEN)
		rc = 0;
	OPENSSL_cleanse(in, sizeof(in));
	return rc;
}

int
digest_hmac_sha256(const void *key, size_t keylen, const void *data, size_t n,
    unsigned char out[SHA256_LEN])
{
	struct digest_part part = { data, n };

	return digest_hmac_sha256_parts(key, keylen, &part, 1, out);
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
			n = getrandom(random_pool + got,
			    sizeof(random_pool) - got, 0);
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
