/*
 * digest.h - SHA-256, HMAC and random tokens through OpenSSL 3.
 */
#ifndef CHARGE_DIGEST_H
#define CHARGE_DIGEST_H

#include <stddef.h>

#define SHA256_LEN 32

/* Fetches the digest implementations once per process. 0 or -1. */
int digest_init(void);

/*
 * Frees the calling thread's digest contexts (created on first use); every
 * thread that hashed calls it before it ends.
 */
void digest_thread_done(void);

/* out receives 32 bytes. Returns 0 or -1. */
int digest_sha256(const void *p, size_t n, unsigned char out[SHA256_LEN]);
/* SHA-256 over several pieces, as if concatenated. */
struct digest_part {
	const void *p;
	size_t n;
};
int digest_sha256_parts(const struct digest_part *parts, size_t nparts,
    unsigned char out[SHA256_LEN]);
/* Lower-case hex of SHA-256 into out[65]. */
int digest_sha256_hex(const void *p, size_t n, char out[2 * SHA256_LEN + 1]);
/* Lower-case hex of SHA-1 into out[41] (Lua script ids). */
int digest_sha1_hex(const void *p, size_t n, char out[41]);
/* HMAC-SHA256(key, data) into out[32]; key at most 256 bytes. 0 or -1. */
int digest_hmac_sha256(const void *key, size_t keylen, const void *data,
    size_t n, unsigned char out[SHA256_LEN]);
/* HMAC-SHA256 over several pieces, as if concatenated. 0 or -1. */
int digest_hmac_sha256_parts(const void *key, size_t keylen,
    const struct digest_part *parts, size_t nparts,
    unsigned char out[SHA256_LEN]);
/* nbytes from the CSPRNG as hex into out[2*nbytes+1]. 0 or -1. */
int digest_random_hex(char *out, size_t nbytes);
/* Lower-case hex of in[0..n) into out[2n+1]. */
void digest_hex(const unsigned char *in, size_t n, char *out);

#endif
