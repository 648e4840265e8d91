/*
 * test_fcgi_codec.c - the FastCGI codec: the reader's events for whole and
 * split streams, every error it names, the records it ignores, and the
 * writer's records byte by byte and read back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fcgi_codec.h"

/* A growing byte buffer: the streams built and the logs of events. */
struct bytes {
	char *p;
	size_t n, cap;
};

static void
put(struct bytes *b, const void *p, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	if (n > 0)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void
puts_(struct bytes *b, const char *s)
{
	put(b, s, strlen(s));
}

static void
putf(struct bytes *b, const char *fmt, ...)
{
	char t[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(t, sizeof(t), fmt, ap);
	va_end(ap);
	puts_(b, t);
}

static void
bytes_free(struct bytes *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* One record: header, content, pad bytes of padding. */
static void
rec(struct bytes *b, int type, unsigned id, const void *content, size_t n,
    size_t pad)
{
	unsigned char h[8] = { 1, (unsigned char)type, (unsigned char)(id >> 8),
		(unsigned char)id, (unsigned char)(n >> 8), (unsigned char)n,
		(unsigned char)pad, 0 };
	char zero[255] = { 0 };

	put(b, h, sizeof(h));
	put(b, content, n);
	put(b, zero, pad);
}

static void
begin(struct bytes *b, unsigned id, int role, int flags)
{
	unsigned char body[8] = { (unsigned char)(role >> 8),
		(unsigned char)role, (unsigned char)flags, 0, 0, 0, 0, 0 };

	rec(b, FCGI_BEGIN_REQUEST, id, body, sizeof(body), 0);
}

static void
nv_len(struct bytes *b, size_t n, int force_long)
{
	unsigned char l[4] = { (unsigned char)((n >> 24) | 0x80),
		(unsigned char)(n >> 16), (unsigned char)(n >> 8),
		(unsigned char)n };

	if (n < 128 && !force_long) {
		l[0] = (unsigned char)n;
		put(b, l, 1);
	} else {
		put(b, l, 4);
	}
}

/* One name-value pair, with the lengths kept (NUL bytes allowed). */
static void
pair(struct bytes *b, const char *name, size_t nl, const char *value, size_t vl)
{
	nv_len(b, nl, 0);
	nv_len(b, vl, 0);
	put(b, name, nl);
	put(b, value, vl);
}

static void
spair(struct bytes *b, const char *name, const char *value)
{
	pair(b, name, strlen(name), value, strlen(value));
}

/* Bytes as text: printable ASCII but the separators kept, the rest \xHH. */
static void
esc(struct bytes *log, const char *p, size_t n)
{
	size_t i;
	unsigned char c;

	for (i = 0; i < n; i++) {
		c = (unsigned char)p[i];
		if (c >= 0x21 && c < 0x7f && c != '=' && c != ',' && c != ';' &&
		    c != '\\')
			put(log, &c, 1);
		else
			putf(log, "\\x%02x", c);
	}
}

static void
log_params(struct bytes *log, const struct fcgi_event *ev)
{
	size_t i;

	for (i = 0; i < ev->nparams; i++) {
		esc(log, ev->params[i].name, ev->params[i].namelen);
		puts_(log, "=");
		esc(log, ev->params[i].value, ev->params[i].valuelen);
		puts_(log, ",");
	}
}

/* One event as text into log; the body's bytes into body. 1 on ERROR. */
static int
log_event(struct fcgi_reader *r, const struct fcgi_event *ev, struct bytes *log,
    struct bytes *body)
{
	switch (ev->type) {
	case FCGI_EV_NONE: break;
	case FCGI_EV_BEGIN:
		putf(log, "B%u/%d/%d;", ev->request_id, ev->role,
		    ev->keep_conn);
		break;
	case FCGI_EV_PARAMS:
		putf(log, "P%u:", ev->request_id);
		log_params(log, ev);
		puts_(log, ";");
		break;
	case FCGI_EV_STDIN:
		assert_true(ev->len > 0);
		putf(log, "I%zu;", ev->len);
		put(body, ev->data, ev->len);
		break;
	case FCGI_EV_STDIN_END: puts_(log, "E;"); break;
	case FCGI_EV_ABORT: putf(log, "A%u;", ev->request_id); break;
	case FCGI_EV_GET_VALUES:
		puts_(log, "G:");
		log_params(log, ev);
		puts_(log, ";");
		break;
	case FCGI_EV_UNKNOWN: putf(log, "U%u;", ev->unknown_type); break;
	case FCGI_EV_REFUSE_MPX: putf(log, "R%u;", ev->request_id); break;
	case FCGI_EV_ERROR: putf(log, "X:%s;", fcgi_reader_error(r)); return 1;
	}
	return 0;
}

/*
 * Feeds n bytes in pieces of at most chunk (and of the reader's room),
 * taking the events after each piece; request_done after each STDIN_END and
 * ABORT when done is set. The log of events; the body in *body if given.
 */
static char *
run(const char *p, size_t n, size_t chunk, int done, struct bytes *body)
{
	struct fcgi_reader *r = fcgi_reader_new();
	struct bytes log = { 0 }, b = { 0 };
	struct fcgi_event ev;
	size_t off = 0, k;

	assert_non_null(r);
	puts_(&log, "");
	for (;;) {
		do {
			fcgi_reader_next(r, &ev);
			if (log_event(r, &ev, &log, &b))
				goto out;
			if (done &&
			    (ev.type == FCGI_EV_STDIN_END ||
			        ev.type == FCGI_EV_ABORT))
				fcgi_reader_request_done(r);
		} while (ev.type != FCGI_EV_NONE);
		if (off == n)
			break;
		k = n - off < chunk ? n - off : chunk;
		if (k > fcgi_reader_room(r))
			k = fcgi_reader_room(r);
		/* never stalls: a NONE leaves room for what is missing */
		assert_true(k > 0);
		assert_int_equal(fcgi_reader_feed(r, p + off, k), 0);
		off += k;
	}
out:
	fcgi_reader_free(r);
	if (body != NULL)
		*body = b;
	else
		bytes_free(&b);
	return log.p;
}

static void
expect_log(const struct bytes *s, size_t chunk, int done, const char *want)
{
	char *got = run(s->p, s->n, chunk, done, NULL);

	assert_string_equal(got, want);
	free(got);
}

static void
test_full_request(void **state)
{
	struct bytes s = { 0 }, p = { 0 }, body = { 0 };
	char *got;

	(void)state;
	begin(&s, 1, FCGI_RESPONDER, FCGI_KEEP_CONN);
	spair(&p, "REQUEST_METHOD", "POST");
	spair(&p, "CONTENT_LENGTH", "11");
	spair(&p, "EMPTY", "");
	/* three PARAMS records, cut inside pairs */
	rec(&s, FCGI_PARAMS, 1, p.p, 5, 3);
	rec(&s, FCGI_PARAMS, 1, p.p + 5, 20, 0);
	rec(&s, FCGI_PARAMS, 1, p.p + 25, p.n - 25, 7);
	rec(&s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(&s, FCGI_STDIN, 1, "hello", 5, 3);
	rec(&s, FCGI_STDIN, 1, " world", 6, 0);
	rec(&s, FCGI_STDIN, 1, NULL, 0, 0);
	got = run(s.p, s.n, s.n, 0, &body);
	assert_string_equal(got,
	    "B1/1/1;P1:REQUEST_METHOD=POST,CONTENT_LENGTH=11,EMPTY=,;"
	    "I5;I6;E;");
	assert_int_equal(body.n, 11);
	assert_memory_equal(body.p, "hello world", 11);
	free(got);
	/* the same byte by byte and in pieces of 7 */
	expect_log(&s, 1, 0,
	    "B1/1/1;P1:REQUEST_METHOD=POST,CONTENT_LENGTH=11,EMPTY=,;"
	    "I5;I6;E;");
	expect_log(&s, 7, 0,
	    "B1/1/1;P1:REQUEST_METHOD=POST,CONTENT_LENGTH=11,EMPTY=,;"
	    "I5;I6;E;");
	bytes_free(&s);
	bytes_free(&p);
	bytes_free(&body);
}

static void
test_truncated_header(void **state)
{
	struct bytes s = { 0 };
	struct fcgi_reader *r = fcgi_reader_new();
	struct fcgi_event ev;
	size_t i;

	(void)state;
	begin(&s, 300, FCGI_RESPONDER, 0);
	for (i = 0; i + 1 < s.n; i++) {
		assert_int_equal(fcgi_reader_feed(r, s.p + i, 1), 0);
		fcgi_reader_next(r, &ev);
		assert_int_equal(ev.type, FCGI_EV_NONE);
	}
	assert_int_equal(fcgi_reader_feed(r, s.p + i, 1), 0);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_BEGIN);
	assert_int_equal(ev.request_id, 300);
	assert_int_equal(ev.role, FCGI_RESPONDER);
	assert_int_equal(ev.keep_conn, 0);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_NONE);
	fcgi_reader_free(r);
	bytes_free(&s);
}

static void
test_bad_version(void **state)
{
	struct fcgi_reader *r = fcgi_reader_new();
	struct fcgi_event ev;
	struct bytes s = { 0 };

	(void)state;
	begin(&s, 1, FCGI_RESPONDER, 0);
	s.p[0] = 2;
	/* known from the first byte */
	assert_int_equal(fcgi_reader_feed(r, s.p, 1), 0);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_ERROR);
	assert_string_equal(fcgi_reader_error(r), "bad version");
	/* sticky */
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_ERROR);
	assert_int_equal(fcgi_reader_room(r), 0);
	assert_int_equal(fcgi_reader_feed(r, s.p + 1, 1), -1);
	fcgi_reader_free(r);
	/* after a good record too */
	s.p[0] = 1;
	rec(&s, FCGI_PARAMS, 1, NULL, 0, 0);
	s.p[16] = 0;
	expect_log(&s, s.n, 0, "B1/1/0;X:bad version;");
	bytes_free(&s);
}

/* PARAMS of total bytes: one pair "N" = value filling them. */
static void
params_of(struct bytes *s, size_t total)
{
	struct bytes p = { 0 };
	char *v = malloc(total);
	size_t off, k;

	assert_non_null(v);
	memset(v, 'v', total);
	nv_len(&p, 1, 0);
	nv_len(&p, total - 6, 1);
	put(&p, "N", 1);
	put(&p, v, total - 6);
	assert_int_equal(p.n, total);
	for (off = 0; off < p.n; off += k) {
		k = p.n - off < 65535 ? p.n - off : 65535;
		rec(s, FCGI_PARAMS, 1, p.p + off, k, 0);
	}
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
	free(v);
	bytes_free(&p);
}

static void
test_params_limit(void **state)
{
	struct bytes s = { 0 }, want = { 0 };
	char *v = malloc(FCGI_PARAMS_MAX);

	(void)state;
	assert_non_null(v);
	memset(v, 'v', FCGI_PARAMS_MAX);
	begin(&s, 1, FCGI_RESPONDER, 0);
	params_of(&s, FCGI_PARAMS_MAX);
	puts_(&want, "B1/1/0;P1:N=");
	put(&want, v, FCGI_PARAMS_MAX - 6);
	puts_(&want, ",;E;");
	expect_log(&s, 4096, 0, want.p);
	bytes_free(&s);
	begin(&s, 1, FCGI_RESPONDER, 0);
	params_of(&s, FCGI_PARAMS_MAX + 1);
	expect_log(&s, 4096, 0, "B1/1/0;X:params too large;");
	bytes_free(&s);
	bytes_free(&want);
	free(v);
}

/* A request whose PARAMS content p goes in two records cut at cut. */
static void
split_request(struct bytes *s, const struct bytes *p, size_t cut)
{
	begin(s, 7, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 7, p->p, cut, cut % 8);
	rec(s, FCGI_PARAMS, 7, p->p + cut, p->n - cut, 0);
	rec(s, FCGI_PARAMS, 7, NULL, 0, 0);
	rec(s, FCGI_STDIN, 7, "{}", 2, 6);
	rec(s, FCGI_STDIN, 7, NULL, 0, 0);
}

static void
test_params_split(void **state)
{
	struct bytes p = { 0 }, s = { 0 }, want = { 0 }, v = { 0 };
	size_t cut, i;

	(void)state;
	for (i = 0; i < 300; i++)
		put(&v, &"abcdefghij"[i % 10], 1);
	spair(&p, "SCRIPT_NAME", "/charge");
	pair(&p, "HTTP_X_LONG", 11, v.p, v.n);
	pair(&p, "NUL", 3, "a\0b", 3);
	spair(&p, "Q", "");
	puts_(&want, "B7/1/0;P7:SCRIPT_NAME=/charge,HTTP_X_LONG=");
	put(&want, v.p, v.n);
	puts_(&want, ",NUL=a\\x00b,Q=,;I2;E;");
	/* every cut that leaves both records non-empty (an empty one ends) */
	for (cut = 1; cut < p.n; cut++) {
		s.n = 0;
		split_request(&s, &p, cut);
		expect_log(&s, s.n, 0, want.p);
		expect_log(&s, 5, 0, want.p);
	}
	expect_log(&s, 1, 0, want.p);
	bytes_free(&p);
	bytes_free(&s);
	bytes_free(&want);
	bytes_free(&v);
}

static void
test_nul_kept(void **state)
{
	struct bytes s = { 0 }, p = { 0 };
	struct fcgi_reader *r = fcgi_reader_new();
	struct fcgi_event ev;

	(void)state;
	begin(&s, 1, FCGI_RESPONDER, 0);
	pair(&p, "HTTP_IDEMPOTENCY_KEY", 20, "ab\0cd", 5);
	pair(&p, "X\0Y", 3, "", 0);
	rec(&s, FCGI_PARAMS, 1, p.p, p.n, 0);
	rec(&s, FCGI_PARAMS, 1, NULL, 0, 0);
	assert_int_equal(fcgi_reader_feed(r, s.p, s.n), 0);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_BEGIN);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_PARAMS);
	assert_int_equal(ev.nparams, 2);
	assert_int_equal(ev.params[0].valuelen, 5);
	assert_memory_equal(ev.params[0].value, "ab\0cd", 5);
	assert_int_equal(ev.params[1].namelen, 3);
	assert_memory_equal(ev.params[1].name, "X\0Y", 3);
	assert_int_equal(ev.params[1].valuelen, 0);
	fcgi_reader_free(r);
	bytes_free(&s);
	bytes_free(&p);
}

static void
test_long_lengths(void **state)
{
	struct bytes s = { 0 }, p = { 0 }, want = { 0 }, name = { 0 },
	             val = { 0 };
	size_t i;

	(void)state;
	for (i = 0; i < 128; i++)
		put(&name, "N", 1);
	for (i = 0; i < 1000; i++)
		put(&val, &"0123456789"[i % 10], 1);
	begin(&s, 1, FCGI_RESPONDER, 0);
	pair(&p, name.p, name.n, val.p, val.n); /* 4-byte lengths */
	/* a short length written in 4 bytes is valid too */
	nv_len(&p, 1, 1);
	nv_len(&p, 2, 1);
	put(&p, "abc", 3);
	rec(&s, FCGI_PARAMS, 1, p.p, p.n, 0);
	rec(&s, FCGI_PARAMS, 1, NULL, 0, 0);
	puts_(&want, "B1/1/0;P1:");
	put(&want, name.p, name.n);
	puts_(&want, "=");
	put(&want, val.p, val.n);
	puts_(&want, ",a=bc,;");
	expect_log(&s, s.n, 0, want.p);
	bytes_free(&s);
	bytes_free(&p);
	bytes_free(&want);
	bytes_free(&name);
	bytes_free(&val);
}

/* PARAMS content c (n bytes) then the end of the params. */
static void
params_raw(struct bytes *s, const char *c, size_t n)
{
	s->n = 0;
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, c, n, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
}

static void
test_pair_overrun(void **state)
{
	struct bytes s = { 0 };
	const char *want = "B1/1/0;X:name-value pair runs past the end;";

	(void)state;
	params_raw(&s,
	    "\x01\x05"
	    "Aabcd",
	    7); /* value one byte short */
	expect_log(&s, s.n, 0, want);
	params_raw(&s,
	    "\x09\x00"
	    "AB",
	    4); /* name past the end */
	expect_log(&s, s.n, 0, want);
	params_raw(&s, "\x01", 1); /* no value length */
	expect_log(&s, s.n, 0, want);
	params_raw(&s, "\x80\x00\x01", 3); /* a 4-byte length cut */
	expect_log(&s, s.n, 0, want);
	params_raw(&s,
	    "\x01\x80\x00\x00\x05"
	    "Aabc",
	    9);
	expect_log(&s, s.n, 0, want);
	/* 31-bit lengths far past the end, no overflow */
	params_raw(&s,
	    "\xff\xff\xff\xff\xff\xff\xff\xff"
	    "AB",
	    10);
	expect_log(&s, s.n, 0, want);
	params_raw(&s,
	    "\x01\x01"
	    "AB\x01",
	    5);
	expect_log(&s, s.n, 0, want);
	/* exact: fine */
	params_raw(&s,
	    "\x01\x01"
	    "AB",
	    4);
	expect_log(&s, s.n, 0, "B1/1/0;P1:A=B,;");
	bytes_free(&s);
}

static void
test_params_count(void **state)
{
	struct bytes s = { 0 }, p = { 0 }, want = { 0 };
	char *got;
	int i;

	(void)state;
	for (i = 0; i < FCGI_PARAMS_COUNT_MAX; i++)
		spair(&p, "K", "v");
	params_raw(&s, p.p, p.n);
	got = run(s.p, s.n, s.n, 0, NULL);
	puts_(&want, "B1/1/0;P1:");
	for (i = 0; i < FCGI_PARAMS_COUNT_MAX; i++)
		puts_(&want, "K=v,");
	puts_(&want, ";");
	assert_string_equal(got, want.p);
	free(got);
	spair(&p, "K", "v");
	params_raw(&s, p.p, p.n);
	expect_log(&s, s.n, 0, "B1/1/0;X:too many params;");
	bytes_free(&s);
	bytes_free(&p);
	bytes_free(&want);
}

static void
test_abort(void **state)
{
	struct bytes s = { 0 };

	(void)state;
	begin(&s, 3, FCGI_RESPONDER, FCGI_KEEP_CONN);
	rec(&s, FCGI_PARAMS, 3, NULL, 0, 0);
	rec(&s, FCGI_STDIN, 3, "part", 4, 0);
	rec(&s, FCGI_ABORT_REQUEST, 3, NULL, 0, 0);
	/* after request_done the rest of 3 is ignored; 4 begins */
	rec(&s, FCGI_STDIN, 3, "more", 4, 0);
	begin(&s, 4, FCGI_RESPONDER, 0);
	expect_log(&s, s.n, 1, "B3/1/1;P3:;I4;A3;B4/1/0;");
	/* an abort of another id is ignored */
	s.n = 0;
	begin(&s, 3, FCGI_RESPONDER, 0);
	rec(&s, FCGI_ABORT_REQUEST, 9, NULL, 0, 0);
	rec(&s, FCGI_ABORT_REQUEST, 3, NULL, 0, 0);
	expect_log(&s, 3, 0, "B3/1/0;A3;");
	bytes_free(&s);
}

static void
test_management(void **state)
{
	struct bytes s = { 0 }, p = { 0 };

	(void)state;
	spair(&p, FCGI_MAX_CONNS, "");
	spair(&p, FCGI_MPXS_CONNS, "");
	spair(&p, "OTHER", "");
	rec(&s, FCGI_GET_VALUES, 0, p.p, p.n, 0);
	rec(&s, 0x42, 0, "xyz", 3, 5);
	/* BEGIN_REQUEST with id 0 is a management record of its type too */
	begin(&s, 0, FCGI_RESPONDER, 0);
	rec(&s, FCGI_GET_VALUES, 0, NULL, 0, 0);
	expect_log(&s, s.n, 0,
	    "G:FCGI_MAX_CONNS=,FCGI_MPXS_CONNS=,OTHER=,;U66;U1;G:;");
	/* in the middle of a request */
	s.n = 0;
	begin(&s, 2, FCGI_RESPONDER, 0);
	rec(&s, FCGI_GET_VALUES, 0, p.p, p.n, 0);
	rec(&s, FCGI_PARAMS, 2, NULL, 0, 0);
	expect_log(&s, 5, 0,
	    "B2/1/0;G:FCGI_MAX_CONNS=,FCGI_MPXS_CONNS=,OTHER=,;P2:;");
	/* a bad pair in GET_VALUES */
	s.n = 0;
	rec(&s, FCGI_GET_VALUES, 0,
	    "\x05\x00"
	    "AB",
	    4, 0);
	expect_log(&s, s.n, 0, "X:name-value pair runs past the end;");
	bytes_free(&s);
	bytes_free(&p);
}

static void
test_roles(void **state)
{
	struct bytes s = { 0 };

	(void)state;
	begin(&s, 1, FCGI_AUTHORIZER, 0);
	expect_log(&s, s.n, 0, "B1/2/0;");
	s.n = 0;
	begin(&s, 1, 0x1234, FCGI_KEEP_CONN | 0x80);
	expect_log(&s, s.n, 0, "B1/4660/1;");
	s.n = 0;
	rec(&s, FCGI_BEGIN_REQUEST, 1, "\0\1\0\0\0\0\0", 7, 1);
	expect_log(&s, s.n, 0, "X:bad BEGIN_REQUEST length;");
	bytes_free(&s);
}

static void
test_refuse_mpx(void **state)
{
	struct bytes s = { 0 };

	(void)state;
	begin(&s, 1, FCGI_RESPONDER, FCGI_KEEP_CONN);
	begin(&s, 2, FCGI_RESPONDER, FCGI_KEEP_CONN);
	rec(&s, FCGI_PARAMS, 2,
	    "\x01\x01"
	    "ab",
	    4, 0);
	rec(&s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB",
	    4, 0);
	rec(&s, FCGI_PARAMS, 2, NULL, 0, 0);
	rec(&s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(&s, FCGI_STDIN, 2, "zz", 2, 0);
	rec(&s, FCGI_STDIN, 1, NULL, 0, 0);
	expect_log(&s, s.n, 0, "B1/1/1;R2;P1:A=B,;E;");
	/* the same id again while it is active */
	s.n = 0;
	begin(&s, 1, FCGI_RESPONDER, 0);
	begin(&s, 1, FCGI_RESPONDER, 0);
	expect_log(&s, s.n, 0,
	    "B1/1/0;X:BEGIN_REQUEST for the active request;");
	bytes_free(&s);
}

static void
test_pipelined(void **state)
{
	struct bytes s = { 0 }, body = { 0 };
	unsigned id;
	char *got;

	(void)state;
	for (id = 1; id <= 3; id++) {
		begin(&s, id, FCGI_RESPONDER, FCGI_KEEP_CONN);
		rec(&s, FCGI_PARAMS, id,
		    "\x01\x01"
		    "Ax",
		    4, 4);
		rec(&s, FCGI_PARAMS, id, NULL, 0, 0);
		rec(&s, FCGI_STDIN, id, "body", 4, 4);
		rec(&s, FCGI_STDIN, id, NULL, 0, 0);
	}
	/* id 1 again after it ended */
	begin(&s, 1, FCGI_RESPONDER, 0);
	got = run(s.p, s.n, s.n, 1, &body);
	assert_string_equal(got,
	    "B1/1/1;P1:A=x,;I4;E;B2/1/1;P2:A=x,;I4;E;B3/1/1;P3:A=x,;I4;E;"
	    "B1/1/0;");
	assert_int_equal(body.n, 12);
	free(got);
	bytes_free(&body);
	/* without request_done the next BEGIN is refused */
	expect_log(&s, s.n, 0,
	    "B1/1/1;P1:A=x,;I4;E;R2;R3;X:BEGIN_REQUEST "
	    "for the active request;");
	expect_log(&s, 3, 1,
	    "B1/1/1;P1:A=x,;I4;E;B2/1/1;P2:A=x,;I4;E;B3/1/1;P3:A=x,;I4;E;"
	    "B1/1/0;");
	bytes_free(&s);
}

/*
 * After fcgi_reader_answered the rest of the body still comes, and a
 * BEGIN_REQUEST (even of the same id) begins the next request, as Apache's
 * mod_proxy_fcgi sends it after abandoning a body answered early.
 */
static void
test_answered_abandoned(void **state)
{
	struct fcgi_reader *r = fcgi_reader_new();
	struct bytes a = { 0 }, b = { 0 };
	struct fcgi_event ev;

	(void)state;
	assert_non_null(r);
	begin(&a, 1, FCGI_RESPONDER, FCGI_KEEP_CONN);
	rec(&a, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "Ax",
	    4, 4);
	rec(&a, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(&a, FCGI_STDIN, 1, "ab", 2, 6);
	assert_int_equal(fcgi_reader_feed(r, a.p, a.n), 0);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_BEGIN);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_PARAMS);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_STDIN);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_NONE);
	/* without the mark the same BEGIN would be a protocol error */
	fcgi_reader_answered(r);
	rec(&b, FCGI_STDIN, 1, "cd", 2, 6);
	begin(&b, 1, FCGI_RESPONDER, FCGI_KEEP_CONN);
	rec(&b, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "By",
	    4, 4);
	rec(&b, FCGI_PARAMS, 1, NULL, 0, 0);
	assert_int_equal(fcgi_reader_feed(r, b.p, b.n), 0);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_STDIN);
	assert_int_equal(ev.len, 2);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_BEGIN);
	assert_int_equal(ev.request_id, 1);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_PARAMS);
	assert_int_equal(ev.nparams, 1);
	assert_memory_equal(ev.params[0].name, "B", 1);
	fcgi_reader_free(r);
	bytes_free(&a);
	bytes_free(&b);
}

static void
test_ignored(void **state)
{
	struct bytes s = { 0 };

	(void)state;
	/* records of ids never begun */
	rec(&s, FCGI_PARAMS, 5,
	    "\x01\x01"
	    "ab",
	    4, 0);
	rec(&s, FCGI_STDIN, 5, "x", 1, 7);
	rec(&s, FCGI_ABORT_REQUEST, 5, NULL, 0, 0);
	rec(&s, FCGI_STDOUT, 5, "x", 1, 0);
	begin(&s, 1, FCGI_RESPONDER, 0);
	rec(&s, FCGI_PARAMS, 5,
	    "\x01\x01"
	    "ab",
	    4, 0);
	/* DATA and undefined types of the active request */
	rec(&s, FCGI_DATA, 1, "data", 4, 0);
	rec(&s, 12, 1, "twelve", 6, 2);
	rec(&s, 0, 1, NULL, 0, 0);
	rec(&s, 255, 1, NULL, 0, 0);
	rec(&s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(&s, FCGI_STDIN, 1, "y", 1, 0);
	rec(&s, FCGI_STDIN, 1, NULL, 0, 0);
	expect_log(&s, s.n, 0, "B1/1/0;P1:;I1;E;");
	expect_log(&s, 1, 0, "B1/1/0;P1:;I1;E;");
	bytes_free(&s);
}

/* A request ending in the record of type type and content c. */
static void
expect_order_error(int params_done, int stdin_done, int type, const char *want)
{
	struct bytes s = { 0 };

	begin(&s, 1, FCGI_RESPONDER, 0);
	if (params_done)
		rec(&s, FCGI_PARAMS, 1, NULL, 0, 0);
	if (stdin_done)
		rec(&s, FCGI_STDIN, 1, NULL, 0, 0);
	rec(&s, type, 1, "c", 1, 0);
	expect_log(&s, s.n, 0, want);
	bytes_free(&s);
}

static void
test_order_errors(void **state)
{
	(void)state;
	expect_order_error(0, 0, FCGI_STDIN,
	    "B1/1/0;X:STDIN before the params ended;");
	expect_order_error(1, 0, FCGI_PARAMS,
	    "B1/1/0;P1:;X:PARAMS after the params ended;");
	expect_order_error(1, 1, FCGI_STDIN,
	    "B1/1/0;P1:;E;X:STDIN after the body ended;");
	expect_order_error(1, 0, FCGI_STDOUT,
	    "B1/1/0;P1:;X:unexpected record type;");
	expect_order_error(0, 0, FCGI_END_REQUEST,
	    "B1/1/0;X:unexpected record type;");
	expect_order_error(0, 0, FCGI_GET_VALUES,
	    "B1/1/0;X:unexpected record type;");
}

static void
test_feed_bound(void **state)
{
	struct fcgi_reader *r = fcgi_reader_new();
	struct bytes s = { 0 }, want = { 0 };
	struct fcgi_event ev;
	char *big = calloc(1, FCGI_READER_MAX + 1);
	char *got;

	(void)state;
	assert_non_null(big);
	assert_int_equal(fcgi_reader_room(r), FCGI_READER_MAX);
	assert_int_equal(fcgi_reader_feed(r, big, FCGI_READER_MAX + 1), -1);
	assert_int_equal(fcgi_reader_feed(r, NULL, 0), 0);
	begin(&s, 1, FCGI_RESPONDER, 0);
	rec(&s, FCGI_PARAMS, 1, NULL, 0, 0);
	assert_int_equal(fcgi_reader_feed(r, s.p, s.n), 0);
	assert_int_equal(fcgi_reader_room(r), FCGI_READER_MAX - s.n);
	/* the rest fills it exactly: one byte more is refused, all or none */
	assert_int_equal(fcgi_reader_feed(r, big, FCGI_READER_MAX - s.n + 1),
	    -1);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_BEGIN);
	assert_int_equal(fcgi_reader_room(r), FCGI_READER_MAX - 8);
	fcgi_reader_next(r, &ev);
	assert_int_equal(ev.type, FCGI_EV_PARAMS);
	assert_int_equal(fcgi_reader_room(r), FCGI_READER_MAX);
	fcgi_reader_free(r);
	/* the largest records, with the largest padding, fed a byte at a
	 * time and in pieces of the largest room */
	s.n = 0;
	begin(&s, 1, FCGI_RESPONDER, 0);
	rec(&s, FCGI_PARAMS, 1, NULL, 0, 255);
	rec(&s, FCGI_STDIN, 1, big, FCGI_MAX_LENGTH, 255);
	rec(&s, FCGI_STDIN, 1, big, FCGI_MAX_LENGTH, 255);
	rec(&s, FCGI_STDIN, 1, NULL, 0, 255);
	puts_(&want, "B1/1/0;P1:;I65535;I65535;E;");
	expect_log(&s, 1, 0, want.p);
	expect_log(&s, FCGI_READER_MAX, 0, want.p);
	got = run(s.p, s.n, 10000, 0, NULL);
	assert_string_equal(got, want.p);
	free(got);
	bytes_free(&s);
	bytes_free(&want);
	free(big);
}

/*
 * Reads back the records of a framed stream: each well formed, of type and
 * id, content plus padding a multiple of 8, the contents concatenated into
 * out. The number of records.
 */
static size_t
parse_stream(const char *p, size_t n, int type, unsigned id, struct bytes *out)
{
	const unsigned char *h;
	size_t off = 0, count = 0, clen, plen;

	while (off < n) {
		assert_true(n - off >= 8);
		h = (const unsigned char *)p + off;
		assert_int_equal(h[0], 1);
		assert_int_equal(h[1], type);
		assert_int_equal((h[2] << 8) | h[3], id);
		clen = ((size_t)h[4] << 8) | h[5];
		plen = h[6];
		assert_int_equal(h[7], 0);
		assert_int_equal((clen + plen) % 8, 0);
		assert_true(plen < 8);
		assert_true(n - off >= 8 + clen + plen);
		put(out, p + off + 8, clen);
		off += 8 + clen + plen;
		count++;
	}
	return count;
}

static void
test_write_roundtrip(void **state)
{
	static const size_t sizes[] = { 0, 1, 7, 8, 65527, 65528, 65529, 65535,
		65536, 200000 };
	struct bytes got = { 0 };
	size_t i, j, n, w, size, records;
	char *data, *out;

	(void)state;
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		n = sizes[i];
		data = malloc(n + 1);
		size = fcgi_stream_size(n);
		out = malloc(size + 1);
		assert_non_null(data);
		assert_non_null(out);
		for (j = 0; j < n; j++)
			data[j] = (char)(j * 131 + 7);
		out[size] = 'Z';
		w = fcgi_write_stream(out, FCGI_STDOUT, 0x1234, data, n);
		assert_int_equal(w, size); /* exact, not just a bound */
		assert_int_equal(out[size], 'Z');
		got.n = 0;
		records = parse_stream(out, w, FCGI_STDOUT, 0x1234, &got);
		assert_int_equal(got.n, n);
		if (n > 0)
			assert_memory_equal(got.p, data, n);
		assert_int_equal(records,
		    n == 0 ? 1
		           : (n + FCGI_STREAM_CHUNK - 1) / FCGI_STREAM_CHUNK);
		free(data);
		free(out);
	}
	/* STDERR with a large id */
	{
		char o[32];

		assert_int_equal(fcgi_write_stream(o, FCGI_STDERR, 65535, "ab",
		                     2),
		    16);
		assert_memory_equal(o,
		    "\x01\x07\xff\xff\x00\x02\x06\x00"
		    "ab\0\0\0\0\0\0",
		    16);
	}
	bytes_free(&got);
}

static void
test_write_records(void **state)
{
	char o[64];

	(void)state;
	assert_int_equal(fcgi_write_end(o, 0x0102, 0xa0b0c0d0,
	                     FCGI_CANT_MPX_CONN),
	    FCGI_END_REQUEST_SIZE);
	assert_memory_equal(o,
	    "\x01\x03\x01\x02\x00\x08\x00\x00"
	    "\xa0\xb0\xc0\xd0\x01\x00\x00\x00",
	    16);
	assert_int_equal(fcgi_write_end(o, 1, 0, FCGI_REQUEST_COMPLETE), 16);
	assert_memory_equal(o,
	    "\x01\x03\x00\x01\x00\x08\x00\x00"
	    "\x00\x00\x00\x00\x00\x00\x00\x00",
	    16);
	assert_int_equal(fcgi_write_unknown_type(o, 0x42), 16);
	assert_memory_equal(o,
	    "\x01\x0b\x00\x00\x00\x08\x00\x00"
	    "\x42\x00\x00\x00\x00\x00\x00\x00",
	    16);
}

static void
test_write_values(void **state)
{
	static const char want[] = "\x0e\x02"
	                           "FCGI_MAX_CONNS"
	                           "10"
	                           "\x0f\x01"
	                           "FCGI_MPXS_CONNS"
	                           "0";
	struct fcgi_param asked[4] = {
		{ "FCGI_MAX_CONNS", 14, "", 0 },
		{ "FCGI_MAX_CONNSX", 15, "", 0 },
		{ "FCGI_MPXS_CONNS", 15, "", 0 },
		{ "FCGI_MAX_CONNS", 14, "", 0 }, /* asked twice: once */
	};
	size_t clen = sizeof(want) - 1, w;
	struct bytes s = { 0 };
	char o[128];
	char *got;

	(void)state;
	w = fcgi_write_values(o, sizeof(o), asked, 4, 10, 1, 0);
	assert_int_equal(clen, 36);
	assert_int_equal(w, 8 + 40);
	assert_memory_equal(o, "\x01\x0a\x00\x00\x00\x24\x04\x00", 8);
	assert_memory_equal(o + 8, want, clen);
	assert_memory_equal(o + 8 + clen, "\0\0\0\0", 4);
	/* too small, at every length short of the whole */
	for (clen = 0; clen < w; clen++)
		assert_int_equal(fcgi_write_values(o, clen, asked, 4, 10, 1, 0),
		    0);
	/* nothing known asked: an empty record */
	assert_int_equal(fcgi_write_values(o, sizeof(o), asked + 1, 1, 1, 1, 1),
	    8);
	assert_memory_equal(o, "\x01\x0a\x00\x00\x00\x00\x00\x00", 8);
	/* all three; the result read by the reader as GET_VALUES content */
	asked[1].namelen = 13;
	asked[1].name = "FCGI_MAX_REQS";
	w = fcgi_write_values(o, sizeof(o), asked, 3, 4294967295u, 2, 5);
	o[1] = FCGI_GET_VALUES;
	put(&s, o, w);
	got = run(s.p, s.n, s.n, 0, NULL);
	assert_string_equal(got,
	    "G:FCGI_MAX_CONNS=4294967295,FCGI_MAX_REQS=2,"
	    "FCGI_MPXS_CONNS=1,;");
	free(got);
	bytes_free(&s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_request),
		cmocka_unit_test(test_truncated_header),
		cmocka_unit_test(test_bad_version),
		cmocka_unit_test(test_params_limit),
		cmocka_unit_test(test_params_split),
		cmocka_unit_test(test_nul_kept),
		cmocka_unit_test(test_long_lengths),
		cmocka_unit_test(test_pair_overrun),
		cmocka_unit_test(test_params_count),
		cmocka_unit_test(test_abort),
		cmocka_unit_test(test_management),
		cmocka_unit_test(test_roles),
		cmocka_unit_test(test_refuse_mpx),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_answered_abandoned),
		cmocka_unit_test(test_ignored),
		cmocka_unit_test(test_order_errors),
		cmocka_unit_test(test_feed_bound),
		cmocka_unit_test(test_write_roundtrip),
		cmocka_unit_test(test_write_records),
		cmocka_unit_test(test_write_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
