/*
 * webhook_sig.c - Stripe-Signature, parsed and checked. The header is a
 * comma-separated list of <scheme>=<value>; "t" (once) and "v1" (any
 * number) are read, anything else is ignored. Each v1 is compared in
 * constant time with the HMAC of "<t>.<payload>" under each secret.
 */
#include <string.h>

#include <openssl/crypto.h>

#include "digest.h"
#include "util.h"
#include "webhook_sig.h"

#define T_DIGITS_MAX 15 /* a Unix time in seconds: far beyond year 9999 */

/* One item of the list: name and value, spaces around both trimmed. */
struct item {
	const char *name, *value;
	size_t namelen, valuelen;
};

static void
trim(const char **p, size_t *n)
{
	while (*n > 0 && (**p == ' ' || **p == '\t')) {
		(*p)++;
		(*n)--;
	}
	while (*n > 0 && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t'))
		(*n)--;
}

/*
 * The item starting at *pos of header (ended by ',' or the end); *pos
 * moves past it, *last set when it was the last. 0, or -1 when the item
 * has no '=' or an empty name.
 */
static int
item_next(const char *header, size_t *pos, struct item *it, int *last)
{
	const char *s = header + *pos, *comma, *eq;
	size_t n;

	comma = strchr(s, ',');
	n = comma != NULL ? (size_t)(comma - s) : strlen(s);
	*pos += n + (comma != NULL ? 1 : 0);
	*last = comma == NULL;
	if ((eq = memchr(s, '=', n)) == NULL)
		return -1;
	it->name = s;
	it->namelen = (size_t)(eq - s);
	it->value = eq + 1;
	it->valuelen = n - it->namelen - 1;
	trim(&it->name, &it->namelen);
	trim(&it->value, &it->valuelen);
	return it->namelen > 0 ? 0 : -1;
}

static int
item_is(const struct item *it, const char *name)
{
	return it->namelen == strlen(name) &&
	    memcmp(it->name, name, it->namelen) == 0;
}

static int
hex_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	return c - 'a' + 10; /* util_is_hex: lower case only */
}

/* First pass: the one t, and the shape of every v1. */
static enum wsig_status
header_scan(const char *header, long long *t, int *nv1)
{
	unsigned long long v;
	struct item it;
	size_t pos = 0;
	int have_t = 0, last = 0;

	*nv1 = 0;
	while (!last) {
		if (item_next(header, &pos, &it, &last) != 0)
			return WSIG_MALFORMED;
		if (item_is(&it, "t")) {
			if (have_t || it.valuelen > T_DIGITS_MAX ||
			    util_decimal(it.value, it.valuelen,
			        (unsigned long long)1e15, &v) != UTIL_DEC_OK ||
			    v == 0)
				return WSIG_MALFORMED;
			*t = (long long)v;
			have_t = 1;
		} else if (item_is(&it, "v1")) {
			if (it.valuelen != WSIG_HEX_LEN ||
			    !util_is_hex(it.value, it.valuelen))
				return WSIG_MALFORMED;
			(*nv1)++;
		}
	}
	if (!have_t)
		return WSIG_MALFORMED;
	return *nv1 > 0 ? WSIG_OK : WSIG_NO_V1;
}

static int
mac_of(const char *secret, long long t, const char *payload, size_t len,
    unsigned char mac[SHA256_LEN])
{
	char tbuf[24];
	long tn = util_lltoa(t, tbuf, sizeof(tbuf));
	struct digest_part parts[3];

	if (tn < 0)
		return -1;
	parts[0].p = tbuf;
	parts[0].n = (size_t)tn;
	parts[1].p = ".";
	parts[1].n = 1;
	parts[2].p = payload;
	parts[2].n = len;
	return digest_hmac_sha256_parts(secret, strlen(secret), parts, 3, mac);
}

int
webhook_sig_sign(const char *secret, long long t, const char *payload,
    size_t len, char out[WSIG_HEX_LEN + 1])
{
	unsigned char mac[SHA256_LEN];

	if (mac_of(secret, t, payload, len, mac) != 0)
		return -1;
	digest_hex(mac, SHA256_LEN, out);
	out[WSIG_HEX_LEN] = '\0';
	return 0;
}

/* Second pass: 1 when a v1 of header equals one of the macs. */
static int
v1_matches(const char *header, unsigned char (*macs)[SHA256_LEN], size_t nmacs)
{
	unsigned char sig[SHA256_LEN];
	struct item it;
	size_t pos = 0, i, k;
	int found = 0, last = 0;

	while (!last) {
		if (item_next(header, &pos, &it, &last) != 0 ||
		    !item_is(&it, "v1"))
			continue;
		for (i = 0; i < SHA256_LEN; i++)
			sig[i] =
			    (unsigned char)(hex_nibble(it.value[2 * i]) << 4 |
			        hex_nibble(it.value[2 * i + 1]));
		for (k = 0; k < nmacs; k++)
			found |= CRYPTO_memcmp(sig, macs[k], SHA256_LEN) == 0;
	}
	return found;
}

enum wsig_status
webhook_sig_verify(const char *header, const char *payload, size_t len,
    const char *const *secrets, size_t nsecrets, long long now_s,
    long tolerance_s, long long *t_out)
{
	unsigned char macs[4][SHA256_LEN];
	enum wsig_status st;
	long long t = 0;
	size_t i, n = 0;
	int nv1;

	if (header == NULL || header[0] == '\0')
		return WSIG_MISSING;
	if ((st = header_scan(header, &t, &nv1)) != WSIG_OK)
		return st;
	if (t_out != NULL)
		*t_out = t;
	for (i = 0; i < nsecrets && n < sizeof(macs) / sizeof(macs[0]); i++) {
		if (secrets[i] == NULL || secrets[i][0] == '\0')
			continue;
		if (mac_of(secrets[i], t, payload, len, macs[n]) != 0)
			return WSIG_ERROR;
		n++;
	}
	st = n > 0 && v1_matches(header, macs, n) ? WSIG_OK : WSIG_MISMATCH;
	OPENSSL_cleanse(macs, sizeof(macs));
	if (st != WSIG_OK)
		return st;
	if (t < now_s - tolerance_s)
		return WSIG_STALE;
	if (t > now_s + tolerance_s)
		return WSIG_FUTURE;
	return WSIG_OK;
}

const char *
webhook_sig_detail(enum wsig_status st)
{
	switch (st) {
	case WSIG_OK: return "The signature is valid.";
	case WSIG_MISSING:
		return "Send the event signed in a Stripe-Signature header: t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">.";
	case WSIG_MALFORMED:
		return "The Stripe-Signature header is malformed: it must be comma-separated scheme=value items with exactly one t=<unix seconds> and v1 values of 64 lower-case hex digits.";
	case WSIG_NO_V1:
		return "The Stripe-Signature header carries no v1 signature (other schemes are ignored).";
	case WSIG_MISMATCH:
		return "No v1 signature in Stripe-Signature matches the payload with the endpoint's secret.";
	case WSIG_STALE:
		return "The Stripe-Signature timestamp is older than the tolerance (provider_webhook_tolerance_s): a replayed event is refused.";
	case WSIG_FUTURE:
		return "The Stripe-Signature timestamp is ahead of this server's clock by more than the tolerance (provider_webhook_tolerance_s).";
	case WSIG_ERROR: break;
	}
	return "The signature could not be checked.";
}

const char *
webhook_sig_name(enum wsig_status st)
{
	switch (st) {
	case WSIG_OK: return "ok";
	case WSIG_MISSING: return "missing";
	case WSIG_MALFORMED: return "malformed";
	case WSIG_NO_V1: return "no_v1";
	case WSIG_MISMATCH: return "mismatch";
	case WSIG_STALE: return "stale";
	case WSIG_FUTURE: return "future";
	case WSIG_ERROR: break;
	}
	return "error";
}
