/*
 * http1_proxy.c - the proxy of http1_proxy.h: the environment read as
 * libcurl 7.88 reads it (detect_proxy, Curl_check_noproxy, parse_proxy),
 * for http:// proxies only.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "http1_proxy.h"
#include "util.h"

/* "HTTP/1.1 200 " or "HTTP/1.1 200\r": what status_line_check reads */
#define STATUS_LINE_MIN 13

/* A variable's value, or NULL when it is unset or empty (as curl_getenv). */
static const char *
env_get(const char *name)
{
	const char *v = getenv(name);

	return v != NULL && v[0] != '\0' ? v : NULL;
}

/* 1 when the address text a is in the network net/bits (0: all of it). */
static int
cidr_match(int af, const char *a, const char *net, unsigned bits)
{
	unsigned char x[16], y[16];
	unsigned len = af == AF_INET ? 4 : 16, i;

	if (inet_pton(af, a, x) != 1 || inet_pton(af, net, y) != 1)
		return 0;
	if (bits == 0 || bits > len * 8)
		bits = len * 8;
	for (i = 0; i < bits / 8; i++)
		if (x[i] != y[i])
			return 0;
	if (bits % 8 == 0)
		return 1;
	return ((x[i] ^ y[i]) & (0xff00 >> (bits % 8)) & 0xff) == 0;
}

/* One no_proxy entry tok[0..n) against host (its length hlen, af). */
static int
entry_match(const char *tok, size_t n, const char *host, size_t hlen, int af)
{
	char ip[128], *slash;

	if (af != 0) {
		if (n >= sizeof(ip))
			return 0;
		memcpy(ip, tok, n);
		ip[n] = '\0';
		if ((slash = strchr(ip, '/')) != NULL)
			*slash++ = '\0';
		return cidr_match(af, host, ip,
		    slash != NULL ? (unsigned)atoi(slash) : 0);
	}
	if (n > 0 && tok[n - 1] == '.')
		n--;
	if (n > 0 && tok[0] == '.') {
		tok++;
		n--;
	}
	if (n == hlen)
		return strncasecmp(tok, host, n) == 0;
	/* www.example.com matches example.com; nonexample.com does not */
	return n < hlen && host[hlen - n - 1] == '.' &&
	    strncasecmp(tok, host + hlen - n, n) == 0;
}

int
h1_proxy_skip(const char *no_proxy, const char *host)
{
	unsigned char a[16];
	size_t hlen = strlen(host), n;
	const char *p = no_proxy, *tok;
	int af = 0;

	if (p == NULL || p[0] == '\0' || hlen == 0)
		return 0;
	if (strcmp(p, "*") == 0)
		return 1;
	if (inet_pton(AF_INET, host, a) == 1)
		af = AF_INET;
	else if (inet_pton(AF_INET6, host, a) == 1)
		af = AF_INET6;
	else if (host[hlen - 1] == '.')
		hlen--;
	while (*p != '\0') {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		for (tok = p;
		     *p != '\0' && *p != ' ' && *p != '\t' && *p != ',';)
			p++;
		n = (size_t)(p - tok);
		if (n > 0 && entry_match(tok, n, host, hlen, af))
			return 1;
	}
	return 0;
}

/* Percent-decodes s[0..n) into out (NUL-terminated); 0 or -1. */
static int
pct_decode(const char *s, size_t n, char *out, size_t cap)
{
	size_t i, o = 0;

	for (i = 0; i < n; i++) {
		int c = (unsigned char)s[i];

		if (c == '%' && i + 2 < n &&
		    isxdigit((unsigned char)s[i + 1]) &&
		    isxdigit((unsigned char)s[i + 2])) {
			char hex[3] = { s[i + 1], s[i + 2], '\0' };

			c = (int)strtol(hex, NULL, 16);
			i += 2;
		}
		if (o + 1 >= cap)
			return -1;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return 0;
}

/* The Proxy-Authorization line for userinfo u[0..n) ("user[:password]"). */
static int
proxy_auth(struct h1_proxy *px, const char *u, size_t n)
{
	const char *colon = memchr(u, ':', n);
	char user[128], pass[128], both[260];
	unsigned char b64[360];
	size_t ul = colon != NULL ? (size_t)(colon - u) : n;
	int len;

	if (pct_decode(u, ul, user, sizeof(user)) != 0 ||
	    pct_decode(colon != NULL ? colon + 1 : "",
	        colon != NULL ? n - ul - 1 : 0, pass, sizeof(pass)) != 0)
		return -1;
	len = snprintf(both, sizeof(both), "%s:%s", user, pass);
	if (len < 0 || (size_t)len >= sizeof(both))
		return -1;
	(void)EVP_EncodeBlock(b64, (const unsigned char *)both, len);
	return (size_t)snprintf(px->auth, sizeof(px->auth),
	           "Proxy-Authorization: Basic %s\r\n", b64) < sizeof(px->auth)
	    ? 0
	    : -1;
}

/* Parses the proxy URL [http://][user[:pass]@]host[:port][/...]; 0 or -1. */
static int
proxy_parse(const char *url, struct h1_proxy *px)
{
	const char *h = strstr(url, "://"), *end, *at, *hend;
	size_t n;

	if (h != NULL && (h - url != 4 || strncasecmp(url, "http", 4) != 0))
		return -1; /* https://, socks5:// ...: not spoken here */
	h = h != NULL ? h + 3 : url;
	end = h + strcspn(h, "/?#");
	if ((at = memchr(h, '@', (size_t)(end - h))) != NULL) {
		while (memchr(at + 1, '@', (size_t)(end - at - 1)) != NULL)
			at = memchr(at + 1, '@', (size_t)(end - at - 1));
		if (proxy_auth(px, h, (size_t)(at - h)) != 0)
			return -1;
		h = at + 1;
	}
	px->port = H1_PROXY_PORT;
	if (*h == '[') {
		if ((hend = memchr(h, ']', (size_t)(end - h))) == NULL)
			return -1;
		h++;
	} else if ((hend = memchr(h, ':', (size_t)(end - h))) == NULL) {
		hend = end;
	}
	if ((n = (size_t)(hend - h)) == 0 || n >= sizeof(px->host))
		return -1;
	memcpy(px->host, h, n);
	px->host[n] = '\0';
	if (*hend == ']')
		hend++;
	if (hend < end && *hend == ':' && hend + 1 < end) {
		char *e;
		long v = strtol(hend + 1, &e, 10);

		if (e != end || v < 1 || v > 65535)
			return -1;
		px->port = (int)v;
	} else if (hend < end && !(*hend == ':' && hend + 1 == end)) {
		return -1;
	}
	return 0;
}

int
h1_proxy_env(int tls, const char *host, struct h1_proxy *out, char *errstr,
    size_t errlen)
{
	const char *name = tls ? "https_proxy" : "http_proxy", *url, *np;

	memset(out, 0, sizeof(*out));
	/* HTTP_PROXY is not read: under CGI it is a request's Proxy: header */
	if ((url = env_get(name)) == NULL && tls)
		url = env_get(name = "HTTPS_PROXY");
	if (url == NULL && (url = env_get(name = "all_proxy")) == NULL)
		url = env_get(name = "ALL_PROXY");
	if (url == NULL)
		return 0;
	if ((np = env_get("no_proxy")) == NULL)
		np = env_get("NO_PROXY");
	if (h1_proxy_skip(np, host))
		return 0;
	if (proxy_parse(url, out) != 0) {
		util_err(errstr, errlen,
		    "%s: not a proxy the provider client speaks to (http://[USER[:PASSWORD]@]HOST[:PORT])",
		    name);
		return -1;
	}
	return 1;
}

/*
 * The bytes of buf[0..len) that begin the status line, as far as they
 * came: "HTTP/1.0 " or "HTTP/1.1 ", a status 100-999, then a space or the
 * line's end (as llhttp reads it). 0 when they fit, -1 when not.
 */
static int
status_line_check(const char *buf, size_t len)
{
	static const char head[] = "HTTP/1.";
	size_t i;
	int ok;

	for (i = 0; i < len && i < STATUS_LINE_MIN; i++) {
		char c = buf[i];

		if (i < sizeof(head) - 1)
			ok = c == head[i];
		else if (i == 7)
			ok = c == '0' || c == '1';
		else if (i == 8)
			ok = c == ' ';
		else if (i == 9)
			ok = c >= '1' && c <= '9';
		else if (i < 12)
			ok = isdigit((unsigned char)c);
		else
			ok = c == ' ' || c == '\r';
		if (!ok)
			return -1;
	}
	return 0;
}

int
h1_proxy_answer(const char *buf, size_t len, int *status)
{
	const char *end;
	size_t i;

	for (end = NULL, i = 0; i + 3 < len; i++)
		if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
			end = buf + i + 4;
			break;
		}
	if (status_line_check(buf, len) != 0)
		return -1;
	if (end == NULL)
		return 0;
	/* the empty line comes after the status line's first 13 bytes */
	*status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
	return (int)(end - buf);
}

int
h1_proxy_connect(const struct h1_proxy *px, const char *authority, char *buf,
    size_t cap)
{
	int n = snprintf(buf, cap, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n",
	    authority, authority, px->auth);

	return n < 0 || (size_t)n >= cap ? -1 : n;
}
