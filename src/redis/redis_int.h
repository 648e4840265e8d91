/*
 * redis_int.h - inside the Redis client of redis.h: its state and the steps
 * its files share. Not for other modules: they use redis.h.
 *
 *   redis.c           the client and its API: commands framed and routed
 *                     (redis_dispatch), the start-up check
 *   redis_cmd.c       a command from the call to its callback: its queue,
 *                     its timer, the WAIT it shares, its replies
 *   redis_node.c      connections: set-up in one write, ready, failed,
 *                     retired; commands handed to hiredis
 *   redis_uv.c        hiredis's events on the libuv loop
 *   redis_sentinel.c  the primary the sentinels name (discovery)
 *   redis_cluster.c   routing to cluster nodes, the slot map
 */
#ifndef CHARGE_REDIS_INT_H
#define CHARGE_REDIS_INT_H

#include <stddef.h>
#include <stdint.h>

#include <async.h>
#include <hiredis.h>
#include <uv.h>

#include "cluster.h"
#include "redis_url.h"

#define FAILOVER_PAUSE_MS 100 /* between attempts during a failover */
#define ERRSTR_MAX 128

struct lua_script;   /* redis.h */
struct redis_result; /* redis.h */
struct cmd;

struct cmdq {
	struct cmd *head, *tail;
};

enum cmd_kind {
	CMD_EVAL,     /* the caller's script */
	CMD_PING,     /* the caller's PING */
	CMD_SENTINEL, /* SENTINEL get-master-addr-by-name, for discovery */
	CMD_SLOTS,    /* CLUSTER SLOTS, for the map */
};

enum cmd_state {
	CMD_IDLE,    /* being routed */
	CMD_QUEUED,  /* in a queue: a node's, or waiting for a primary/map */
	CMD_SENT,    /* handed to hiredis on a ready connection */
	CMD_PAUSED,  /* timer: dispatched again at wake-up */
	CMD_FAILING, /* timer: finished at wake-up (never inside a call) */
	CMD_DONE,
};

enum node_state { NODE_IDLE, NODE_CONNECTING, NODE_READY };

struct wait_group;

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
	int setup_left;   /* set-up replies still to come */
	int setup_failed; /* a set-up reply was bad: drop when all are in */
	int evicting;
	struct cmdq wq; /* commands waiting until ready */
	struct redis_node *next_dead;
	char errstr[ERRSTR_MAX];
};

struct cmd {
	struct redis_client *c;
	enum cmd_kind kind;
	enum cmd_state st;
	struct cmd *prev, *next; /* in q */
	struct cmdq *q;
	struct cmd *all_prev, *all_next; /* c->all */
	uv_timer_t timer;
	uint64_t deadline; /* uv_now() ms */
	struct redis_node *node;
	redisAsyncContext *ac; /* sent on */
	int pending;           /* hiredis callbacks to come for this attempt */
	int lost;              /* a callback came with a NULL reply */
	int reused; /* sent on a connection ready before it came (not opened for it) */
	int peer_closed; /* this attempt's connection closed or reset by the peer */
	int resent;      /* re-sent once after such a loss */
	int timed_out;
	int wait;      /* followed by WAIT */
	int wait_sent; /* a WAIT covers this attempt (-1: its reply lost) */
	struct cmd *wg_next; /* in its wait group */
	long long acked;
	redisReply *reply; /* a copy, kept until the attempt is complete */
	int outcome_unknown;
	int durable;
	/* EVAL: the framed EVALSHA command; from rest on it is also EVAL's */
	struct lua_script *s;
	char *frame;
	size_t framelen, rest;
	int is_eval; /* NOSCRIPT came: now EVAL */
	unsigned slot;
	int redirects;
	int ask;   /* node index for ASKING, or -1 */
	int moved; /* node index to trust after MOVED, or -1 */
	int ping_idx;
	int sentinel_idx; /* CMD_SENTINEL: which sentinel */
	int slots_idx;    /* CMD_SLOTS: which node */
	void (*cb)(const struct redis_result *res, void *arg);
	void *arg;
	char errstr[ERRSTR_MAX];
};

/*
 * The commands sent with wait on one connection in one loop turn: one
 * WAIT after the last covers them all (WAIT counts the replicas that
 * acknowledged every write of the connection so far). A WAIT per command
 * would serialize: Redis blocks the connection for each WAIT that falls
 * short, replica_timeout_ms each.
 */
struct wait_group {
	struct wait_group *next; /* c->wgs: not yet sent */
	struct redis_node *n;
	unsigned gen;
	struct cmd *members;
};

struct redis_client {
	uv_loop_t *loop;
	uv_prepare_t *prep; /* sends the turn's WAITs before the loop polls */
	struct wait_group *wgs;
	struct redis_target t;
	int timeout_ms;
	int min_replicas;
	int wait_timeout_ms; /* replica_timeout_ms when WAIT is sent */
	char wait_n[16], wait_ms[16];
	int closing;
	int in_cb;             /* inside a caller's callback (depth) */
	uv_timer_t *free_soon; /* redis_client_free() asked from inside one */
	uint64_t noscript_log_at;
	const char *drop_reason; /* why a connection is being dropped */
	struct cmd *all;         /* every live command */
	struct redis_node *main; /* single Redis, or the primary */
	struct redis_node *dead; /* nodes given up, freed with the client */
	/* sentinel */
	struct redis_node *sentinels[REDIS_URL_HOSTS_MAX];
	int primary_ok; /* main is the primary the sentinels named */
	char primary[REDIS_HOST_MAX + 1];
	int primary_port;
	int primary_from; /* the sentinel that named it */
	int sentinel_first;
	int disc_active, disc_k, disc_asked, disc_verifying, disc_refresh;
	uint64_t disc_deadline;
	char suspect[REDIS_HOST_MAX + 1]; /* a primary to avoid this round */
	int suspect_port;
	int suspect_seen;
	uint64_t suspect_at; /* when the last refresh started */
	struct cmdq disc_q;
	char disc_err[ERRSTR_MAX];
	int disc_answered; /* disc_err is a sentinel's answer, not a silence */
	/* cluster */
	struct cluster *cl;
	int map_active, map_hint;
	unsigned char map_tried[CLUSTER_NODES_MAX];
	int map_seed; /* seeds asked so far */
	struct cmdq map_q;
	char map_err[ERRSTR_MAX];
};

/* redis.c: the client */

/* Routes x: to its node, or to wait for a primary or a map. */
void redis_dispatch(struct cmd *x);
/*
 * x's EVALSHA framed as EVAL (after NOSCRIPT), *len bytes; the caller
 * frees it. NULL on ENOMEM.
 */
char *redis_eval_frame(const struct cmd *x, size_t *len);

/* redis_cmd.c: a command's life */

/* Appends x to q (CMD_QUEUED). */
void redis_cmdq_push(struct cmdq *q, struct cmd *x);
/* Takes x out of its queue, if any (CMD_IDLE). */
void redis_cmdq_remove(struct cmd *x);
/* 1 when the error reply r starts with the word w. */
int redis_reply_is(const redisReply *r, const char *w);
/* A command of kind, its timer set at timeout_ms, in c->all. NULL on ENOMEM. */
struct cmd *redis_cmd_new(struct redis_client *c, enum cmd_kind kind,
    int timeout_ms);
/* Again through redis_dispatch() after delay_ms, if the deadline allows. */
void redis_cmd_pause(struct cmd *x, int delay_ms);
/* Ends on the next loop turn, with its reply or err (never inside a call). */
void redis_cmd_end_soon(struct cmd *x, const char *err);
/* Ends x: its callback once, then its memory (once its timer closed). */
void redis_cmd_finish(struct cmd *x);
/* hiredis's callback of a command sent (privdata: the struct cmd). */
void redis_cmd_on_reply(redisAsyncContext *ac, void *reply, void *privdata);
/* x (just sent on n) joins n's WAIT group of this turn. 0, or -1 on ENOMEM. */
int redis_cmd_wait_join(struct redis_node *n, struct cmd *x);
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
/* Sends x on n when ready, else queues it there (connecting if idle). */
void redis_node_submit(struct redis_node *n, struct cmd *x);
/* Drops n's connection and ends what waits on it ("shutting down"). */
void redis_node_close(struct redis_node *n);

/* redis_uv.c: the libuv adapter */

/* Watches ac's socket on loop. REDIS_OK or REDIS_ERR. */
int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop);

/* redis_sentinel.c: discovery */

/* READONLY, MASTERDOWN, LOADING, NOREPLICAS: ask again, resend. */
void redis_sentinel_eval_failover(struct cmd *x);
/* SENTINEL get-master-addr-by-name of x came back (or not). */
void redis_sentinel_answer(struct cmd *x);
/* Asks the sentinels for the primary, unless a round is under way. */
void redis_sentinel_start(struct redis_client *c);
/* The primary failed (err): no longer trusted; while verifying, the next
 * sentinel is asked. */
void redis_sentinel_primary_failed(struct redis_client *c, const char *err);
/* A WAIT shortfall or NOREPLICAS: the sentinels asked again (once a pause). */
void redis_sentinel_suspect(struct redis_client *c);

/* redis_cluster.c: routing */

/* MOVED, ASK, TRYAGAIN... 1 when x goes on, 0 to end with its error. */
int redis_cluster_eval_error(struct cmd *x);
/* struct cluster's node_drop while serving: n given up (freed with c). */
void redis_cluster_conn_drop(struct redis_node *n, void *arg);
/* struct cluster's node_drop at redis_client_free(): n closed and freed. */
void redis_cluster_conn_free(struct redis_node *n, void *arg);
/* CLUSTER SLOTS of x came back (or not). */
void redis_cluster_map_answer(struct cmd *x);
/* Routes x to the node of its slot (or each primary, for PING). */
void redis_cluster_dispatch(struct cmd *x);

#endif
