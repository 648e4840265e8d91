/*
 * redis_url.c - the Redis target from a URL. Pure: no I/O, no hiredis.
 */
#include <stdio.h>
#include <string.h>

#include "redis_url.h"
#include "util.h"

#define PORT_MAX 65535
#define PORT_DIGITS_MAX 5
#define DB_MAX   65535

static void
copy_err(char *dst, size_t dstlen, const char *src)
{
	(void)snprintf(dst, dstlen, "%s", src != NULL ? src : "unknown error");
}

/* Copies at most n bytes of s (not NUL-terminated) into dst[dstlen]. */
static int
copy_span(char *dst, size_t dstlen, const char *s, size_t n)
{
	if (n >= dstlen)
		return -1;
	memcpy(dst, s, n);
	dst[n] = '\0';
	return 0;
}

int
redis_url_parse(const char *url, struct redis_target *t, char *errstr,
    size_t errlen)
{
	const char *p, *at, *colon, *slash, *end;
	unsigned long long v;
	int n;

	memset(t, 0, sizeof(*t));
	if (url == NULL || url[0] == '\0') {
		copy_err(errstr, errlen, "redis_url is empty");
		return -1;
	}
	if (strncmp(url, "unix://", 7) == 0) {
		p = url + 7;
		if (p[0] == '\0') {
			copy_err(errstr, errlen, "redis_url: unix:// needs a path");
			return -1;
		}
		t->is_unix = 1;
		n = snprintf(t->path, sizeof(t->path), "%s", p);
		if (n < 0 || (size_t)n >= sizeof(t->path)) {
			copy_err(errstr, errlen, "redis_url: socket path too long");
			return -1;
		}
		return 0;
	}
	if (strncmp(url, "redis://", 8) != 0) {
		copy_err(errstr, errlen,
		    "redis_url must start with redis:// or unix://");
		return -1;
	}
	p = url + 8;
	end = p + strlen(p);
	slash = strchr(p, '/');
	if (slash == NULL)
		slash = end;
	at = memchr(p, '@', (size_t)(slash - p));
	if (at != NULL) {
		colon = memchr(p, ':', (size_t)(at - p));
		if (colon == NULL) {
			/* redis://password@host:port, as redis-cli accepts */
			if (copy_span(t->password, sizeof(t->password), p,
			    (size_t)(at - p)) != 0)
				goto toolong;
		} else {
			if (copy_span(t->user, sizeof(t->user), p,
			    (size_t)(colon - p)) != 0 ||
			    copy_span(t->password, sizeof(t->password),
			    colon + 1, (size_t)(at - colon - 1)) != 0)
				goto toolong;
		}
		p = at + 1;
	}
	colon = memchr(p, ':', (size_t)(slash - p));
	if (colon == NULL || colon == p) {
		copy_err(errstr, errlen, "redis_url: expected host:port");
		return -1;
	}
	if (copy_span(t->host, sizeof(t->host), p, (size_t)(colon - p)) != 0)
		goto toolong;
	if ((size_t)(slash - colon - 1) > PORT_DIGITS_MAX ||
	    util_decimal(colon + 1, (size_t)(slash - colon - 1), PORT_MAX,
	    &v) != UTIL_DEC_OK || v < 1)
		goto badport;
	t->port = (int)v;
	if (*slash == '/' && slash[1] != '\0') {
		if (util_decimal(slash + 1, strlen(slash + 1), DB_MAX, &v) !=
		    UTIL_DEC_OK) {
			copy_err(errstr, errlen, "redis_url: bad database number");
			return -1;
		}
		t->db = (int)v;
	}
	return 0;
toolong:
	copy_err(errstr, errlen, "redis_url: a part is too long");
	return -1;
badport:
	copy_err(errstr, errlen, "redis_url: port must be 1-65535");
	return -1;
}
