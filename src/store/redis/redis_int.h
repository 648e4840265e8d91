/*
 * redis_int.h - inside the Redis client of redis.h: its state and the steps
 * its files share. Not for other modules: they use redis.h.
 *
 * The files, bottom up; each calls only the ones below it by name:
 *
 *   redis_uv.c        hiredis's events on the libuv loop
 *   redis_cmd.c       a command from the call to its callback: its
 *   redis_node.c      framing, queue, timer, WAIT and replies; a
 *                     connection: set-up in one write, ready, failed,
 *                     retired. A command and its connection call each
 *                     other (as hiredis keeps them in one file): the one
 *                     circle of the client.
 *   redis_sentinel.c  topologies: where a command goes (struct
 *   redis_cluster.c   redis_topology). The two layers above call up only
 *                     through c->topo, never by name.
 *   redis_client.c    the API of redis.h: picks the topology, the single Redis's
 *                     own, the start-up check
 */
#ifndef CHARGE_REDIS_INT_H
#define CHARGE_REDIS_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include <async.h>
#include <hiredis.h>
#include <openssl/ssl.h>
#include <uv.h>

#include "redis_url.h"

#define FAILOVER_PAUSE_MS 100 /* between attempts during a failover */
#define ERRSTR_MAX 128

struct lua_script;   /* redis.h */
struct redis_result; /* redis.h */
struct redis_client;
struct redis_node;
struct cmd;

TAILQ_HEAD(cmdq, cmd);

enum cmd_kind {
	CMD_EVAL,     /* the caller's script */
	CMD_PING,     /* the caller's PING */
	CMD_SENTINEL, /* SENTINEL get-master-addr-by-name, for discovery */
	CMD_SLOTS,    /* CLUSTER SLOTS, for the map */
};

/*
 * A command's life (cmd_set_state in redis_cmd.c asserts each change; the
 * other files change it through redis_cmd_* only):
 *
 *   IDLE -> QUEUED -> IDLE          waits in a queue, taken out
 *   IDLE -> SENT -> IDLE            an attempt, all its replies in
 *   IDLE -> PAUSED -> IDLE | DONE   a pause, then routed again (or its deadline)
 *   IDLE -> FAILING -> DONE         ends on the next loop turn
 *   IDLE | PAUSED | FAILING -> DONE
 */
enum cmd_state {
	CMD_IDLE,    /* being routed */
	CMD_QUEUED,  /* in a queue: a node's, or waiting for a primary/map */
	CMD_SENT,    /* handed to hiredis on a ready connection */
	CMD_PAUSED,  /* timer: dispatched again at wake-up */
	CMD_FAILING, /* timer: finished at wake-up (never inside a call) */
	CMD_DONE,
	CMD_NSTATES
};

/* IDLE -> CONNECTING -> READY; any -> IDLE (node_set_state, redis_node.c) */
enum node_state { NODE_IDLE, NODE_CONNECTING, NODE_READY, NODE_NSTATES };

struct redis_node {
	struct redis_client *c;
	redisAsyncContext *ac; /* NULL when not connected */
	unsigned gen;          /* counts connections: a wait group's one */
	struct wait_group *wg; /* commands sent this turn, WAIT to follow */
	enum node_state st;
	int is_unix;
	char host[REDIS_HOST_MAX + 1];
	int port;
	int sentinel;     /* a sentinel: no set-up */
	int want_primary; /* ROLE must say master */
	struct {
		int left;   /* set-up replies still to come */
		int failed; /* a set-up reply was bad: drop when all are in */
	} setup;
	int evicting;
	struct cmdq wq;                    /* commands waiting until ready */
	SLIST_ENTRY(redis_node) dead_link; /* a topology's nodes given up */
	char errstr[ERRSTR_MAX];
};

struct cmd {
	struct redis_client *c;
	enum cmd_kind kind;
	enum cmd_state st;
	struct cmdq *q;             /* the queue it waits in, or NULL */
	TAILQ_ENTRY(cmd) q_link;    /* in *q */
	LIST_ENTRY(cmd) all_link;   /* in c->all */
	SLIST_ENTRY(cmd) wait_link; /* in its wait group */
	uv_timer_t timer;
	uint64_t deadline; /* uv_now() ms */
	void (*cb)(const struct redis_result *res, void *arg);
	void *arg;
	struct {
		unsigned wait : 1;      /* followed by WAIT */
		unsigned resent : 1;    /* re-sent once after the peer closed */
		unsigned timed_out : 1; /* its deadline came */
	} flags;
	/* the attempt under way: where it went and what came back */
	struct {
		struct redis_node *node;
		redisAsyncContext *ac; /* sent on */
		/* hiredis callbacks to come for this attempt */
		int pending;
		/* a WAIT covers this attempt (-1: its reply lost) */
		int wait_sent;
		long long acked;     /* WAIT's answer */
		unsigned lost : 1;   /* a callback came with a NULL reply */
		unsigned reused : 1; /* its connection was ready before */
		unsigned peer_closed : 1; /* the peer closed or reset it */
	} attempt;
	/* what the callback will be told */
	struct {
		/* a copy, kept until the attempt is complete */
		redisReply *reply;
		unsigned outcome_unknown : 1;
		unsigned durable : 1;
		char errstr[ERRSTR_MAX];
	} out;
	/* CMD_EVAL: the framed EVALSHA; from rest on it is also EVAL's */
	struct {
		struct lua_script *s;
		char *frame;
		size_t framelen, rest;
		unsigned full : 1; /* NOSCRIPT came: sent as EVAL */
	} eval;
	/* the topology's bookkeeping */
	struct {
		unsigned slot; /* the key's hash slot (cluster) */
		int redirects; /* MOVED and ASK followed */
		int ask;       /* node index for ASKING, or -1 */
		int moved;     /* node index to trust after MOVED, or -1 */
		/* PING: the next primary; SENTINEL: the sentinel asked;
		 * SLOTS: the node asked */
		int idx;
	} route;
};

/*
 * The commands sent with wait on one connection in one loop turn: one
 * WAIT after the last covers them all (WAIT counts the replicas that
 * acknowledged every write of the connection so far). A WAIT per command
 * would serialize: Redis blocks the connection for each WAIT that falls
 * short, replica_timeout_ms each.
 */
struct wait_group {
	STAILQ_ENTRY(wait_group) link; /* c->wgs: not yet sent */
	struct redis_node *n;
	unsigned gen;
	SLIST_HEAD(, cmd) members;
};

/*
 * A topology: where a command goes (the single Redis, the primary the
 * sentinels name, the node of a key's slot), chosen at redis_client_new().
 * The command and connection layer calls up only through it. Hooks that
 * have nothing to do may be NULL.
 */
struct redis_topology {
	/* Its state for c (c->topo) and c->main if it has one. 0, or -1. */
	int (*init)(struct redis_client *c);
	/* At redis_client_free(), every command ended: its nodes and state. */
	void (*free)(struct redis_client *c);
	/* Routes cmd (CMD_IDLE, within its deadline): to a node, or to wait. */
	void (*dispatch)(struct cmd *cmd);
	/* A caller's command got an error reply: 1 when it goes on. */
	int (*error)(struct cmd *cmd);
	/* A caller's command got a good reply: 1 when it goes on. */
	int (*more)(struct cmd *cmd);
	/* cmd's WAIT fell short on its connection. */
	void (*wait_short)(struct cmd *cmd);
	/* A command of its own (SENTINEL, CLUSTER SLOTS) ended. */
	void (*answer)(struct cmd *cmd);
	/* A caller's command queued on a failed node, never sent: goes on. */
	void (*requeue)(struct cmd *cmd);
	/* n is ready for commands. */
	void (*node_ready)(struct redis_node *n);
	/* hiredis is freeing n's connection after an error. */
	void (*node_lost)(struct redis_node *n);
	/* n's connection failed with err: 1 when it took n's queue over. */
	int (*node_failed)(struct redis_node *n, const char *err);
};

extern const struct redis_topology redis_topology_sentinel;
extern const struct redis_topology redis_topology_cluster;

struct redis_client {
	uv_loop_t *loop;
	const struct redis_topology *topo;
	void *topo_state;   /* the topology's own struct */
	uv_prepare_t *prep; /* sends the turn's WAITs before the loop polls */
	STAILQ_HEAD(wgq, wait_group) wgs;
	struct redis_target t;
	int timeout_ms;
	int min_replicas;
	int wait_timeout_ms; /* replica_timeout_ms when WAIT is sent */
	char wait_n[16], wait_ms[16];
	int closing;
	int in_cb;             /* inside a caller's callback (depth) */
	int freeing;           /* redis_client_free() under way */
	uv_timer_t *free_soon; /* redis_client_free() asked from inside one */
	uint64_t noscript_log_at;
	uint64_t tls_log_at;     /* the next TLS failure logged from then on */
	const char *drop_reason; /* why a connection is being dropped */
	LIST_HEAD(, cmd) all;    /* every live command */
	struct redis_node *main; /* single Redis, or the primary; or NULL */
	SSL_CTX *tls;            /* rediss schemes: every node's, else NULL */
};

/* redis_cmd.c: a command's life */

/* cmd (CMD_IDLE) was handed to hiredis on a ready connection (CMD_SENT). */
void redis_cmd_sent(struct cmd *cmd);
/* Appends cmd to q (CMD_QUEUED). */
void redis_cmdq_push(struct cmdq *q, struct cmd *cmd);
/* Takes cmd out of its queue, if any (CMD_IDLE). */
void redis_cmdq_remove(struct cmd *cmd);
/* 1 when the error reply r starts with the word w. */
int redis_reply_is(const redisReply *r, const char *w);
/* A command of kind, its timer set at timeout_ms, in c->all. NULL on ENOMEM. */
struct cmd *redis_cmd_new(struct redis_client *c, enum cmd_kind kind,
    int timeout_ms);
/*
 * Frames cmd as EVALSHA of s with one key and argc arguments. 0, or -1 on
 * ENOMEM.
 */
int redis_cmd_frame(struct cmd *cmd, struct lua_script *s, const char *key,
    size_t keylen, int argc, const char **argv, const size_t *argvlen);
/* cmd's EVALSHA as EVAL (after NOSCRIPT), *len bytes; freed by the caller. */
char *redis_cmd_eval_frame(const struct cmd *cmd, size_t *len);
/* Routes cmd (CMD_IDLE) through the topology, or ends it (closing, late). */
void redis_cmd_dispatch(struct cmd *cmd);
/* Again through redis_cmd_dispatch() after delay_ms, if the deadline allows. */
void redis_cmd_pause(struct cmd *cmd, int delay_ms);
/* Ends on the next loop turn, with its reply or err (never inside a call). */
void redis_cmd_end_soon(struct cmd *cmd, const char *err);
/* A command never dispatched goes, without its callback. */
void redis_cmd_discard(struct cmd *cmd);
/* Ends cmd: its callback once, then its memory (once its timer closed). */
void redis_cmd_finish(struct cmd *cmd);
/* hiredis's callback of a command sent (privdata: the struct cmd). */
void redis_cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata);
/* cmd (just sent on n) joins n's WAIT group of this turn. 0, or -1 on ENOMEM. */
int redis_cmd_wait_join(struct redis_node *n, struct cmd *cmd);
/* WAIT's answer (r), or its loss (NULL), to every member. Frees wg. */
void redis_cmd_wait_resolve(struct wait_group *wg, const redisReply *r);

/* redis_node.c: connections */

/* A connection is dropped: hiredis calls its pending callbacks (NULL). */
void redis_ac_drop(struct redis_client *c, redisAsyncContext *ac,
    const char *why);
/* A NULL reply: hiredis is freeing ac; its node must not use it. */
void redis_ac_lost(struct redis_client *c, redisAsyncContext *ac);
/* n forgets its connection (NODE_IDLE). */
void redis_node_detach(struct redis_node *n);
/* A node, not connected. NULL on ENOMEM. */
struct redis_node *redis_node_new(struct redis_client *c, const char *host,
    int port, int is_unix);
void redis_node_set_addr(struct redis_node *n, const char *host, int port);
/* Stops sending on n's connection; replies of commands sent still come. */
void redis_node_retire(struct redis_node *n);
/* n's connection failed: commands sent end unknown, queued ones go on. */
void redis_node_fail(struct redis_node *n, const char *err);
/* Opens n's connection and queues its set-up. 0, or -1 with n->errstr. */
int redis_node_connect(struct redis_node *n);
/* Sends cmd on n when ready, else queues it there (connecting if idle). */
void redis_node_submit(struct redis_node *n, struct cmd *cmd);
/* Drops n's connection and ends what waits on it ("shutting down"). */
void redis_node_close(struct redis_node *n);
/* 1 when a live command of c still names n (its attempt's node). */
int redis_node_in_use(const struct redis_node *n);

/* redis_uv.c: the libuv adapter */

/*
 * Watches ac's socket on loop; with tls, its bytes go through TLS (name:
 * the server name sent and, with verify, checked; a failure logged when
 * uv_now() reached *log_at, which then moves a second on, the loop's
 * connections sharing it). REDIS_OK or REDIS_ERR.
 */
int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop, SSL_CTX *tls,
    const char *name, int verify, uint64_t *log_at);
/* 1 when ac's TCP connect is done and its TLS handshake is not. */
int redis_uv_in_handshake(const redisAsyncContext *ac);

#endif
