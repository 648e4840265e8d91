/*
 * redis_url.h - where Redis is: the target parsed from redis_url, once, by
 * the configuration; redis.c connects to it.
 */
#ifndef CHARGE_REDIS_URL_H
#define CHARGE_REDIS_URL_H

#include <stddef.h>

#include "defaults.h"

struct redis_target {
	int is_unix;
	char host[256];
	int port;
	char path[PATH_MAX_LEN];
	char user[128];
	char password[256];
	int db;
};

/*
 * Parses redis://[user:password@]host:port[/db] or unix:///path (a relative
 * path is kept as given: the configuration resolves it first). Pure. 0, or
 * -1 with errstr.
 */
int redis_url_parse(const char *url, struct redis_target *t, char *errstr,
    size_t errlen);

#endif
