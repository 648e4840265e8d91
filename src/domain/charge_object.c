/*
 * charge_object.c - the pure parts of a charge: its fingerprint, the
 * per-parameter digests that name what a 422 found changed, and the
 * charge object a 201 carries. No I/O.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "charge_object.h"
#include "defaults.h"
#include "digest.h"
#include "util.h"

int
charge_fingerprint(const char *canon, size_t canonlen, const char *principal,
    char out[65])
{
	static const char route[] = "POST /charge\n";
	unsigned char md[SHA256_LEN];
	struct digest_part parts[4];

	parts[0].p = route;
	parts[0].n = sizeof(route) - 1;
	parts[1].p = principal;
	parts[1].n = strlen(principal);
	parts[2].p = "\n";
	parts[2].n = 1;
	parts[3].p = canon;
	parts[3].n = canonlen;
	if (digest_sha256_parts(parts, 4, md) != 0)
		return -1;
	digest_hex(md, sizeof(md), out);
	return 0;
}

const char *
charge_param_name(int i)
{
	return i >= 0 && i < CHARGE_PARAM_COUNT ? schema_param_names[i] : NULL;
}

/*
 * 32-bit FNV-1a. The per-parameter digests only tell a 422 which
 * parameters changed (the fingerprint, SHA-256, decides that something
 * did), so they need to spread well, not to resist an attacker: seven
 * SHA-256 computations cost about 20 000 instructions a fresh charge, this
 * about 10 a byte. OpenSSL has no non-cryptographic hash.
 */
static uint32_t
fnv1a32(const char *p, size_t n)
{
	uint32_t h = 2166136261u;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 16777619u;
	}
	return h;
}

int
charge_param_digests(const char *canon, size_t canonlen,
    char out[CHARGE_PARAMS_HEX_LEN + 1])
{
	const char *p = canon, *end = canon + canonlen, *v;
	unsigned char md[CHARGE_PARAM_DIGEST_BYTES];
	size_t namelen;
	uint32_t h;
	int i;

	if (canonlen < 2 || *p++ != '{')
		return -1;
	for (i = 0; i < CHARGE_PARAM_COUNT; i++) {
		/* "name": then the value, up to the next member or the end */
		namelen = strlen(schema_param_names[i]);
		if ((size_t)(end - p) < namelen + 3 || p[0] != '"' ||
		    memcmp(p + 1, schema_param_names[i], namelen) != 0 ||
		    p[namelen + 1] != '"' || p[namelen + 2] != ':')
			return -1;
		if ((v = canon_value_end(p + namelen + 3, end)) == NULL ||
		    v == p + namelen + 3 || v == end ||
		    *v != (i == CHARGE_PARAM_COUNT - 1 ? '}' : ','))
			return -1;
		h = fnv1a32(p, (size_t)(v - p));
		md[0] = (unsigned char)(h >> 24);
		md[1] = (unsigned char)(h >> 16);
		md[2] = (unsigned char)(h >> 8);
		md[3] = (unsigned char)h;
		digest_hex(md, CHARGE_PARAM_DIGEST_BYTES,
		    out + i * CHARGE_PARAM_DIGEST_HEX);
		p = v + 1;
	}
	if (p != end)
		return -1;
	out[CHARGE_PARAMS_HEX_LEN] = '\0';
	return 0;
}

int
charge_params_diff(const char *stored, const char *ours,
    int differ[CHARGE_PARAM_COUNT])
{
	int i, n = 0;

	if (strlen(stored) != CHARGE_PARAMS_HEX_LEN ||
	    !util_is_hex(stored, CHARGE_PARAMS_HEX_LEN))
		return -1;
	for (i = 0; i < CHARGE_PARAM_COUNT; i++) {
		differ[i] = memcmp(stored + i * CHARGE_PARAM_DIGEST_HEX,
		                ours + i * CHARGE_PARAM_DIGEST_HEX,
		                CHARGE_PARAM_DIGEST_HEX) != 0;
		n += differ[i];
	}
	return n;
}

char *
charge_object_render(const char *canon, size_t canonlen, const char *charge_id,
    long long created, const char *key, size_t keylen, size_t *len)
{
	/* a key is 0x21-0x7E: only '"' and '\\' need escaping, two bytes each */
	char keyjson[2 * IDEM_KEY_MAX + 1];
	size_t i, k = 0, cap;
	struct util_buf b;
	char *out;
	long n;

	if (keylen > IDEM_KEY_MAX || canonlen < 2 || canon[0] != '{' ||
	    canon[canonlen - 1] != '}')
		return NULL;
	for (i = 0; i < keylen; i++) {
		if (key[i] == '"' || key[i] == '\\')
			keyjson[k++] = '\\';
		keyjson[k++] = key[i];
	}
	/* the fixed members and created fit in 160 */
	cap = canonlen + k + strlen(charge_id) + 160;
	if ((out = malloc(cap)) == NULL)
		return NULL;
	util_buf_init(&b, out, cap);
	util_buf_str(&b, "{\"id\":\"");
	util_buf_str(&b, charge_id);
	util_buf_str(&b, "\",\"object\":\"charge\",\"status\":\"succeeded\",");
	util_buf_put(&b, canon + 1, canonlen - 2);
	util_buf_str(&b, ",\"created\":");
	util_buf_ll(&b, created);
	util_buf_str(&b, ",\"idempotency_key\":\"");
	util_buf_put(&b, keyjson, k);
	util_buf_str(&b, "\"}");
	if ((n = util_buf_len(&b)) < 0) {
		free(out);
		return NULL;
	}
	*len = (size_t)n;
	return out;
}
