/*
 * fuzz_sig.c - the target "sig" of fuzz.c: Stripe-Signature as
 * src/codec/webhook_sig.c checks it. The input is the header, a NUL, then the
 * payload (no NUL: an empty payload).
 *
 * The verdict is checked against one made here from the header as Stripe
 * documents it, with the HMAC computed here by OpenSSL: a signature is
 * accepted only when a v1 of the header is the HMAC-SHA256 of
 * "<t>.<payload>" under one of the secrets, and then the time decides.
 * So that the fuzzer can reach an accepted header, "$a", "$b" and "$z"
 * in the input stand for the v1 that secret a, secret b and a secret the
 * verifier does not have make for the header's first t, and "$y", "$w"
 * for secret a's with one hex digit changed (see expand()).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "fuzz.h"
#include "webhook_sig.h"

/* the secret tests/fuzz/capture_seeds.py gave the simulator is the first */
static const char *const secrets[] = { "whsec_fuzz_seed", "", "whsec_fuzz_b" };
#define SECRET_OTHER "whsec_not_ours"
#define NSECRETS (sizeof(secrets) / sizeof(secrets[0]))
#define FUZZ_NOW_S 1796616600LL /* about when the seeds were signed */
#define FUZZ_TOLERANCE_S 300
#define FUZZ_T_MAX 1000000000000000ULL /* webhook_sig.c's bound on t */
#define FUZZ_HEADER_MAX 4096

/* The hex HMAC-SHA256 of "<t>.<payload>" under secret, made here. */
static void
hmac_hex(const char *secret, unsigned long long t, const char *payload,
    size_t len, char out[WSIG_HEX_LEN + 1])
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0, i;
	char *msg;
	int n;

	out[0] = '\0';
	if ((msg = malloc(len + 32)) == NULL)
		abort();
	n = snprintf(msg, 32, "%llu.", t);
	memcpy(msg + n, payload, len);
	if (HMAC(EVP_sha256(), secret, (int)strlen(secret),
	        (const unsigned char *)msg, (size_t)n + len, mac,
	        &maclen) == NULL ||
	    maclen * 2 != WSIG_HEX_LEN)
		abort();
	for (i = 0; i < maclen; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
	free(msg);
}

/* One comma-separated item, blanks around name and value trimmed. */
struct item {
	const char *name, *value;
	size_t nlen, vlen;
	int has_eq;
};

static size_t
trimmed(const char **p, size_t n)
{
	while (n > 0 && (**p == ' ' || **p == '\t')) {
		(*p)++;
		n--;
	}
	while (n > 0 && ((*p)[n - 1] == ' ' || (*p)[n - 1] == '\t'))
		n--;
	return n;
}

/* The item of h starting at *pos; *pos moves past its comma. 0 at the end. */
static int
next_item(const char *h, size_t *pos, struct item *it)
{
	size_t end, eq;

	if (*pos == (size_t)-1)
		return 0;
	for (end = *pos; h[end] != '\0' && h[end] != ','; end++)
		;
	for (eq = *pos; eq < end && h[eq] != '='; eq++)
		;
	it->has_eq = eq < end;
	it->name = h + *pos;
	it->nlen = trimmed(&it->name, eq - *pos);
	it->value = h + eq + (eq < end);
	it->vlen = it->has_eq ? trimmed(&it->value, end - eq - 1) : 0;
	*pos = h[end] == ',' ? end + 1 : (size_t)-1;
	return 1;
}

static int
is(const struct item *it, const char *name)
{
	return it->nlen == strlen(name) &&
	    memcmp(it->name, name, it->nlen) == 0;
}

/* t's value if it is 1-15 digits, not 0; else 0. */
static unsigned long long
t_value(const struct item *it)
{
	unsigned long long v = 0;
	size_t i;

	if (it->vlen == 0 || it->vlen > 15)
		return 0;
	for (i = 0; i < it->vlen; i++) {
		if (it->value[i] < '0' || it->value[i] > '9')
			return 0;
		v = v * 10 + (unsigned long long)(it->value[i] - '0');
	}
	return v;
}

/* The verdict Stripe's documentation gives for header over payload. */
static enum wsig_status
reference(const char *h, const char *payload, size_t len)
{
	char mac[NSECRETS][WSIG_HEX_LEN + 1];
	unsigned long long t = 0;
	struct item it;
	size_t pos = 0, i, k;
	int nt = 0, nv1 = 0, signed_ = 0;

	if (h[0] == '\0')
		return WSIG_MISSING;
	while (next_item(h, &pos, &it)) {
		if (!it.has_eq || it.nlen == 0)
			return WSIG_MALFORMED;
		if (is(&it, "t")) {
			if (nt++ > 0 || (t = t_value(&it)) == 0)
				return WSIG_MALFORMED;
		} else if (is(&it, "v1")) {
			if (it.vlen != WSIG_HEX_LEN)
				return WSIG_MALFORMED;
			for (i = 0; i < it.vlen; i++)
				if (strchr("0123456789abcdef", it.value[i]) ==
				        NULL ||
				    it.value[i] == '\0')
					return WSIG_MALFORMED;
			nv1++;
		}
	}
	if (nt == 0)
		return WSIG_MALFORMED;
	if (nv1 == 0)
		return WSIG_NO_V1;
	for (k = 0; k < NSECRETS; k++)
		if (secrets[k][0] != '\0')
			hmac_hex(secrets[k], t, payload, len, mac[k]);
	for (pos = 0; next_item(h, &pos, &it);)
		for (k = 0; is(&it, "v1") && k < NSECRETS; k++)
			if (secrets[k][0] != '\0' &&
			    memcmp(it.value, mac[k], WSIG_HEX_LEN) == 0)
				signed_ = 1;
	if (!signed_)
		return WSIG_MISMATCH;
	if ((long long)t < FUZZ_NOW_S - FUZZ_TOLERANCE_S)
		return WSIG_STALE;
	if ((long long)t > FUZZ_NOW_S + FUZZ_TOLERANCE_S)
		return WSIG_FUTURE;
	return WSIG_OK;
}

/* The last (at 63) or the first (at 0) hex digit of mac changed. */
static void
near_miss(char mac[WSIG_HEX_LEN + 1], size_t at)
{
	mac[at] = mac[at] == '0' ? '1' : '0';
}

/*
 * The header with each "$a", "$b", "$z" replaced by the v1 of secrets[0],
 * secrets[2], SECRET_OTHER for the t of the first item named t (0 when
 * none parses); "$y" and "$w" by that of secrets[0] with its last or its
 * first hex digit changed (a comparison of part of it accepts them).
 * Malloc'd.
 */
static char *
expand(const char *h, const char *payload, size_t len)
{
	static const char names[] = "abzyw";
	char mac[sizeof(names) - 1][WSIG_HEX_LEN + 1], *out;
	unsigned long long t = 0;
	struct item it;
	size_t pos = 0, n = 0, i;

	while (t == 0 && next_item(h, &pos, &it))
		if (is(&it, "t"))
			t = t_value(&it);
	hmac_hex(secrets[0], t, payload, len, mac[0]);
	hmac_hex(secrets[2], t, payload, len, mac[1]);
	hmac_hex(SECRET_OTHER, t, payload, len, mac[2]);
	memcpy(mac[3], mac[0], sizeof(mac[0]));
	near_miss(mac[3], WSIG_HEX_LEN - 1);
	memcpy(mac[4], mac[0], sizeof(mac[0]));
	near_miss(mac[4], 0);
	if ((out = malloc(strlen(h) * WSIG_HEX_LEN / 2 + 1)) == NULL)
		abort();
	for (i = 0; h[i] != '\0'; i++) {
		const char *m = strchr(names, h[i + 1]);

		if (h[i] == '$' && h[i + 1] != '\0' && m != NULL) {
			memcpy(out + n, mac[m - names], WSIG_HEX_LEN);
			n += WSIG_HEX_LEN;
			i++;
		} else {
			out[n++] = h[i];
		}
	}
	out[n] = '\0';
	return out;
}

void
fuzz_sig(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, '\0', size);
	size_t hlen = nul != NULL ? (size_t)(nul - data) : size;
	const char *payload = nul != NULL ? (const char *)nul + 1 : "";
	size_t plen = nul != NULL ? size - hlen - 1 : 0;
	enum wsig_status got, want;
	long long t = -1;
	char *raw, *h;

	if (hlen > FUZZ_HEADER_MAX || (raw = fuzz_cstr(data, hlen)) == NULL)
		return;
	h = expand(raw, payload, plen);
	got = webhook_sig_verify(h, payload, plen, secrets, NSECRETS,
	    FUZZ_NOW_S, FUZZ_TOLERANCE_S, &t);
	want = reference(h, payload, plen);
	if (got != want)
		abort();
	/* a signed verdict names the t it checked */
	if ((got == WSIG_OK || got == WSIG_STALE || got == WSIG_FUTURE) &&
	    (t <= 0 || (unsigned long long)t >= FUZZ_T_MAX))
		abort();
	if (webhook_sig_detail(got) == NULL || webhook_sig_name(got) == NULL)
		abort();
	free(h);
	free(raw);
}
