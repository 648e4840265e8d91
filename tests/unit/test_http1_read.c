/*
 * test_http1_read.c - the provider client's answer reader (http1_read.c):
 * status, headers and body of an answer fed whole and byte by byte, a 1xx
 * before the answer, bytes after it, the end of the connection ending an
 * answer without a length, and status lines HTTP has no status for.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "http1_read.h"

struct got {
	char body[256];
	size_t blen;
	int headers;
};

static void
on_header(void *arg, const char *name, size_t nlen, const char *value,
    size_t vlen)
{
	struct got *g = arg;

	(void)name;
	(void)nlen;
	(void)value;
	(void)vlen;
	g->headers++;
}

static int
on_body(void *arg, const char *p, size_t len)
{
	struct got *g = arg;

	assert_true(g->blen + len <= sizeof(g->body));
	memcpy(g->body + g->blen, p, len);
	g->blen += len;
	return 0;
}

/* Reads s in pieces of piece bytes (0: at once); the last h1_read's value. */
static llhttp_errno_t
feed(struct h1_reader *rd, struct got *g, const char *s, size_t piece)
{
	size_t n = strlen(s), off = 0, k;
	llhttp_errno_t e = HPE_OK;

	memset(g, 0, sizeof(*g));
	h1_read_start(rd, on_header, on_body, g);
	while (off < n && e == HPE_OK && !rd->complete) {
		k = piece == 0 || piece > n - off ? n - off : piece;
		e = h1_read(rd, s + off, k);
		off += k;
	}
	return e;
}

static void
test_answer(void **state)
{
	static const char *const s = "HTTP/1.1 100 Continue\r\n\r\n"
	                             "HTTP/1.1 201 Created\r\n"
	                             "Content-Length: 5\r\nX-A: b\r\n\r\nhello";
	struct h1_reader rd;
	struct got g;
	size_t piece;

	(void)state;
	for (piece = 0; piece <= 1; piece++) {
		assert_int_equal(feed(&rd, &g, s, piece), HPE_OK);
		assert_true(rd.complete);
		assert_int_equal(rd.status, 201);
		assert_true(rd.keep);
		assert_int_equal(g.headers, 2);
		assert_int_equal(g.blen, 5);
		assert_memory_equal(g.body, "hello", 5);
	}
	/* bytes after the answer: an error, the connection not kept */
	assert_int_not_equal(
	    feed(&rd, &g, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nX", 0),
	    HPE_OK);
	assert_true(rd.complete);
	/* no length: the connection's end ends it */
	assert_int_equal(feed(&rd, &g, "HTTP/1.0 200 OK\r\n\r\nab", 0), HPE_OK);
	assert_false(rd.complete);
	assert_int_equal(h1_read_eof(&rd), 1);
	assert_true(rd.complete);
	assert_int_equal(g.blen, 2);
}

/* Found by tests/fuzz (fuzz_http1.c): llhttp reads "HTTP/1.1 0" as 0. */
static void
test_status_below_100(void **state)
{
	static const char *const bad[] = {
		"HTTP/1.1 0\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 42 X\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 099 X\r\nContent-Length: 0\r\n\r\n",
	};
	struct h1_reader rd;
	struct got g;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(feed(&rd, &g, bad[i], 0),
		    HPE_CB_HEADERS_COMPLETE);
		assert_false(rd.complete);
		assert_int_equal(h1_read_eof(&rd), 0);
	}
	assert_int_equal(feed(&rd, &g,
	                     "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 999 X\r\n"
	                     "Content-Length: 0\r\n\r\n",
	                     0),
	    HPE_OK);
	assert_true(rd.complete);
	assert_int_equal(rd.status, 999);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answer),
		cmocka_unit_test(test_status_below_100),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
