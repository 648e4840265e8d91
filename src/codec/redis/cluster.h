/*
 * cluster.h - Redis Cluster's key space as a client sees it: the slot of a
 * key (CRC16 with hash tags, as Redis computes it), MOVED and ASK
 * redirections, and the slot map of CLUSTER SLOTS with a table of nodes,
 * each holding at most one connection (redis_node.c's struct redis_node).
 * No I/O: the Redis client opens the connections and feeds the replies in;
 * a node this module gives up is handed to cl->node_drop.
 */
#ifndef CHARGE_CLUSTER_H
#define CHARGE_CLUSTER_H

#include <stddef.h>

#include <hiredis.h>

#include "redis_url.h"

#define CLUSTER_SLOTS 16384
#define CLUSTER_NODES_MAX 64 /* nodes, so connections, per worker */
#define CLUSTER_NO_NODE 0xff /* slot_node[] of an unassigned slot */

/* CRC16-XMODEM (poly 0x1021, init 0) of buf, as in Redis's crc16.c. */
unsigned cluster_crc16(const char *buf, size_t len);

/*
 * The slot of key: CRC16 of the part between the first '{' and the first
 * '}' after it when that part is not empty, else of the whole key; mod
 * 16384.
 */
unsigned cluster_keyslot(const char *key, size_t len);

enum cluster_redirect_kind {
	CLUSTER_REDIRECT_NONE, /* not a redirection */
	CLUSTER_REDIRECT_MOVED,
	CLUSTER_REDIRECT_ASK,
	CLUSTER_REDIRECT_BAD, /* MOVED or ASK, malformed */
};

struct cluster_redirect {
	unsigned slot;
	char host[REDIS_HOST_MAX + 1]; /* "" means the node that answered */
	int port;
};

/*
 * Parses an error reply's text, "MOVED <slot> <host>:<port>" or "ASK ...".
 * Pure. Fills r for MOVED and ASK only.
 */
enum cluster_redirect_kind cluster_redirect_parse(const char *s, size_t len,
    struct cluster_redirect *r);

struct redis_node; /* redis_node.c's connection to one node */

struct cluster_node {
	char host[REDIS_HOST_MAX + 1];
	int port;
	struct redis_node *conn; /* NULL until redis_node.c connects */
	int in_map;              /* serves slots in the current map */
};

struct cluster {
	struct cluster_node nodes[CLUSTER_NODES_MAX];
	int nnodes;
	unsigned char slot_node[CLUSTER_SLOTS]; /* index into nodes[] */
	int stale; /* ask for the map before the next command */
	/* called with a node's conn when its entry is given up or freed */
	void (*node_drop)(struct redis_node *conn, void *arg);
	void *node_drop_arg;
};

/* A new, empty map (every slot unassigned, stale). NULL on ENOMEM. */
struct cluster *cluster_new(void);

/* NULL-safe; hands every node's conn to node_drop. */
void cluster_free(struct cluster *cl);

/*
 * The index of host:port in the node table, added when missing. A full
 * table gives up a node outside the map (its conn to node_drop). -1 when
 * every entry serves slots.
 */
int cluster_node_get(struct cluster *cl, const char *host, int port);

/* The node serving slot, or -1. */
int cluster_slot_node(const struct cluster *cl, unsigned slot);

/* After MOVED: slot is served by node idx (which now counts as mapped). */
void cluster_slot_set(struct cluster *cl, unsigned slot, int idx);

/*
 * Loads a CLUSTER SLOTS reply (primaries only; an empty host means
 * from_host, the node asked). The map changes only when the whole reply
 * is valid. 0, or -1 with errstr.
 */
int cluster_map_load(struct cluster *cl, const redisReply *r,
    const char *from_host, char *errstr, size_t errlen);

#endif
