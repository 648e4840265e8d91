/*
 * redis_url.c - the Redis target from a URL. Pure: no I/O, no hiredis.
 */
#include <stdio.h>
#include <string.h>

#include "redis_url.h"
#include "util.h"

#define PORT_MAX 65535
#define PORT_DIGITS_MAX 5
#define DB_MAX 65535

#define SCHEME_REDIS "redis://"
#define SCHEME_UNIX "unix://"
#define SCHEME_SENTINEL "redis-sentinel://"
#define SCHEME_CLUSTER "redis-cluster://"
#define SCHEME_TLS_REDIS "rediss://"
#define SCHEME_TLS_SENTINEL "rediss-sentinel://"
#define SCHEME_TLS_CLUSTER "rediss-cluster://"
#define QUERY_DB "db="

/* The schemes but unix://, each in plain text and over TLS. */
static const struct {
	const char *prefix;
	enum redis_mode mode;
	int tls;
} url_schemes[] = {
	{ SCHEME_REDIS, REDIS_MODE_SINGLE, 0 },
	{ SCHEME_SENTINEL, REDIS_MODE_SENTINEL, 0 },
	{ SCHEME_CLUSTER, REDIS_MODE_CLUSTER, 0 },
	{ SCHEME_TLS_REDIS, REDIS_MODE_SINGLE, 1 },
	{ SCHEME_TLS_SENTINEL, REDIS_MODE_SENTINEL, 1 },
	{ SCHEME_TLS_CLUSTER, REDIS_MODE_CLUSTER, 1 },
};

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

/*
 * Credentials before the first '@' in p[0..end): "user:password",
 * ":password" (the default user) or "password" (as redis-cli accepts).
 * *rest is what follows the '@' (p when there is none). 0, or -1 when a
 * part is too long.
 */
static int
parse_userinfo(const char *p, const char *end, struct redis_target *t,
    const char **rest)
{
	const char *at, *colon;

	*rest = p;
	at = memchr(p, '@', (size_t)(end - p));
	if (at == NULL)
		return 0;
	colon = memchr(p, ':', (size_t)(at - p));
	if (colon == NULL) {
		if (copy_span(t->password, sizeof(t->password), p,
		        (size_t)(at - p)) != 0)
			return -1;
	} else if (copy_span(t->user, sizeof(t->user), p,
	               (size_t)(colon - p)) != 0 ||
	    copy_span(t->password, sizeof(t->password), colon + 1,
	        (size_t)(at - colon - 1)) != 0)
		return -1;
	*rest = at + 1;
	return 0;
}

/* s[0..n) as host:port (port 1-65535, digits only). 0, or -1 with errstr. */
static int
parse_hostport(const char *s, size_t n, char *host, size_t hostlen, int *port,
    char *errstr, size_t errlen)
{
	const char *colon = memchr(s, ':', n);
	unsigned long long v;
	size_t plen;

	if (colon == NULL || colon == s) {
		copy_err(errstr, errlen, "redis_url: expected host:port");
		return -1;
	}
	if (copy_span(host, hostlen, s, (size_t)(colon - s)) != 0) {
		copy_err(errstr, errlen, "redis_url: a part is too long");
		return -1;
	}
	plen = n - (size_t)(colon + 1 - s);
	if (plen > PORT_DIGITS_MAX ||
	    util_decimal(colon + 1, plen, PORT_MAX, &v) != UTIL_DEC_OK ||
	    v < 1) {
		copy_err(errstr, errlen, "redis_url: port must be 1-65535");
		return -1;
	}
	*port = (int)v;
	return 0;
}

/* The comma-separated host:port list p[0..end) into t->hosts. */
static int
parse_host_list(const char *p, const char *end, struct redis_target *t,
    char *errstr, size_t errlen)
{
	const char *comma;

	if (p == end) {
		copy_err(errstr, errlen, "redis_url: no host:port given");
		return -1;
	}
	for (;;) {
		comma = memchr(p, ',', (size_t)(end - p));
		if (comma == NULL)
			comma = end;
		if (comma == p) {
			copy_err(errstr, errlen,
			    "redis_url: empty entry in the host list");
			return -1;
		}
		if (t->nhosts == REDIS_URL_HOSTS_MAX) {
			(void)snprintf(errstr, errlen,
			    "redis_url: more than %d hosts",
			    REDIS_URL_HOSTS_MAX);
			return -1;
		}
		if (parse_hostport(p, (size_t)(comma - p),
		        t->hosts[t->nhosts].host, sizeof(t->hosts[0].host),
		        &t->hosts[t->nhosts].port, errstr, errlen) != 0)
			return -1;
		t->nhosts++;
		if (comma == end)
			return 0;
		p = comma + 1;
	}
}

static int
master_name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	    (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
}

/* "/<master-name>[?db=N]" of a sentinel URL. */
static int
parse_sentinel_path(const char *p, struct redis_target *t, char *errstr,
    size_t errlen)
{
	const char *q;
	unsigned long long v;
	size_t n, i;

	if (*p != '/' || p[1] == '\0' || p[1] == '?') {
		copy_err(errstr, errlen,
		    "redis_url: redis-sentinel:// needs /<master-name> after the sentinels");
		return -1;
	}
	p++;
	q = strchr(p, '?');
	n = q != NULL ? (size_t)(q - p) : strlen(p);
	if (n > REDIS_MASTER_NAME_MAX) {
		(void)snprintf(errstr, errlen,
		    "redis_url: master name longer than %d bytes",
		    REDIS_MASTER_NAME_MAX);
		return -1;
	}
	for (i = 0; i < n; i++)
		if (!master_name_char(p[i])) {
			copy_err(errstr, errlen,
			    "redis_url: master name may hold only A-Z a-z 0-9 . _ -");
			return -1;
		}
	memcpy(t->master_name, p, n);
	t->master_name[n] = '\0';
	if (q == NULL)
		return 0;
	q++;
	if (strncmp(q, QUERY_DB, strlen(QUERY_DB)) != 0) {
		copy_err(errstr, errlen,
		    "redis_url: the only parameter is ?db=N");
		return -1;
	}
	q += strlen(QUERY_DB);
	if (util_decimal(q, strlen(q), DB_MAX, &v) != UTIL_DEC_OK) {
		copy_err(errstr, errlen, "redis_url: bad database number");
		return -1;
	}
	t->db = (int)v;
	return 0;
}

/* redis-sentinel:// and redis-cluster:// from p (after the scheme). */
static int
parse_multi(const char *p, struct redis_target *t, char *errstr, size_t errlen)
{
	const char *end = p + strlen(p), *slash, *hosts;

	slash = strchr(p, '/');
	if (slash == NULL)
		slash = end;
	if (parse_userinfo(p, slash, t, &hosts) != 0) {
		copy_err(errstr, errlen, "redis_url: a part is too long");
		return -1;
	}
	if (parse_host_list(hosts, slash, t, errstr, errlen) != 0)
		return -1;
	if (t->mode == REDIS_MODE_SENTINEL)
		return parse_sentinel_path(slash, t, errstr, errlen);
	/* a cluster has database 0 only; a trailing '/' names nothing */
	if (*slash == '/' && slash[1] != '\0') {
		copy_err(errstr, errlen,
		    "redis_url: redis-cluster:// takes no database or path");
		return -1;
	}
	return 0;
}

int
redis_url_parse(const char *url, struct redis_target *t, char *errstr,
    size_t errlen)
{
	const char *p, *slash, *end;
	unsigned long long v;
	size_t i;
	int n;

	memset(t, 0, sizeof(*t));
	if (url == NULL || url[0] == '\0') {
		copy_err(errstr, errlen, "redis_url is empty");
		return -1;
	}
	if (strncmp(url, SCHEME_UNIX, strlen(SCHEME_UNIX)) == 0) {
		p = url + strlen(SCHEME_UNIX);
		if (p[0] == '\0') {
			copy_err(errstr, errlen,
			    "redis_url: unix:// needs a path");
			return -1;
		}
		t->is_unix = 1;
		n = snprintf(t->path, sizeof(t->path), "%s", p);
		if (n < 0 || (size_t)n >= sizeof(t->path)) {
			copy_err(errstr, errlen,
			    "redis_url: socket path too long");
			return -1;
		}
		return 0;
	}
	for (i = 0; i < sizeof(url_schemes) / sizeof(url_schemes[0]); i++)
		if (strncmp(url, url_schemes[i].prefix,
		        strlen(url_schemes[i].prefix)) == 0)
			break;
	if (i == sizeof(url_schemes) / sizeof(url_schemes[0])) {
		copy_err(errstr, errlen,
		    "redis_url must start with redis://, rediss://, unix://, redis-sentinel://, rediss-sentinel://, redis-cluster:// or rediss-cluster://");
		return -1;
	}
	t->mode = url_schemes[i].mode;
	t->tls.on = url_schemes[i].tls;
	if (t->mode != REDIS_MODE_SINGLE)
		return parse_multi(url + strlen(url_schemes[i].prefix), t,
		    errstr, errlen);
	p = url + strlen(url_schemes[i].prefix);
	end = p + strlen(p);
	slash = strchr(p, '/');
	if (slash == NULL)
		slash = end;
	if (parse_userinfo(p, slash, t, &p) != 0) {
		copy_err(errstr, errlen, "redis_url: a part is too long");
		return -1;
	}
	if (parse_hostport(p, (size_t)(slash - p), t->host, sizeof(t->host),
	        &t->port, errstr, errlen) != 0)
		return -1;
	if (*slash == '/' && slash[1] != '\0') {
		if (util_decimal(slash + 1, strlen(slash + 1), DB_MAX, &v) !=
		    UTIL_DEC_OK) {
			copy_err(errstr, errlen,
			    "redis_url: bad database number");
			return -1;
		}
		t->db = (int)v;
	}
	return 0;
}
