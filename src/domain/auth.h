/*
 * auth.h - API keys to principals. The keys file holds
 * "<principal> <hex SHA-256 of the API key>" per line, '#' comments.
 * Comparison is constant-time over every entry.
 */
#ifndef CHARGE_AUTH_H
#define CHARGE_AUTH_H

#include <stddef.h>

#include "defaults.h"

struct auth_entry {
	char principal[PRINCIPAL_MAX + 1]; /* [A-Za-z0-9_-]{1,64} */
	unsigned char hash[32];
};

struct auth_table {
	struct auth_entry *entries;
	size_t n;
	unsigned long gen; /* unique per loaded table (auth.c's cache) */
};

/* Parses the file's text. 0, or -1 with errstr naming the line. */
int auth_parse(struct auth_table *t, const char *text, size_t len, char *errstr,
    size_t errlen);
/* Reads and parses path. 0 or -1. */
int auth_load(struct auth_table *t, const char *path, char *errstr,
    size_t errlen);
/* NULL-safe. */
void auth_free(struct auth_table *t);

/*
 * Returns the principal of the "Bearer <key>" header value, or NULL when
 * the header is missing, malformed, or names no configured key.
 */
const char *auth_principal(const struct auth_table *t, const char *header);

#endif
