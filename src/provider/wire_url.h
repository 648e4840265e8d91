/*
 * wire_url.h - the provider's base URL taken apart (provider_url). Pure.
 */
#ifndef CHARGE_WIRE_URL_H
#define CHARGE_WIRE_URL_H

#include <stddef.h>

/*
 * A base URL http(s)://HOST[:PORT][/PREFIX] into host (an IPv6 literal
 * without its brackets), *port (80 or 443 when absent), *tls and *path
 * (the prefix, "" when none; points into url). 0, or -1 when it is not
 * such a URL.
 */
int wire_url_split(const char *url, char *host, size_t hostlen, int *port,
    int *tls, const char **path);

#endif
