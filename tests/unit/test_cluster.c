/*
 * test_cluster.c - Redis Cluster's key space: CRC16 and hash slots (the
 * test vectors of the Redis Cluster specification), MOVED/ASK parsing, the
 * slot map loaded from CLUSTER SLOTS replies (built from RESP bytes with
 * hiredis's reader) and the capped node table.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"

#define S(lit) (lit), (sizeof(lit) - 1)

static void
test_crc16(void **state)
{
	(void)state;
	/* the specification's check value of CRC16-XMODEM */
	assert_int_equal(cluster_crc16(S("123456789")), 0x31C3);
	assert_int_equal(cluster_crc16(S("")), 0);
	assert_int_equal(cluster_crc16(S("a")), 0x7C87);
	/* binary-safe: a NUL counts */
	assert_int_not_equal(cluster_crc16("a\0b", 3), cluster_crc16(S("a")));
}

static void
test_keyslot_plain(void **state)
{
	(void)state;
	assert_int_equal(cluster_keyslot(S("123456789")), 0x31C3 % 16384);
	/* CLUSTER KEYSLOT of a live Redis 7.0 */
	assert_int_equal(cluster_keyslot(S("charge:idem:demo:k1")), 4281);
	assert_int_equal(cluster_keyslot(S("foo")), 12182);
	assert_int_equal(cluster_keyslot(S("bar")), 5061);
	assert_int_equal(cluster_keyslot(S("")), 0);
	/* every slot is below 16384 */
	assert_true(cluster_keyslot(S("\xff\xff\xff\xff")) < CLUSTER_SLOTS);
}

static void
test_keyslot_hash_tags(void **state)
{
	(void)state;
	/* the specification's examples */
	assert_int_equal(cluster_keyslot(S("{user1000}.following")),
	    cluster_keyslot(S("{user1000}.followers")));
	assert_int_equal(cluster_keyslot(S("{user1000}.following")),
	    cluster_crc16(S("user1000")) % 16384);
	assert_int_equal(cluster_keyslot(S("foo{}{bar}")),
	    cluster_crc16(S("foo{}{bar}")) % 16384);
	assert_int_equal(cluster_keyslot(S("foo{{bar}}zap")),
	    cluster_crc16(S("{bar")) % 16384);
	assert_int_equal(cluster_keyslot(S("foo{bar}{zap}")),
	    cluster_crc16(S("bar")) % 16384);
	/* no closing brace, or only one before the opening one: whole key */
	assert_int_equal(cluster_keyslot(S("foo{bar")),
	    cluster_crc16(S("foo{bar")) % 16384);
	assert_int_equal(cluster_keyslot(S("}foo{")),
	    cluster_crc16(S("}foo{")) % 16384);
	assert_int_equal(cluster_keyslot(S("{}")),
	    cluster_crc16(S("{}")) % 16384);
	/* the tag may be anywhere and is everything between the braces */
	assert_int_equal(cluster_keyslot(S("x{a b}y")),
	    cluster_crc16(S("a b")) % 16384);
	assert_int_equal(cluster_keyslot(S("{charge}:idem:demo:k1")),
	    cluster_keyslot(S("charge")));
}

static void
redirect_ok(const char *s, enum cluster_redirect_kind kind, unsigned slot,
    const char *host, int port)
{
	struct cluster_redirect r;

	memset(&r, 'X', sizeof(r));
	if (cluster_redirect_parse(s, strlen(s), &r) != kind)
		fail_msg("\"%s\": wrong kind", s);
	assert_int_equal(r.slot, slot);
	assert_string_equal(r.host, host);
	assert_int_equal(r.port, port);
}

static void
redirect_is(const char *s, enum cluster_redirect_kind kind)
{
	struct cluster_redirect r;

	if (cluster_redirect_parse(s, strlen(s), &r) != kind)
		fail_msg("\"%s\": want kind %d", s, (int)kind);
}

static void
test_redirect(void **state)
{
	(void)state;
	redirect_ok("MOVED 3999 127.0.0.1:6381", CLUSTER_REDIRECT_MOVED, 3999,
	    "127.0.0.1", 6381);
	redirect_ok("ASK 3999 127.0.0.1:6381", CLUSTER_REDIRECT_ASK, 3999,
	    "127.0.0.1", 6381);
	redirect_ok("MOVED 0 redis-3.example:1", CLUSTER_REDIRECT_MOVED, 0,
	    "redis-3.example", 1);
	redirect_ok("MOVED 16383 h:65535", CLUSTER_REDIRECT_MOVED, 16383, "h",
	    65535);
	/* an empty host is the node that answered; IPv6 keeps its colons */
	redirect_ok("MOVED 3999 :6381", CLUSTER_REDIRECT_MOVED, 3999, "", 6381);
	redirect_ok("ASK 1 ::1:6381", CLUSTER_REDIRECT_ASK, 1, "::1", 6381);
	/* binary length, not NUL: the rest of the buffer is not read */
	{
		struct cluster_redirect r;

		assert_int_equal(cluster_redirect_parse("MOVED 7 h:12345", 13,
		                     &r),
		    CLUSTER_REDIRECT_MOVED);
		assert_int_equal(r.port, 123);
	}
}

static void
test_redirect_malformed(void **state)
{
	char big[400];

	(void)state;
	redirect_is("MOVED", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED ", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999 ", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED  3999 h:1", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED x 127.0.0.1:6381", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED -1 h:1", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED +1 h:1", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 16384 h:1", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 123456 h:1", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999 127.0.0.1", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999 127.0.0.1:", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999 127.0.0.1:0", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999 127.0.0.1:65536", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999 127.0.0.1:6381x", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999 127.0.0.1:0006381", CLUSTER_REDIRECT_BAD);
	redirect_is("MOVED 3999 h:1 extra", CLUSTER_REDIRECT_BAD);
	redirect_is("ASK 3999 ?:6381", CLUSTER_REDIRECT_BAD);
	redirect_is("ASK", CLUSTER_REDIRECT_BAD);
	(void)snprintf(big, sizeof(big), "MOVED 1 %0300d:1", 0);
	redirect_is(big, CLUSTER_REDIRECT_BAD);
	/* not redirections at all */
	redirect_is("", CLUSTER_REDIRECT_NONE);
	redirect_is("ERR unknown command", CLUSTER_REDIRECT_NONE);
	redirect_is("MOVEDX 1 h:1", CLUSTER_REDIRECT_NONE);
	redirect_is("ASKING", CLUSTER_REDIRECT_NONE);
	redirect_is("moved 1 h:1", CLUSTER_REDIRECT_NONE);
	redirect_is("NOSCRIPT No matching script", CLUSTER_REDIRECT_NONE);
	redirect_is("CLUSTERDOWN The cluster is down", CLUSTER_REDIRECT_NONE);
}

/* A reply from RESP bytes, as hiredis would hand it over. */
static redisReply *
reply_from(const char *resp)
{
	redisReader *rd = redisReaderCreate();
	void *r = NULL;

	assert_non_null(rd);
	assert_int_equal(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
	assert_int_equal(redisReaderGetReply(rd, &r), REDIS_OK);
	assert_non_null(r);
	redisReaderFree(rd);
	return r;
}

/* One CLUSTER SLOTS range "start-end host:port" with one replica. */
static size_t
range(char *p, size_t n, int start, int end, const char *host, int port)
{
	return (size_t)snprintf(p, n,
	    "*4\r\n:%d\r\n:%d\r\n"
	    "*3\r\n$%zu\r\n%s\r\n:%d\r\n$4\r\nid-p\r\n"
	    "*3\r\n$9\r\n127.0.0.9\r\n:9999\r\n$4\r\nid-r\r\n",
	    start, end, strlen(host), host, port);
}

static int
load(struct cluster *cl, const char *resp, const char *from)
{
	redisReply *r = reply_from(resp);
	char err[128] = "";
	int rc;

	rc = cluster_map_load(cl, r, from, err, sizeof(err));
	if (rc != 0)
		assert_true(strlen(err) > 0);
	freeReplyObject(r);
	return rc;
}

static const char *
slot_host(struct cluster *cl, unsigned slot, int *port)
{
	int i = cluster_slot_node(cl, slot);

	if (i < 0)
		return NULL;
	*port = cl->nodes[i].port;
	return cl->nodes[i].host;
}

static void
test_map_load(void **state)
{
	struct cluster *cl = cluster_new();
	char resp[1024];
	size_t n;
	int port = 0;

	(void)state;
	assert_non_null(cl);
	assert_true(cl->stale);
	assert_int_equal(cluster_slot_node(cl, 0), -1);
	n = (size_t)snprintf(resp, sizeof(resp), "*3\r\n");
	n += range(resp + n, sizeof(resp) - n, 0, 5460, "127.0.0.1", 7000);
	n += range(resp + n, sizeof(resp) - n, 5461, 10922, "127.0.0.1", 7001);
	(void)range(resp + n, sizeof(resp) - n, 10923, 16383, "", 7002);
	assert_int_equal(load(cl, resp, "10.0.0.1"), 0);
	assert_false(cl->stale);
	/* primaries only: the replica 127.0.0.9:9999 is not a node */
	assert_int_equal(cl->nnodes, 3);
	assert_string_equal(slot_host(cl, 0, &port), "127.0.0.1");
	assert_int_equal(port, 7000);
	assert_string_equal(slot_host(cl, 5460, &port), "127.0.0.1");
	assert_int_equal(port, 7000);
	assert_int_equal(port, 7000);
	(void)slot_host(cl, 5461, &port);
	assert_int_equal(port, 7001);
	(void)slot_host(cl, 4281, &port);
	assert_int_equal(port, 7000);
	/* an empty host is the node asked */
	assert_string_equal(slot_host(cl, 16383, &port), "10.0.0.1");
	assert_int_equal(port, 7002);
	assert_int_equal(cluster_slot_node(cl, 16384), -1);

	/* a reload moves slots; unassigned slots have no node */
	n = (size_t)snprintf(resp, sizeof(resp), "*2\r\n");
	n += range(resp + n, sizeof(resp) - n, 0, 99, "127.0.0.1", 7001);
	(void)range(resp + n, sizeof(resp) - n, 100, 200, "?", 7005);
	assert_int_equal(load(cl, resp, "h"), 0);
	(void)slot_host(cl, 50, &port);
	assert_int_equal(port, 7001);
	assert_int_equal(cluster_slot_node(cl, 150), -1);
	assert_int_equal(cluster_slot_node(cl, 5000), -1);
	assert_false(cl->nodes[0].in_map);
	assert_true(cl->nodes[1].in_map);

	/* MOVED: one slot to another node */
	cluster_slot_set(cl, 5000, cluster_node_get(cl, "127.0.0.1", 7003));
	(void)slot_host(cl, 5000, &port);
	assert_int_equal(port, 7003);
	cluster_slot_set(cl, 5001, -1);
	cluster_slot_set(cl, 16384, 0);
	assert_int_equal(cluster_slot_node(cl, 5001), -1);
	cluster_free(cl);
	cluster_free(NULL);
}

/* An invalid reply leaves the map as it was. */
static void
test_map_load_invalid(void **state)
{
	static const char *bad[] = {
		"+OK\r\n",
		"-ERR This instance has cluster support disabled\r\n",
		"*1\r\n:1\r\n",
		"*1\r\n*2\r\n:0\r\n:1\r\n",
		/* start after end, end beyond the last slot, negative */
		"*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n",
		"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",
		"*1\r\n*3\r\n:-1\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",
		/* port 0, port too large, port as a string, host not a string */
		"*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:0\r\n",
		"*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:65536\r\n",
		"*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n$4\r\n7000\r\n",
		"*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n:1\r\n:7000\r\n",
		"*1\r\n*3\r\n:0\r\n:5\r\n*1\r\n$1\r\nh\r\n",
		"*1\r\n*3\r\n$1\r\n0\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n",
	};
	struct cluster *cl = cluster_new();
	char resp[512];
	size_t i, n;
	int port = 0;

	(void)state;
	n = (size_t)snprintf(resp, sizeof(resp), "*1\r\n");
	(void)range(resp + n, sizeof(resp) - n, 0, 16383, "127.0.0.1", 7000);
	assert_int_equal(load(cl, resp, "h"), 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cl->stale = 1;
		if (load(cl, bad[i], "h") != -1)
			fail_msg("reply %zu accepted", i);
		assert_true(cl->stale);
		(void)slot_host(cl, 1234, &port);
		assert_int_equal(port, 7000);
	}
	{
		char err[64];

		assert_int_equal(cluster_map_load(cl, NULL, "h", err,
		                     sizeof(err)),
		    -1);
	}
	cluster_free(cl);
}

/* At most CLUSTER_NODES_MAX nodes; only nodes outside the map are given up. */
static void
test_node_table_cap(void **state)
{
	struct cluster *cl = cluster_new();
	char host[32], *resp;
	size_t n, cap = 200000;
	int i, j;

	(void)state;
	for (i = 0; i < CLUSTER_NODES_MAX; i++) {
		(void)snprintf(host, sizeof(host), "10.0.0.%d", i);
		assert_int_equal(cluster_node_get(cl, host, 7000), i);
	}
	/* known: the same entry */
	assert_int_equal(cluster_node_get(cl, "10.0.0.5", 7000), 5);
	/* full of nodes outside the map: one is given up */
	j = cluster_node_get(cl, "10.0.1.1", 7000);
	assert_true(j >= 0 && j < CLUSTER_NODES_MAX);
	assert_int_equal(cl->nnodes, CLUSTER_NODES_MAX);
	assert_string_equal(cl->nodes[j].host, "10.0.1.1");
	/* too long a host */
	{
		char longhost[REDIS_HOST_MAX + 2];

		memset(longhost, 'h', sizeof(longhost) - 1);
		longhost[sizeof(longhost) - 1] = '\0';
		assert_int_equal(cluster_node_get(cl, longhost, 1), -1);
	}
	cluster_free(cl);

	/* a map of CLUSTER_NODES_MAX primaries fits; then no room is left */
	resp = malloc(cap);
	assert_non_null(resp);
	cl = cluster_new();
	n = (size_t)snprintf(resp, cap, "*%d\r\n", CLUSTER_NODES_MAX);
	for (i = 0; i < CLUSTER_NODES_MAX; i++) {
		(void)snprintf(host, sizeof(host), "10.0.0.%d", i);
		n += range(resp + n, cap - n, i * 10, i * 10 + 9, host, 7000);
	}
	assert_int_equal(load(cl, resp, "h"), 0);
	assert_int_equal(cluster_node_get(cl, "10.9.9.9", 7000), -1);
	/* one primary more than the table holds: refused, map unchanged */
	n = (size_t)snprintf(resp, cap, "*%d\r\n", CLUSTER_NODES_MAX + 1);
	for (i = 0; i < CLUSTER_NODES_MAX + 1; i++) {
		(void)snprintf(host, sizeof(host), "10.0.2.%d", i);
		n += range(resp + n, cap - n, i * 10, i * 10 + 9, host, 7000);
	}
	assert_int_equal(load(cl, resp, "h"), -1);
	assert_string_equal(cl->nodes[cluster_slot_node(cl, 15)].host,
	    "10.0.0.1");
	free(resp);
	cluster_free(cl);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc16),
		cmocka_unit_test(test_keyslot_plain),
		cmocka_unit_test(test_keyslot_hash_tags),
		cmocka_unit_test(test_redirect),
		cmocka_unit_test(test_redirect_malformed),
		cmocka_unit_test(test_map_load),
		cmocka_unit_test(test_map_load_invalid),
		cmocka_unit_test(test_node_table_cap),
	};

	return cmocka_run_group_tests_name("cluster", tests, NULL, NULL);
}
