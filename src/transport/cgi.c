/*
 * cgi.c - the CGI transport: the request from the environment and stdin
 * (blocking reads bounded by the request's deadline), the use case on a
 * loop of its own, the response to stdout. After request_read() the
 * exchange is the one a FastCGI connection makes: every line after it is
 * shared.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include "app.h"
#include "cgi.h"
#include "clock.h"
#include "exchange.h"
#include "log.h"
#include "metrics.h"
#include "util.h"
#include "worker.h"

/* ctx: the request's deadline (monotonic microseconds). */
static long
cgi_read(void *ctx, char *buf, size_t n)
{
	const long long *deadline_us = ctx;
	struct pollfd pfd = { STDIN_FILENO, POLLIN, 0 };
	long long left_ms;
	ssize_t r;
	int p;

	do {
		left_ms = (*deadline_us - now_mono_us() + 999) / 1000;
		if (left_ms <= 0)
			return READ_TIMED_OUT;
		p = poll(&pfd, 1,
		    left_ms > INT32_MAX ? INT32_MAX : (int)left_ms);
	} while (p < 0 && errno == EINTR);
	if (p == 0)
		return READ_TIMED_OUT;
	do
		r = read(STDIN_FILENO, buf, n);
	while (r < 0 && errno == EINTR);
	return (long)r;
}

static int
cgi_write(void *ctx, const char *p, size_t n)
{
	(void)ctx;
	return util_write_all(STDOUT_FILENO, p, n);
}

static void
on_cgi_done(struct exchange *x)
{
	*(int *)x->transport = 1;
}

/* Writes x's response to stdout and logs the request. */
static void
cgi_answer(struct exchange *x)
{
	struct response_sink sink = { cgi_write, NULL };
	long long dur;

	if (response_send(&x->resp, x->req.request_id, &sink,
	        x->req.method != NULL && strcmp(x->req.method, "HEAD") == 0) !=
	    0)
		log_warn(x->req.request_id,
		    "client went away before the response was written");
	dur = now_mono_us() - x->req.start_us;
	metrics_request(x->resp.outcome, dur);
	log_info(x->req.request_id, "%s %s %d %s %.1fms",
	    x->req.method != NULL ? x->req.method : "-", x->req.path,
	    x->resp.status, x->resp.outcome != NULL ? x->resp.outcome : "-",
	    (double)dur / 1000.0);
}

int
cgi_serve(const struct config *cfg, const struct auth_table *auth, char **envp)
{
	struct request_source src = { envp, cgi_read, NULL, 0 };
	struct exchange x;
	struct worker w;
	uv_loop_t loop;
	int done = 0, rc = 1;

	memset(&x, 0, sizeof(x));
	response_init(&x.resp);
	src.ctx = &src.deadline_us;
	src.deadline_us = now_mono_us() + 1000LL * cfg->request_timeout_ms;
	if (uv_loop_init(&loop) != 0)
		return 1;
	if (worker_init(&w, cfg, auth, &loop, 0) != 0)
		goto out;
	x.w = &w;
	x.done = on_cgi_done;
	x.transport = &done;
	if (request_read(&x.req, &src, (size_t)cfg->max_request_bytes, 1) !=
	    0) {
		response_problem(&x.resp, PROB_INTERNAL, NULL, NULL);
		done = 1;
	} else
		app_handle(&x);
	while (!done && uv_run(&loop, UV_RUN_ONCE) != 0)
		;
	if (!done) {
		response_problem(&x.resp, PROB_INTERNAL, NULL, NULL);
		log_error(x.req.request_id, "the request never finished");
	}
	cgi_answer(&x);
	worker_close(&w);
	rc = 0;
out:
	(void)uv_run(&loop, UV_RUN_DEFAULT); /* close callbacks */
	(void)uv_loop_close(&loop);
	response_free(&x.resp);
	request_free(&x.req);
	return rc;
}
