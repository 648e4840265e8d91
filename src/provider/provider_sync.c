/*
 * provider_sync.c - GETs on the provider with libcurl's easy interface, one
 * kept-alive connection, bounded answers (charge-reconcile's reads; the
 * responder's calls are provider_http.c's, on an event loop).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "clock.h"
#include "provider_sync.h"
#include "util.h"

struct provider_sync {
	CURL *easy;
	struct curl_slist *hdrs;
	char base[URL_MAX_LEN];      /* "http://host:port", no trailing '/' */
	char unix_path[URL_MAX_LEN]; /* "" unless provider_url is unix: */
	char *body;                  /* the last answer */
	size_t len, cap;
	int too_big;
};

static size_t
on_body(char *p, size_t size, size_t nmemb, void *arg)
{
	struct provider_sync *pv = arg;
	size_t n = size * nmemb;

	if (pv->len + n + 1 > PROVIDER_SYNC_BODY_MAX) {
		pv->too_big = 1;
		return 0; /* ends the transfer */
	}
	if (util_grow(&pv->body, &pv->cap, pv->len + n + 1, 65536,
	        PROVIDER_SYNC_BODY_MAX) != 0)
		return 0;
	memcpy(pv->body + pv->len, p, n);
	pv->len += n;
	pv->body[pv->len] = '\0';
	return n;
}

int
provider_sync_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

void
provider_sync_global_done(void)
{
	curl_global_cleanup();
}

struct provider_sync *
provider_sync_open(const struct config *cfg, char *errstr, size_t errlen)
{
	struct provider_sync *p = calloc(1, sizeof(*p));
	char auth[300];
	size_t n;
	int rc = 0;

	if (p == NULL) {
		util_err(errstr, errlen, "out of memory");
		return NULL;
	}
	if (cfg->provider_url[0] == '\0') {
		util_err(errstr, errlen,
		    "provider_url is empty: the in-process simulation keeps no list of charges to reconcile against");
		goto fail;
	}
	if (strncmp(cfg->provider_url, "unix:", 5) == 0) {
		(void)snprintf(p->unix_path, sizeof(p->unix_path), "%s",
		    cfg->provider_url + 5);
		(void)snprintf(p->base, sizeof(p->base), "http://localhost");
	} else {
		n = strlen(cfg->provider_url);
		while (n > 0 && cfg->provider_url[n - 1] == '/')
			n--;
		if (n >= sizeof(p->base))
			goto toolong;
		memcpy(p->base, cfg->provider_url, n);
		p->base[n] = '\0';
	}
	if ((size_t)snprintf(auth, sizeof(auth), "Authorization: Bearer %s",
	        cfg->provider_api_key) >= sizeof(auth))
		goto toolong;
	if ((p->easy = curl_easy_init()) == NULL ||
	    (p->hdrs = curl_slist_append(NULL, auth)) == NULL) {
		util_err(errstr, errlen, "libcurl: out of memory");
		goto fail;
	}
	if (p->unix_path[0] != '\0')
		rc |= curl_easy_setopt(p->easy, CURLOPT_UNIX_SOCKET_PATH,
		    p->unix_path);
	rc |= curl_easy_setopt(p->easy, CURLOPT_HTTPHEADER, p->hdrs);
	rc |= curl_easy_setopt(p->easy, CURLOPT_WRITEFUNCTION, on_body);
	rc |= curl_easy_setopt(p->easy, CURLOPT_WRITEDATA, p);
	rc |= curl_easy_setopt(p->easy, CURLOPT_NOSIGNAL, 1L);
	rc |= curl_easy_setopt(p->easy, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)cfg->provider_connect_timeout_ms);
	rc |= curl_easy_setopt(p->easy, CURLOPT_TIMEOUT_MS,
	    (long)PROVIDER_SYNC_TIMEOUT_MS);
	rc |= curl_easy_setopt(p->easy, CURLOPT_PROTOCOLS_STR, "http,https");
	rc |= curl_easy_setopt(p->easy, CURLOPT_SSL_VERIFYPEER,
	    cfg->provider_tls_verify ? 1L : 0L);
	rc |= curl_easy_setopt(p->easy, CURLOPT_SSL_VERIFYHOST,
	    cfg->provider_tls_verify ? 2L : 0L);
	if (cfg->provider_ca_file[0] != '\0' &&
	    strcmp(cfg->provider_ca_file, "none") != 0)
		rc |= curl_easy_setopt(p->easy, CURLOPT_CAINFO,
		    cfg->provider_ca_file);
	if (rc != 0) {
		util_err(errstr, errlen, "libcurl: cannot set its options");
		goto fail;
	}
	return p;
toolong:
	util_err(errstr, errlen, "provider_url or provider_api_key: too long");
fail:
	provider_sync_close(p);
	return NULL;
}

void
provider_sync_close(struct provider_sync *p)
{
	if (p == NULL)
		return;
	if (p->easy != NULL)
		curl_easy_cleanup(p->easy);
	curl_slist_free_all(p->hdrs);
	free(p->body);
	free(p);
}

int
provider_sync_get(struct provider_sync *p, const char *path, const char **body,
    size_t *len, long *status, char *errstr, size_t errlen)
{
	char url[2 * URL_MAX_LEN];
	long pause_ms = PROVIDER_SYNC_BACKOFF_MS;
	CURLcode cc;
	int attempt;

	if ((size_t)snprintf(url, sizeof(url), "%s%s", p->base, path) >=
	    sizeof(url)) {
		util_err(errstr, errlen, "provider: the URL is too long");
		return -1;
	}
	for (attempt = 1; attempt <= PROVIDER_SYNC_ATTEMPTS; attempt++) {
		if (attempt > 1) {
			sleep_ms(pause_ms);
			pause_ms *= 2;
		}
		p->len = 0;
		p->too_big = 0;
		*status = 0;
		if (curl_easy_setopt(p->easy, CURLOPT_URL, url) != CURLE_OK) {
			util_err(errstr, errlen, "libcurl: cannot set the URL");
			return -1;
		}
		cc = curl_easy_perform(p->easy);
		if (p->too_big) {
			util_err(errstr, errlen,
			    "provider: GET %s: the answer exceeds %d bytes",
			    path, PROVIDER_SYNC_BODY_MAX);
			return -1;
		}
		if (cc != CURLE_OK) {
			util_err(errstr, errlen, "provider: GET %s: %s", path,
			    curl_easy_strerror(cc));
			continue;
		}
		(void)curl_easy_getinfo(p->easy, CURLINFO_RESPONSE_CODE,
		    status);
		if (*status == 429 || *status >= 500) {
			util_err(errstr, errlen, "provider: GET %s: HTTP %ld",
			    path, *status);
			continue;
		}
		*body = p->body != NULL ? p->body : "";
		*len = p->len;
		return 0;
	}
	return -1;
}
