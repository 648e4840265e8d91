/*
 * conn.h - one FastCGI connection from the web server: bytes in through the
 * codec, requests out to the use cases, responses back as records. Runs on
 * one event loop; a connection never blocks it and holds no thread. One
 * request at a time per connection; with FCGI_KEEP_CONN the next one
 * follows on the same connection.
 */
#ifndef CHARGE_CONN_H
#define CHARGE_CONN_H

#include <sys/queue.h>

#include <uv.h>

#include "conn_frame.h"
#include "conn_sock.h"
#include "conn_admit.h"
#include "worker.h"

struct conn;

/* What connections share with their loop. */
struct conn_host {
	struct worker *w;
	struct conn_bounds bounds; /* the process's, shared by its loops */
	TAILQ_HEAD(conn_list, conn) conns; /* the loop's open connections */
	unsigned nconns;
	unsigned nexchanges; /* requests not yet finished, detached ones too */
	int stopping;        /* closing connections as they go idle */
	int listen_unix;     /* the listener is AF_UNIX (TCP lingers) */
	/* a connection closed or a request ended (the loop may be done) */
	void (*on_idle)(struct conn_host *h);
	struct sock_set socks;   /* the connections' descriptors */
	struct conn_frame frame; /* the answer being framed, the loop's */
};

/* Prepares h's epoll set on loop. 0, or -1 (errno). */
int conn_host_init(struct conn_host *h, uv_loop_t *loop);

/* After the last connection closed: the set's handle closes on the loop. */
void conn_host_close(struct conn_host *h);

/*
 * Serves the accepted, non-blocking descriptor fd on h's loop. 0, or -1
 * (fd closed, ENOMEM).
 */
int conn_open(struct conn_host *h, int fd);

/*
 * A stop: connections without a request close now; the others close once
 * their request is answered.
 */
void conn_stop_idle(struct conn_host *h);

/*
 * The drain time is over: every request still waiting (served, or its
 * params or body still arriving) gets 503 with Retry-After, and every
 * connection closes. The use cases still running go on to record their
 * outcome; nothing more is sent.
 */
void conn_expire_all(struct conn_host *h);

#endif
