/*
 * baseline.c - the transport's ceiling for bench/run: a minimal libfcgi
 * responder that reads the request body and answers 201 with a small JSON
 * object of the size of a charge, with the same response headers as the
 * real responder. No Redis, no parsing.
 *
 * Environment: BASELINE_THREADS (worker threads accepting on the one
 * socket, 1..64, default 1: the responder's `threads`).
 * Runs on the listening socket that the web server hands over on fd 0
 * (lighttpd bin-path), or on its own socket: baseline --listen ADDR.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fcgiapp.h>

#include "bench_fcgi.h"

static const char reply_created[] =
    "Status: 201 Created\r\n"
    "Content-Type: application/json\r\n"
    "Cache-Control: no-store\r\n"
    "X-Request-Id: 00000000000000000000000000000000\r\n"
    "Idempotent-Replayed: false\r\n"
    "\r\n"
    "{\"id\":\"ch_000000000000000000000000\",\"object\":\"charge\","
    "\"status\":\"succeeded\",\"amount\":1999,\"currency\":\"usd\","
    "\"source\":\"tok_visa\",\"customer\":null,\"description\":null,"
    "\"metadata\":{},\"line_items\":[],\"created\":1763740800,"
    "\"idempotency_key\":\"baseline\"}";

static const char reply_too_large[] = "Status: 413 Content Too Large\r\n"
                                      "Content-Type: text/plain\r\n"
                                      "\r\n"
                                      "too large\n";

static void
baseline_handle(FCGX_Request *req, void *state, char *body)
{
	(void)state;
	if (bench_read_body(req, body, BENCH_BODY_MAX) < 0) {
		if (FCGX_PutStr(reply_too_large,
		        (int)sizeof(reply_too_large) - 1, req->out) < 0)
			fprintf(stderr, "baseline: write failed\n");
	} else if (FCGX_PutStr(reply_created, (int)sizeof(reply_created) - 1,
	               req->out) < 0)
		fprintf(stderr, "baseline: write failed\n");
}

int
main(int argc, char *argv[])
{
	static char no_state[BENCH_THREADS_MAX];
	int sock, threads;

	if ((threads = bench_threads("baseline", "BASELINE_THREADS")) < 0)
		return 1;
	if ((sock = bench_listen("baseline", argc, argv)) < 0)
		return sock == -2 ? 2 : 1;
	return bench_serve("baseline", sock, threads, baseline_handle, no_state,
	    1);
}
