/*
 * bench_body.h - the request-body reader that bench/baseline.c and
 * bench/floor.c share: both must do exactly the same transport work, so
 * that the ratios to them measure only what the responder adds.
 */
#ifndef BENCH_BODY_H
#define BENCH_BODY_H

#include <errno.h>
#include <stdlib.h>

#include <fcgiapp.h>

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

#endif
