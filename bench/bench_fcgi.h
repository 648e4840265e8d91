/*
 * bench_fcgi.h - what bench/baseline.c and bench/floor.c share: the
 * request-body reader and the threaded accept loop. Both must do exactly
 * the same transport work, and run with the same processes x threads as
 * the responder, so that the ratios to them measure only what the
 * responder adds.
 *
 * Threading is the responder's: N worker threads per process, each with
 * its own state (for the floor: its own Redis connection, opened before the
 * first accept), all calling FCGX_Accept_r on the one listening socket
 * (fd 0 from lighttpd bin-path, or --listen ADDR). The main thread only
 * waits for SIGTERM, SIGINT, SIGHUP or SIGUSR1 and then exits at once: a
 * comparison responder has nothing to finish.
 */
#ifndef BENCH_FCGI_H
#define BENCH_FCGI_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcgiapp.h>

#define BENCH_BODY_MAX (1024 * 1024) /* bytes, like max_request_bytes */
#define BENCH_BACKLOG 128
#define BENCH_THREADS_MAX 64 /* like the responder's threads */

/* Reads the whole body into buf[cap]. Returns its length or -1. */
static long
bench_read_body(FCGX_Request *req, char *buf, size_t cap)
{
	const char *cl;
	char *end;
	unsigned long want;
	long got = 0;
	int n;

	cl = FCGX_GetParam("CONTENT_LENGTH", req->envp);
	if (cl == NULL || *cl == '\0')
		return 0;
	errno = 0;
	want = strtoul(cl, &end, 10);
	if (errno != 0 || *end != '\0' || want > cap)
		return -1;
	while ((unsigned long)got < want) {
		n = FCGX_GetStr(buf + got, (int)(want - (unsigned long)got),
		    req->in);
		if (n <= 0)
			return -1;
		got += n;
	}
	return got;
}

/*
 * Worker threads from the environment variable var: 1..BENCH_THREADS_MAX,
 * 1 when unset. -1 (message on stderr) when invalid.
 */
static int
bench_threads(const char *prog, const char *var)
{
	const char *s = getenv(var);
	char *end;
	long v;

	if (s == NULL || *s == '\0')
		return 1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < 1 || v > BENCH_THREADS_MAX) {
		fprintf(stderr, "%s: %s must be 1..%d\n", prog, var,
		    BENCH_THREADS_MAX);
		return -1;
	}
	return (int)v;
}

/*
 * FCGX_Init and the listening socket: fd 0, or ADDR of "--listen ADDR".
 * Returns the socket, -1 on failure or -2 on bad usage (message on stderr).
 */
static int
bench_listen(const char *prog, int argc, char *argv[])
{
	int sock = 0;

	if (FCGX_Init() != 0) {
		fprintf(stderr, "%s: FCGX_Init failed\n", prog);
		return -1;
	}
	if (argc == 3 && strcmp(argv[1], "--listen") == 0) {
		sock = FCGX_OpenSocket(argv[2], BENCH_BACKLOG);
		if (sock < 0) {
			fprintf(stderr, "%s: cannot listen on %s\n", prog,
			    argv[2]);
			return -1;
		}
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--listen ADDR]\n", prog);
		return -2;
	}
	return sock;
}

/* Answers one accepted request; body is the thread's buffer (BENCH_BODY_MAX). */
typedef void bench_handler(FCGX_Request *req, void *state, char *body);

struct bench_worker {
	pthread_t tid;
	const char *prog;
	int sock;
	bench_handler *handle;
	void *state;
	int *alive; /* atomic: workers still accepting */
};

static void *
bench_worker_main(void *arg)
{
	struct bench_worker *w = arg;
	FCGX_Request req;
	char *body;

	body = malloc(BENCH_BODY_MAX);
	if (body == NULL)
		fprintf(stderr, "%s: out of memory\n", w->prog);
	else if (FCGX_InitRequest(&req, w->sock, 0) != 0)
		fprintf(stderr, "%s: FCGX_InitRequest failed\n", w->prog);
	else {
		while (FCGX_Accept_r(&req) >= 0) {
			w->handle(&req, w->state, body);
			FCGX_Finish_r(&req);
		}
		fprintf(stderr, "%s: accept failed; this thread stops\n",
		    w->prog);
	}
	free(body);
	/* the last worker wakes the main thread, which ends the process */
	if (__atomic_sub_fetch(w->alive, 1, __ATOMIC_SEQ_CST) == 0)
		kill(getpid(), SIGTERM);
	return NULL;
}

/*
 * Serves on sock with n threads; thread i gets the state at
 * (char *)states + i * stride. Returns only on failure (1); a stop signal
 * exits the process with 0, the end of every worker with 1.
 */
static int
bench_serve(const char *prog, int sock, int n, bench_handler *handle,
    void *states, size_t stride)
{
	struct bench_worker *ws;
	sigset_t stop;
	int i, sig = 0, alive = n;

	/* blocked here, so in every thread: only sigwait below takes them */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	sigaddset(&stop, SIGUSR1);
	if (pthread_sigmask(SIG_BLOCK, &stop, NULL) != 0) {
		fprintf(stderr, "%s: pthread_sigmask failed\n", prog);
		return 1;
	}
	if ((ws = calloc((size_t)n, sizeof(*ws))) == NULL) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return 1;
	}
	for (i = 0; i < n; i++) {
		ws[i].prog = prog;
		ws[i].sock = sock;
		ws[i].handle = handle;
		ws[i].state = (char *)states + (size_t)i * stride;
		ws[i].alive = &alive;
		if (pthread_create(&ws[i].tid, NULL, bench_worker_main,
		        &ws[i]) != 0) {
			fprintf(stderr, "%s: pthread_create failed\n", prog);
			return 1;
		}
	}
	if (sigwait(&stop, &sig) != 0)
		return 1;
	exit(__atomic_load_n(&alive, __ATOMIC_SEQ_CST) > 0 ? 0 : 1);
}

#endif
