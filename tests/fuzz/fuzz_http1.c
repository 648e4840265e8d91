/*
 * fuzz_http1.c - the target "http1" of fuzz.c: the provider client's
 * answer reader (src/provider/http1_read.c) and its reading of a proxy's
 * answer to CONNECT (h1_proxy_answer, src/provider/http1_proxy.c), over
 * the input as the bytes a provider or a proxy sends.
 *
 * The reader is fed the input at once and again in pieces (their sizes
 * drawn from a hash of the input), stopping as http1.c does when the
 * answer ended: both must see the same status, headers and body and end
 * the same way. The CONNECT answer is read as http1.c reads it, on the
 * bytes so far after each piece, and must agree with one reading of the
 * whole; a head it accepts must be one llhttp reads with the same status.
 */
#include <stdlib.h>
#include <string.h>

#include <llhttp.h>

#include "fuzz.h"
#include "http1_proxy.h"
#include "http1_read.h"

#define FUZZ_PIECE_MAX 64   /* bytes: the largest piece fed at once */
#define FUZZ_HEADERS_MAX 64 /* headers recorded (more are counted) */
#define FUZZ_HEAD_SMALL 512 /* bytes of a CONNECT answer read in pieces */

/* What one reading saw. */
struct seen {
	unsigned hsum[FUZZ_HEADERS_MAX]; /* a hash of each header */
	size_t nheaders;
	char *body; /* every body byte, in order */
	size_t blen, bcap;
	int body_stop; /* body bytes after which the callback refuses */
};

static unsigned
hash(const void *p, size_t n, unsigned h)
{
	const unsigned char *s = p;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ s[i]) * 16777619u;
	return h;
}

static void
on_header(void *arg, const char *name, size_t nlen, const char *value,
    size_t vlen)
{
	struct seen *s = arg;
	struct h1_reader *rd = NULL;

	/* cut at the reader's buffers, never past them */
	if (nlen > sizeof(rd->hname) || vlen > sizeof(rd->hval))
		abort();
	if (s->nheaders < FUZZ_HEADERS_MAX)
		s->hsum[s->nheaders] =
		    hash(value, vlen, hash(name, nlen, 2166136261u));
	s->nheaders++;
}

static int
on_body(void *arg, const char *p, size_t len)
{
	struct seen *s = arg;

	if (len == 0)
		abort();
	if (s->blen + len > s->bcap)
		abort(); /* more body than input */
	memcpy(s->body + s->blen, p, len);
	s->blen += len;
	return s->body_stop >= 0 && s->blen > (size_t)s->body_stop ? -1 : 0;
}

/* How one reading ended. */
struct outcome {
	int complete, status, keep, eof_ended, rest; /* rest: bytes not fed */
	llhttp_errno_t err;
};

/*
 * Reads data[0..size) as http1.c does: pieces of at most piece_max bytes
 * (0: all at once, else sizes from seed), stopping at the answer's end or
 * the first error; at the end of the input, the connection's end.
 */
static void
read_answer(const uint8_t *data, size_t size, size_t piece_max, unsigned seed,
    struct seen *s, struct outcome *o)
{
	struct h1_reader rd;
	size_t off = 0, k;

	h1_read_start(&rd, on_header, on_body, s);
	memset(o, 0, sizeof(*o));
	o->err = HPE_OK;
	while (off < size && o->err == HPE_OK && !rd.complete) {
		k = size - off;
		if (piece_max > 0) {
			seed = seed * 1103515245u + 12345u;
			if (k > 1 + (seed >> 16) % piece_max)
				k = 1 + (seed >> 16) % piece_max;
		}
		o->err = h1_read(&rd, (const char *)data + off, k);
		off += k;
	}
	if (!rd.complete && o->err == HPE_OK)
		o->eof_ended = h1_read_eof(&rd);
	o->complete = rd.complete;
	o->status = rd.status;
	o->keep = rd.keep && o->err == HPE_OK;
	o->rest = off < size;
	if (rd.complete && (rd.status < 200 || rd.status > 999))
		abort(); /* a 1xx is never the answer */
}

static void
fuzz_reader(const uint8_t *data, size_t size)
{
	struct seen a = { 0 }, b = { 0 };
	struct outcome oa, ob;
	unsigned h = hash(data, size, 2166136261u);
	size_t i;

	a.bcap = b.bcap = size;
	a.body = malloc(size + 1);
	b.body = malloc(size + 1);
	if (a.body == NULL || b.body == NULL)
		goto out;
	/* one reading in ten refuses the body after some bytes (HPE_USER) */
	a.body_stop = b.body_stop = h % 10 == 0 ? (int)(h >> 8) % 512 : -1;
	read_answer(data, size, 0, h, &a, &oa);
	read_answer(data, size, FUZZ_PIECE_MAX, h, &b, &ob);
	/* an answer ended the same; bytes after it end the one-shot read */
	if (oa.complete != ob.complete || oa.eof_ended != ob.eof_ended ||
	    (oa.complete ? oa.status != ob.status
	                 : (oa.err == HPE_OK) != (ob.err == HPE_OK) ||
	                (oa.err == HPE_USER) != (ob.err == HPE_USER)))
		abort();
	/* bytes after the answer in the same read forbid keeping it */
	if ((oa.keep && !ob.keep) || (ob.keep && !ob.rest && !oa.keep))
		abort();
	/* a refused body stops at a piece's end: one is the other's start */
	if (oa.err == HPE_USER
	        ? memcmp(a.body, b.body, a.blen < b.blen ? a.blen : b.blen) != 0
	        : a.blen != b.blen || memcmp(a.body, b.body, a.blen) != 0)
		abort();
	if (a.nheaders != b.nheaders)
		abort();
	for (i = 0; i < a.nheaders && i < FUZZ_HEADERS_MAX; i++)
		if (a.hsum[i] != b.hsum[i])
			abort();
out:
	free(a.body);
	free(b.body);
}

/* The first status line's status (a 1xx may be followed by another). */
static int
on_status_done(llhttp_t *p)
{
	int *status = p->data;

	if (*status == -1)
		*status = (int)p->status_code;
	return 0;
}

/*
 * The status llhttp reads in the status line of buf[0..n), or -1 when it
 * finds no valid one there (what follows the line is not its concern).
 */
static int
llhttp_status(const char *buf, size_t n)
{
	llhttp_settings_t set;
	llhttp_t p;
	int status = -1;

	llhttp_settings_init(&set);
	set.on_status_complete = on_status_done;
	set.on_headers_complete = on_status_done;
	llhttp_init(&p, HTTP_RESPONSE, &set);
	p.data = &status;
	(void)llhttp_execute(&p, buf, n);
	return status;
}

static void
fuzz_connect(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	unsigned seed = hash(data, size, 2166136261u);
	int whole, status = -1, got = 0, st = -1;
	size_t have = 0;

	whole = h1_proxy_answer(buf, size, &status);
	if (whole > (int)size || whole < -1 ||
	    (whole > 0 &&
	        (whole < 16 || memcmp(buf + whole - 4, "\r\n\r\n", 4) != 0 ||
	            status < 0 || status > 999)))
		abort();
	/* http1.c reads it again on every read until it is not 0 (small
	 * reads while the head may still be coming, then the rest) */
	while (have < size && got == 0) {
		seed = seed * 1103515245u + 12345u;
		have += have < FUZZ_HEAD_SMALL
		    ? 1 + (seed >> 16) % FUZZ_PIECE_MAX
		    : size;
		if (have > size)
			have = size;
		got = h1_proxy_answer(buf, have, &st);
	}
	if (got != whole || (got > 0 && st != status))
		abort();
	if (whole > 0 && llhttp_status(buf, (size_t)whole) != status)
		abort();
}

void
fuzz_http1(const uint8_t *data, size_t size)
{
	fuzz_reader(data, size);
	fuzz_connect(data, size);
}
