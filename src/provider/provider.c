/*
 * provider.c - the interface every provider implementation fills, and the
 * request's identity both implementations share (provider_request_mac).
 */
#include <stdlib.h>
#include <string.h>

#include "digest.h"
#include "provider.h"

int
provider_charge_start(struct provider *p, const struct provider_call *call,
    provider_cb *cb, void *arg)
{
	return p->ops->start(p->impl, call, cb, arg);
}

void
provider_free(struct provider *p)
{
	if (p == NULL)
		return;
	p->ops->free(p->impl);
	free(p);
}

int
provider_set_api_key(struct provider *p, const char *key)
{
	if (p->ops->set_api_key == NULL)
		return 0;
	return p->ops->set_api_key(p->impl, key);
}

int
provider_request_mac(const char *secret, const char *principal, const char *key,
    size_t keylen, const char *fingerprint, unsigned char mac[SHA256_LEN])
{
	char msg[PRINCIPAL_MAX + 1 + IDEM_KEY_MAX + 1 + SHA256_HEX_LEN];
	size_t plen = strlen(principal), flen = strlen(fingerprint), n;

	if (plen > PRINCIPAL_MAX || keylen > IDEM_KEY_MAX ||
	    flen > SHA256_HEX_LEN)
		return -1;
	memcpy(msg, principal, plen);
	n = plen;
	msg[n++] = '\0';
	memcpy(msg + n, key, keylen);
	n += keylen;
	msg[n++] = '\0';
	memcpy(msg + n, fingerprint, flen);
	n += flen;
	return digest_hmac_sha256(secret, strlen(secret), msg, n, mac);
}

int
provider_charge_id(const char *secret, const char *principal, const char *key,
    size_t keylen, const char *fingerprint, char out[4 + CHARGE_ID_HEX_LEN])
{
	unsigned char mac[SHA256_LEN];
	char hex[2 * SHA256_LEN + 1];

	if (provider_request_mac(secret, principal, key, keylen, fingerprint,
	        mac) != 0)
		return -1;
	digest_hex(mac, sizeof(mac), hex);
	memcpy(out, "ch_", 3);
	memcpy(out + 3, hex, CHARGE_ID_HEX_LEN);
	out[3 + CHARGE_ID_HEX_LEN] = '\0';
	return 0;
}

void
provider_call_request(struct provider_call *call, const char *principal,
    const char *key, size_t keylen, const char *fingerprint,
    const struct charge_params *params)
{
	call->principal = principal;
	call->key = key;
	call->keylen = keylen;
	call->fingerprint = fingerprint;
	call->params = params;
}
