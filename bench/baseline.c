/*
 * baseline.c - the transport's ceiling for bench/run: a minimal libfcgi
 * responder that reads the request body and answers 201 with a small JSON
 * object of the size of a charge, with the same response headers as the
 * real responder. No Redis, no parsing.
 *
 * Runs on the listening socket that the web server hands over on fd 0
 * (lighttpd bin-path), or on its own socket: baseline --listen ADDR.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcgiapp.h>

#include "bench_body.h"

#define BASELINE_BODY_MAX	(1024 * 1024)	/* bytes, like max_request_bytes */
#define BASELINE_BACKLOG	128

static char body_buf[BASELINE_BODY_MAX];

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

static const char reply_too_large[] =
    "Status: 413 Content Too Large\r\n"
    "Content-Type: text/plain\r\n"
    "\r\n"
    "too large\n";

int
main(int argc, char *argv[])
{
	FCGX_Request req;
	int sock = 0;

	if (FCGX_Init() != 0) {
		fprintf(stderr, "baseline: FCGX_Init failed\n");
		return 1;
	}
	if (argc == 3 && strcmp(argv[1], "--listen") == 0) {
		sock = FCGX_OpenSocket(argv[2], BASELINE_BACKLOG);
		if (sock < 0) {
			fprintf(stderr, "baseline: cannot listen on %s\n", argv[2]);
			return 1;
		}
	} else if (argc != 1) {
		fprintf(stderr, "usage: baseline [--listen ADDR]\n");
		return 2;
	}
	if (FCGX_InitRequest(&req, sock, 0) != 0) {
		fprintf(stderr, "baseline: FCGX_InitRequest failed\n");
		return 1;
	}
	while (FCGX_Accept_r(&req) >= 0) {
		if (bench_read_body(&req, body_buf, sizeof(body_buf)) < 0) {
			if (FCGX_PutStr(reply_too_large,
			    (int)sizeof(reply_too_large) - 1, req.out) < 0)
				fprintf(stderr, "baseline: write failed\n");
		} else if (FCGX_PutStr(reply_created,
		    (int)sizeof(reply_created) - 1, req.out) < 0)
			fprintf(stderr, "baseline: write failed\n");
		FCGX_Finish_r(&req);
	}
	return 0;
}
