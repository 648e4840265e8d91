/*
 * cluster.c - Redis Cluster's key space: slots, redirections, the slot map.
 * Follows the Redis Cluster specification ("Key distribution model",
 * "Redirection and resharding"); no I/O.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "util.h"

#define CRC16_POLY 0x1021 /* XMODEM: x^16 + x^12 + x^5 + 1 */
#define PORT_MAX 65535
#define PORT_DIGITS_MAX 5
#define SLOT_DIGITS_MAX 5

unsigned
cluster_crc16(const char *buf, size_t len)
{
	unsigned crc = 0;
	size_t i;
	int b;

	for (i = 0; i < len; i++) {
		crc ^= (unsigned)(unsigned char)buf[i] << 8;
		for (b = 0; b < 8; b++)
			crc = (crc & 0x8000) ? ((crc << 1) ^ CRC16_POLY)
			                     : crc << 1;
		crc &= 0xffff;
	}
	return crc;
}

unsigned
cluster_keyslot(const char *key, size_t len)
{
	const char *open, *close;

	open = memchr(key, '{', len);
	if (open != NULL) {
		close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
		if (close != NULL && close != open + 1)
			return cluster_crc16(open + 1,
			           (size_t)(close - open - 1)) %
			    CLUSTER_SLOTS;
	}
	return cluster_crc16(key, len) % CLUSTER_SLOTS;
}

/* 1 when s[0..len) starts with the word w, followed by a space or the end. */
static int
starts_with_word(const char *s, size_t len, const char *w)
{
	size_t n = strlen(w);

	return len >= n && memcmp(s, w, n) == 0 && (len == n || s[n] == ' ');
}

enum cluster_redirect_kind
cluster_redirect_parse(const char *s, size_t len, struct cluster_redirect *r)
{
	enum cluster_redirect_kind kind;
	const char *p, *end = s + len, *sp, *colon;
	unsigned long long v;
	size_t n;

	if (starts_with_word(s, len, "MOVED"))
		kind = CLUSTER_REDIRECT_MOVED;
	else if (starts_with_word(s, len, "ASK"))
		kind = CLUSTER_REDIRECT_ASK;
	else
		return CLUSTER_REDIRECT_NONE;
	p = s + (kind == CLUSTER_REDIRECT_MOVED ? 5 : 3);
	if (p == end || *p++ != ' ')
		return CLUSTER_REDIRECT_BAD;
	/* <slot> */
	sp = memchr(p, ' ', (size_t)(end - p));
	if (sp == NULL || sp - p > SLOT_DIGITS_MAX ||
	    util_decimal(p, (size_t)(sp - p), CLUSTER_SLOTS - 1, &v) !=
	        UTIL_DEC_OK)
		return CLUSTER_REDIRECT_BAD;
	r->slot = (unsigned)v;
	/* <host>:<port>, the host may hold colons (IPv6) or be empty */
	p = sp + 1;
	for (colon = NULL, sp = p; sp < end; sp++)
		if (*sp == ':')
			colon = sp;
		else if (*sp == ' ')
			return CLUSTER_REDIRECT_BAD;
	if (colon == NULL)
		return CLUSTER_REDIRECT_BAD;
	n = (size_t)(colon - p);
	if (n > REDIS_HOST_MAX || (n == 1 && *p == '?'))
		return CLUSTER_REDIRECT_BAD;
	if (end - colon - 1 > PORT_DIGITS_MAX ||
	    util_decimal(colon + 1, (size_t)(end - colon - 1), PORT_MAX, &v) !=
	        UTIL_DEC_OK ||
	    v < 1)
		return CLUSTER_REDIRECT_BAD;
	memcpy(r->host, p, n);
	r->host[n] = '\0';
	r->port = (int)v;
	return kind;
}

struct cluster *
cluster_new(void)
{
	struct cluster *cl = calloc(1, sizeof(*cl));

	if (cl == NULL)
		return NULL;
	memset(cl->slot_node, CLUSTER_NO_NODE, sizeof(cl->slot_node));
	cl->stale = 1;
	return cl;
}

void
cluster_free(struct cluster *cl)
{
	int i;

	if (cl == NULL)
		return;
	for (i = 0; i < cl->nnodes; i++)
		if (cl->nodes[i].conn != NULL && cl->node_drop != NULL)
			cl->node_drop(cl->nodes[i].conn, cl->node_drop_arg);
	free(cl);
}

/*
 * cluster_node_get() where keep[i] (or, without keep, in_map) marks the
 * entries that must not be given up.
 */
static int
node_get(struct cluster *cl, const char *host, int port,
    const unsigned char *keep)
{
	struct cluster_node *nd;
	int i, victim = -1;

	if (strlen(host) > REDIS_HOST_MAX)
		return -1;
	for (i = 0; i < cl->nnodes; i++)
		if (cl->nodes[i].port == port &&
		    strcmp(cl->nodes[i].host, host) == 0)
			return i;
	if (cl->nnodes < CLUSTER_NODES_MAX)
		victim = cl->nnodes++;
	else
		for (i = 0; i < cl->nnodes && victim < 0; i++)
			if (!(keep != NULL ? keep[i] : cl->nodes[i].in_map))
				victim = i;
	if (victim < 0)
		return -1;
	nd = &cl->nodes[victim];
	if (nd->conn != NULL && cl->node_drop != NULL)
		cl->node_drop(nd->conn, cl->node_drop_arg);
	memset(nd, 0, sizeof(*nd));
	(void)snprintf(nd->host, sizeof(nd->host), "%s", host);
	nd->port = port;
	/* a victim held no slot of the map; it does not serve any now */
	return victim;
}

int
cluster_node_get(struct cluster *cl, const char *host, int port)
{
	return node_get(cl, host, port, NULL);
}

int
cluster_slot_node(const struct cluster *cl, unsigned slot)
{
	if (slot >= CLUSTER_SLOTS || cl->slot_node[slot] == CLUSTER_NO_NODE)
		return -1;
	return cl->slot_node[slot];
}

void
cluster_slot_set(struct cluster *cl, unsigned slot, int idx)
{
	if (slot >= CLUSTER_SLOTS || idx < 0 || idx >= cl->nnodes)
		return;
	cl->slot_node[slot] = (unsigned char)idx;
	cl->nodes[idx].in_map = 1;
}

static int
reply_int(const redisReply *r, long long min, long long max, long long *out)
{
	if (r->type != REDIS_REPLY_INTEGER || r->integer < min ||
	    r->integer > max)
		return -1;
	*out = r->integer;
	return 0;
}

int
cluster_map_load(struct cluster *cl, const redisReply *r, const char *from_host,
    char *errstr, size_t errlen)
{
	unsigned char map[CLUSTER_SLOTS];
	unsigned char keep[CLUSTER_NODES_MAX], used[CLUSTER_NODES_MAX];
	const redisReply *e, *pr;
	char host[REDIS_HOST_MAX + 1];
	long long start, end, port, s;
	size_t i;
	int idx, k;

	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		util_err(errstr, errlen, "CLUSTER SLOTS: not an array");
		return -1;
	}
	memset(map, CLUSTER_NO_NODE, sizeof(map));
	memset(used, 0, sizeof(used));
	for (k = 0; k < CLUSTER_NODES_MAX; k++)
		keep[k] = k < cl->nnodes && cl->nodes[k].in_map;
	for (i = 0; i < r->elements; i++) {
		e = r->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    reply_int(e->element[0], 0, CLUSTER_SLOTS - 1, &start) !=
		        0 ||
		    reply_int(e->element[1], start, CLUSTER_SLOTS - 1, &end) !=
		        0)
			goto bad;
		pr = e->element[2];
		if (pr->type != REDIS_REPLY_ARRAY || pr->elements < 2 ||
		    pr->element[0]->type != REDIS_REPLY_STRING ||
		    reply_int(pr->element[1], 1, PORT_MAX, &port) != 0 ||
		    pr->element[0]->len > REDIS_HOST_MAX)
			goto bad;
		if (pr->element[0]->len == 0)
			(void)snprintf(host, sizeof(host), "%s", from_host);
		else
			(void)snprintf(host, sizeof(host), "%s",
			    pr->element[0]->str);
		if (strcmp(host, "?") == 0)
			continue; /* the node's address is unknown */
		if ((idx = node_get(cl, host, (int)port, keep)) < 0) {
			util_err(errstr, errlen,
			    "CLUSTER SLOTS: more than %d nodes",
			    CLUSTER_NODES_MAX);
			return -1;
		}
		keep[idx] = used[idx] = 1;
		for (s = start; s <= end; s++)
			map[s] = (unsigned char)idx;
	}
	memcpy(cl->slot_node, map, sizeof(map));
	for (k = 0; k < cl->nnodes; k++)
		cl->nodes[k].in_map = used[k];
	cl->stale = 0;
	return 0;
bad:
	util_err(errstr, errlen, "CLUSTER SLOTS: unexpected reply shape");
	return -1;
}
