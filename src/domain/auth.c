/*
 * auth.c - API keys to principals. The table holds SHA-256 hashes only;
 * a presented key is hashed and compared with every entry in constant time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "auth.h"
#include "digest.h"
#include "util.h"
#include "headers.h"

/* Longer bearer tokens are rejected without being hashed. */
#define AUTH_API_KEY_MAX 512             /* bytes */
#define AUTH_FILE_MAX (16 * 1024 * 1024) /* bytes of the keys file */
#define AUTH_HASH_LEN 32                 /* SHA-256 */

static int
auth_is_principal_char(char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
	    (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
}

/* Parses one non-comment line into e. 0, or -1 with why. */
static int
auth_parse_line(const char *p, size_t n, struct auth_entry *e, char *why,
    size_t whylen)
{
	size_t i = 0, plen, h;

	for (plen = 0; i < n && !util_is_space(p[i]); i++)
		plen++;
	if (plen == 0 || plen > PRINCIPAL_MAX) {
		util_err(why, whylen, "principal must be 1 to %d characters",
		    PRINCIPAL_MAX);
		return -1;
	}
	for (h = 0; h < plen; h++)
		if (!auth_is_principal_char(p[h])) {
			util_err(why, whylen,
			    "principal may only contain A-Z a-z 0-9 _ -");
			return -1;
		}
	memcpy(e->principal, p, plen);
	e->principal[plen] = '\0';

	for (; i < n && util_is_space(p[i]); i++)
		;
	for (h = 0; h < AUTH_HASH_LEN && n - i >= 2; h++) {
		int hi = util_hex_digit(p[i]), lo = util_hex_digit(p[i + 1]);

		if (hi < 0 || lo < 0)
			break;
		e->hash[h] = (unsigned char)(hi << 4 | lo);
		i += 2;
	}
	if (h < AUTH_HASH_LEN || (i < n && !util_is_space(p[i]))) {
		util_err(why, whylen,
		    "expected %d hex digits (the SHA-256 of the API key) after the principal",
		    2 * AUTH_HASH_LEN);
		return -1;
	}
	for (; i < n && util_is_space(p[i]); i++)
		;
	if (i < n && p[i] != '#') {
		util_err(why, whylen, "unexpected text after the hash");
		return -1;
	}
	return 0;
}

/* auth_parse() with name ("path:N: ") or NULL ("line N: "). */
static unsigned long table_gen; /* atomic: the last gen handed out */

static int
auth_parse_named(struct auth_table *t, const char *name, const char *text,
    size_t len, char *err, size_t errlen)
{
	char why[192];
	struct auth_entry *entries = NULL;
	struct util_lines it;
	const char *line;
	size_t nlines = 1, n = 0, ll, i, j;
	int rc = -1, got;

	t->entries = NULL;
	t->n = 0;
	for (i = 0; i < len; i++)
		if (text[i] == '\n')
			nlines++;
	entries = calloc(nlines, sizeof(*entries));
	if (entries == NULL) {
		util_err(err, errlen, "%s: out of memory",
		    name != NULL ? name : "keys");
		goto fail;
	}
	util_lines_init(&it, text, len);
	while ((got = util_lines_next(&it, &line, &ll)) != 0) {
		why[0] = '\0';
		if (got < 0)
			util_err(why, sizeof(why), "NUL byte");
		else if (auth_parse_line(line, ll, &entries[n], why,
		             sizeof(why)) == 0) {
			/*
			 * A principal may have several keys (the old and the
			 * new one while a key is rotated); a key names one.
			 */
			for (j = 0; j < n; j++) {
				if (memcmp(entries[j].hash, entries[n].hash,
				        AUTH_HASH_LEN) == 0) {
					util_err(why, sizeof(why),
					    "the same key is already listed for '%s'",
					    entries[j].principal);
					break;
				}
			}
		}
		if (why[0] != '\0') {
			if (name != NULL)
				util_err(err, errlen, "%s:%zu: %s", name,
				    it.lineno, why);
			else
				util_err(err, errlen, "line %zu: %s", it.lineno,
				    why);
			goto fail;
		}
		n++;
	}
	if (n == 0) {
		util_err(err, errlen, "%s: no API keys configured",
		    name != NULL ? name : "keys");
		goto fail;
	}
	t->entries = entries;
	t->gen = __atomic_add_fetch(&table_gen, 1, __ATOMIC_RELAXED);
	t->n = n;
	entries = NULL;
	rc = 0;
fail:
	free(entries);
	return rc;
}

int
auth_parse(struct auth_table *t, const char *text, size_t len, char *errstr,
    size_t errlen)
{
	return auth_parse_named(t, NULL, text, len, errstr, errlen);
}

int
auth_load(struct auth_table *t, const char *path, char *errstr, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	int rc;

	t->entries = NULL;
	t->n = 0;
	if (util_read_file(path, AUTH_FILE_MAX, &buf, &len, errstr, errlen) !=
	    0)
		return -1;
	rc = auth_parse_named(t, path, buf, len, errstr, errlen);
	free(buf);
	return rc;
}

void
auth_free(struct auth_table *t)
{
	if (t == NULL)
		return;
	free(t->entries);
	t->entries = NULL;
	t->n = 0;
}

/*
 * The last API key this thread authenticated, so that a client sending the
 * same key again costs a constant-time compare instead of a SHA-256 (about
 * 5 % of a request). Only matches are remembered; the key never leaves the
 * thread that received it.
 */
static _Thread_local struct {
	unsigned long gen; /* 0: empty */
	size_t len, idx;
	char tok[AUTH_API_KEY_MAX];
} last;

const char *
auth_principal(const struct auth_table *t, const char *header)
{
	unsigned char md[SHA256_LEN];
	const char *tok = NULL;
	size_t toklen = 0, i, found = 0, mask;
	int any = 0, eq;

	if (t == NULL || t->n == 0 || header == NULL)
		return NULL;
	if (bearer_token(header, &tok, &toklen) != 0 || tok == NULL ||
	    toklen == 0 || toklen > AUTH_API_KEY_MAX)
		return NULL;
	if (last.gen == t->gen && last.len == toklen && last.idx < t->n &&
	    CRYPTO_memcmp(last.tok, tok, toklen) == 0)
		return t->entries[last.idx].principal;
	/* digest.c's pre-fetched SHA-256: no algorithm lookup per request */
	if (digest_sha256(tok, toklen, md) != 0)
		return NULL;
	/* Every entry is compared; the match is picked without branching. */
	for (i = 0; i < t->n; i++) {
		eq = CRYPTO_memcmp(md, t->entries[i].hash, AUTH_HASH_LEN) == 0;
		mask = (size_t)0 - (size_t)eq;
		found = (found & ~mask) | (i & mask);
		any |= eq;
	}
	OPENSSL_cleanse(md, sizeof(md));
	if (!any)
		return NULL;
	last.gen = t->gen;
	last.len = toklen;
	last.idx = found;
	memcpy(last.tok, tok, toklen);
	return t->entries[found].principal;
}
