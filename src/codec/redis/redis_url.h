/*
 * redis_url.h - where Redis is: the target parsed from redis_url, once, by
 * the configuration; redis_client.c connects to it.
 */
#ifndef CHARGE_REDIS_URL_H
#define CHARGE_REDIS_URL_H

#include <stddef.h>

#include "defaults.h"

#define REDIS_HOST_MAX 255       /* bytes of a host name (DNS limit) */
#define REDIS_URL_HOSTS_MAX 16   /* sentinels, or cluster seed nodes */
#define REDIS_MASTER_NAME_MAX 64 /* bytes, [A-Za-z0-9._-] */

enum redis_mode {
	REDIS_MODE_SINGLE,   /* redis://, rediss:// or unix:// */
	REDIS_MODE_SENTINEL, /* redis-sentinel://, rediss-sentinel:// */
	REDIS_MODE_CLUSTER,  /* redis-cluster://, rediss-cluster:// */
};

/*
 * TLS to every node (rediss schemes): on from the URL, the rest from the
 * redis_tls_* keys (the configuration fills them; the parser leaves them).
 */
struct redis_tls {
	int on;
	int verify;                   /* the certificates and the names */
	char ca_file[PATH_MAX_LEN];   /* "" or "none": the system's store */
	char cert_file[PATH_MAX_LEN]; /* "" or "none": no client certificate */
	char key_file[PATH_MAX_LEN];  /* "" or "none": in cert_file */
	/* "": each node's host (sent and verified) */
	char server_name[REDIS_HOST_MAX + 1];
};

struct redis_addr {
	char host[REDIS_HOST_MAX + 1];
	int port;
};

struct redis_target {
	int is_unix;
	char host[REDIS_HOST_MAX + 1];
	int port;
	char path[PATH_MAX_LEN];
	char user[128];
	char password[256];
	int db;
	enum redis_mode mode;
	/* sentinel and cluster: the sentinels or the seed nodes */
	struct redis_addr hosts[REDIS_URL_HOSTS_MAX];
	int nhosts;
	char master_name[REDIS_MASTER_NAME_MAX + 1]; /* sentinel */
	struct redis_tls tls;
};

/*
 * Parses, pure:
 *   redis://[[user]:password@]host:port[/db]
 *   unix:///path (a relative path is kept as given: the configuration
 *     resolves it first)
 *   redis-sentinel://[[user]:password@]host:port[,host:port...]/master[?db=N]
 *     (the sentinels; the password is the primary's)
 *   redis-cluster://[[user]:password@]host:port[,host:port...]
 *     (seed nodes; database 0 only)
 *   rediss://, rediss-sentinel://, rediss-cluster://: the same over TLS
 *     (t->tls.on; the sentinels too), every other field of t->tls zero
 * At most REDIS_URL_HOSTS_MAX hosts. 0, or -1 with errstr.
 */
int redis_url_parse(const char *url, struct redis_target *t, char *errstr,
    size_t errlen);

#endif
