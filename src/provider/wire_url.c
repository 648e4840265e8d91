/*
 * wire_url.c - the provider's base URL taken apart (provider_url). Pure.
 */
#include <stdlib.h>
#include <string.h>

#include "wire_url.h"

int
wire_url_split(const char *url, char *host, size_t hostlen, int *port, int *tls,
    const char **path)
{
	const char *h, *end;
	size_t n;

	*tls = strncmp(url, "https://", 8) == 0;
	if (!*tls && strncmp(url, "http://", 7) != 0)
		return -1;
	h = url + (*tls ? 8 : 7);
	if ((*path = strchr(h, '/')) == NULL)
		*path = h + strlen(h);
	*port = *tls ? 443 : 80;
	if (*h == '[') {
		if ((end = memchr(h, ']', (size_t)(*path - h))) == NULL)
			return -1;
		h++;
		n = (size_t)(end++ - h);
	} else {
		if ((end = memchr(h, ':', (size_t)(*path - h))) == NULL)
			end = *path;
		n = (size_t)(end - h);
	}
	if (n >= hostlen)
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	if (end < *path && *end == ':') {
		char *e;
		long v = strtol(end + 1, &e, 10);

		if (e != *path || v < 1 || v > 65535)
			return -1;
		*port = (int)v;
	} else if (end != *path)
		return -1;
	return 0;
}
