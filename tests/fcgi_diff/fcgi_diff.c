/*
 * fcgi_diff.c - the codec (src/codec/fcgi_codec.c) against libfcgi's own reader.
 * Each byte stream is written into a unix socket that FCGX_Accept_r reads
 * in this process (a writer thread sends it, then a "sentinel" request on
 * a second connection, so that a stream libfcgi refuses ends in the
 * sentinel instead of a blocked accept), and fed to the codec in pieces.
 * Both must agree: the same params and body, or both refuse. libfcgi keeps
 * params as C strings: where a name or value holds a NUL, libfcgi's string
 * ends there while the codec keeps the whole length (checked as such).
 * Hand-made streams with a known difference say which, and pass only when
 * exactly that difference shows.
 *
 *   fcgi_diff [GENERATED [SEED]]   prints TAP; exit 1 on any failure
 *   DIFF_VERBOSE=1                 both outcomes of each difference (stderr)
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fcgiapp.h>

#include "fcgi_codec.h"

#define DIFF_GENERATED 400    /* generated streams by default */
#define DIFF_SEED 20261125u   /* their fixed seed by default */
#define DIFF_BATCH 25         /* generated streams per TAP line */
#define DIFF_ALARM_S 60       /* seconds: a hang is a failure */
#define DIFF_PARAMS_KEPT 300  /* params compared, per request */
#define DIFF_READ 4096        /* bytes per FCGX_GetStr */
#define DIFF_BACKLOG 8        /* the listener's backlog */
#define DIFF_CODEC_PIECE 9000 /* bytes: the largest piece fed to the codec */
#define DIFF_WHY 256          /* bytes of a difference's description */
#define DIFF_SENTINEL "DIFF_SENTINEL"

struct bytes {
	char *p;
	size_t n, cap;
};

static void
put(struct bytes *b, const void *p, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		if ((b->p = realloc(b->p, b->cap)) == NULL) {
			fprintf(stderr, "fcgi_diff: out of memory\n");
			exit(2);
		}
	}
	if (n > 0)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void
bytes_free(struct bytes *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* xorshift32: the generated streams depend on the seed alone. */
static uint32_t
rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* 0..n-1 */
static size_t
below(uint32_t *s, size_t n)
{
	return n == 0 ? 0 : rnd(s) % n;
}

/* --- building streams ---------------------------------------------- */

static void
rec(struct bytes *b, int type, unsigned id, const void *content, size_t n,
    size_t pad)
{
	unsigned char h[8] = { 1, (unsigned char)type, (unsigned char)(id >> 8),
		(unsigned char)id, (unsigned char)(n >> 8), (unsigned char)n,
		(unsigned char)pad, 0 };
	static const char zero[255];

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

/* PARAMS content p as records of at most max bytes, then the empty one. */
static void
params_records(struct bytes *s, unsigned id, const struct bytes *p, size_t max,
    size_t pad)
{
	size_t off, k;

	for (off = 0; off < p->n; off += k) {
		k = p->n - off < max ? p->n - off : max;
		rec(s, FCGI_PARAMS, id, p->p + off, k, pad);
	}
	rec(s, FCGI_PARAMS, id, NULL, 0, 0);
}

/* n body bytes (printable) as STDIN records of at most max, then the end. */
static void
stdin_records(struct bytes *s, unsigned id, size_t n, size_t max, size_t pad,
    int end)
{
	char chunk[65535];
	size_t off, k, i;

	for (off = 0; off < n; off += k) {
		k = n - off < max ? n - off : max;
		for (i = 0; i < k; i++)
			chunk[i] = (char)(' ' + (off + i) * 7 % 95);
		rec(s, FCGI_STDIN, id, chunk, k, pad);
	}
	if (end)
		rec(s, FCGI_STDIN, id, NULL, 0, 0);
}

/* --- outcomes -------------------------------------------------------- */

struct outcome {
	int accepted; /* the request reached the application */
	int role;
	int complete; /* the body ended with the empty STDIN */
	size_t nparams;
	struct bytes param[DIFF_PARAMS_KEPT]; /* "name=value" */
	struct bytes body;
};

static void
outcome_free(struct outcome *o)
{
	size_t i;

	for (i = 0; i < DIFF_PARAMS_KEPT; i++)
		bytes_free(&o->param[i]);
	bytes_free(&o->body);
	memset(o, 0, sizeof(*o));
}

static void
add_param(struct outcome *o, const char *name, size_t nl, const char *value,
    size_t vl)
{
	struct bytes *b;

	if (o->nparams < DIFF_PARAMS_KEPT) {
		b = &o->param[o->nparams];
		put(b, name, nl);
		put(b, "=", 1);
		put(b, value, vl);
	}
	o->nparams++;
}

/* --- the codec side -------------------------------------------------- */

static void
codec_run(const struct bytes *s, uint32_t seed, struct outcome *o)
{
	struct fcgi_reader *r = fcgi_reader_new();
	struct fcgi_event ev;
	size_t off = 0, k, i;
	int begun = 0;

	if (r == NULL)
		exit(2);
	memset(o, 0, sizeof(*o));
	for (;;) {
		for (fcgi_reader_next(r, &ev); ev.type != FCGI_EV_NONE;
		     fcgi_reader_next(r, &ev)) {
			switch (ev.type) {
			case FCGI_EV_BEGIN:
				/* libfcgi knows the three roles of the spec */
				if (ev.role < FCGI_RESPONDER ||
				    ev.role > FCGI_FILTER)
					goto out;
				begun = 1;
				o->role = ev.role;
				break;
			case FCGI_EV_PARAMS:
				if (!begun)
					abort();
				o->accepted = 1;
				for (i = 0; i < ev.nparams; i++)
					add_param(o, ev.params[i].name,
					    ev.params[i].namelen,
					    ev.params[i].value,
					    ev.params[i].valuelen);
				break;
			case FCGI_EV_STDIN:
				put(&o->body, ev.data, ev.len);
				break;
			case FCGI_EV_STDIN_END: o->complete = 1; goto out;
			case FCGI_EV_ABORT:
			case FCGI_EV_ERROR: goto out;
			default: break; /* management, REFUSE_MPX */
			}
		}
		if (off == s->n)
			break;
		k = 1 + below(&seed, DIFF_CODEC_PIECE);
		if (k > s->n - off)
			k = s->n - off;
		if (k > fcgi_reader_room(r))
			k = fcgi_reader_room(r);
		if (fcgi_reader_feed(r, s->p + off, k) != 0)
			abort();
		off += k;
	}
out:
	fcgi_reader_free(r);
}

/* --- the libfcgi side ------------------------------------------------ */

struct writer_job {
	int fd, fd2;
	const struct bytes *s, *s2;
};

static void
send_all(int fd, const struct bytes *s)
{
	size_t off = 0;
	ssize_t k;

	while (off < s->n) {
		k = send(fd, s->p + off, s->n - off, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break; /* libfcgi closed it: it refused the stream */
		off += (size_t)k;
	}
	(void)shutdown(fd, SHUT_WR);
}

static void *
writer(void *arg)
{
	struct writer_job *j = arg;

	send_all(j->fd, j->s);
	send_all(j->fd2, j->s2);
	return NULL;
}

static int
dial(const char *path)
{
	struct sockaddr_un sa;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		perror("fcgi_diff: connect");
		exit(2);
	}
	return fd;
}

static int
role_of(const char *s)
{
	if (strcmp(s, "FCGI_ROLE=RESPONDER") == 0)
		return FCGI_RESPONDER;
	if (strcmp(s, "FCGI_ROLE=AUTHORIZER") == 0)
		return FCGI_AUTHORIZER;
	if (strcmp(s, "FCGI_ROLE=FILTER") == 0)
		return FCGI_FILTER;
	return -1;
}

/* The request libfcgi accepted: its params and its body to the end. */
static void
lib_collect(FCGX_Request *req, struct outcome *o)
{
	char buf[DIFF_READ];
	char **p;
	int k;

	o->accepted = 1;
	/* libfcgi puts FCGI_ROLE first, then "name=value" as sent, as C
	 * strings (so a NUL ends one early) */
	o->role = role_of(req->envp[0]);
	for (p = req->envp + 1; *p != NULL; p++) {
		if (o->nparams < DIFF_PARAMS_KEPT)
			put(&o->param[o->nparams], *p, strlen(*p));
		o->nparams++;
	}
	while ((k = FCGX_GetStr(buf, sizeof(buf), req->in)) > 0)
		put(&o->body, buf, (size_t)k);
	o->complete = FCGX_GetError(req->in) == 0;
}

/* The sentinel: a plain request on a second connection. */
static void
sentinel(struct bytes *s)
{
	struct bytes p = { 0 };

	begin(s, 1, FCGI_RESPONDER, 0);
	spair(&p, DIFF_SENTINEL, "1");
	params_records(s, 1, &p, 100, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
	bytes_free(&p);
}

/* libfcgi reads s on one connection: the first request it gives, if any. */
static void
lib_run(FCGX_Request *req, const char *path, const struct bytes *s,
    struct outcome *o)
{
	static struct bytes sent;
	struct writer_job job;
	char buf[DIFF_READ];
	pthread_t th;
	int first = 1;

	memset(o, 0, sizeof(*o));
	if (sent.n == 0)
		sentinel(&sent);
	job.fd = dial(path);
	job.fd2 = dial(path);
	job.s = s;
	job.s2 = &sent;
	if (pthread_create(&th, NULL, writer, &job) != 0)
		exit(2);
	for (;;) {
		if (FCGX_Accept_r(req) < 0) {
			fprintf(stderr, "fcgi_diff: FCGX_Accept_r failed\n");
			exit(2);
		}
		if (FCGX_GetParam(DIFF_SENTINEL, req->envp) != NULL) {
			while (FCGX_GetStr(buf, sizeof(buf), req->in) > 0)
				;
			FCGX_Finish_r(req);
			break;
		}
		/* a kept connection may carry more requests: the first counts */
		if (first)
			lib_collect(req, o);
		else
			while (FCGX_GetStr(buf, sizeof(buf), req->in) > 0)
				;
		first = 0;
		FCGX_Finish_r(req);
	}
	pthread_join(th, NULL);
	close(job.fd);
	close(job.fd2);
}

/* --- comparing ------------------------------------------------------- */

/*
 * 0 when the codec agrees with libfcgi, else 1 with why. A request is
 * served when its params and its whole body came (the empty STDIN); both
 * must serve it or both fail it. Served: the same role, params and body.
 * Failed after both accepted it: the same params, and the codec's body a
 * prefix of libfcgi's (libfcgi hands out the bytes of a record cut short,
 * the codec only whole records). *nul counts the params where libfcgi's
 * string ends at a NUL the codec kept; *partial the streams libfcgi gave
 * to the application with the params read up to a protocol error, which
 * the codec refused (both fail them: libfcgi's body read fails).
 */
static int
compare(const struct outcome *lib, const struct outcome *cod, int *nul,
    int *partial, char *why, size_t whylen)
{
	const struct bytes *l, *c;
	int lib_ok = lib->accepted && lib->complete;
	int cod_ok = cod->accepted && cod->complete;
	size_t i, t;

	if (lib_ok != cod_ok) {
		snprintf(why, whylen, "served: libfcgi %d, codec %d", lib_ok,
		    cod_ok);
		return 1;
	}
	if (lib->accepted && !cod->accepted) {
		(*partial)++;
		return 0;
	}
	if (lib->accepted != cod->accepted) {
		snprintf(why, whylen, "accepted: libfcgi %d, codec %d",
		    lib->accepted, cod->accepted);
		return 1;
	}
	if (!lib->accepted)
		return 0;
	if (lib->role != cod->role || lib->nparams != cod->nparams) {
		snprintf(why, whylen,
		    "role/params: libfcgi %d/%zu, codec %d/%zu", lib->role,
		    lib->nparams, cod->role, cod->nparams);
		return 1;
	}
	for (i = 0; i < lib->nparams && i < DIFF_PARAMS_KEPT; i++) {
		l = &lib->param[i];
		c = &cod->param[i];
		t = strnlen(c->p, c->n);
		if (t < c->n)
			(*nul)++;
		if (l->n != t || memcmp(l->p, c->p, t) != 0) {
			snprintf(why, whylen,
			    "param %zu: libfcgi %.40s, codec %.40s", i, l->p,
			    c->p);
			return 1;
		}
	}
	if ((lib_ok && lib->body.n != cod->body.n) ||
	    cod->body.n > lib->body.n ||
	    (cod->body.n > 0 &&
	        memcmp(lib->body.p, cod->body.p, cod->body.n) != 0)) {
		snprintf(why, whylen, "body: libfcgi %zu bytes, codec %zu",
		    lib->body.n, cod->body.n);
		return 1;
	}
	return 0;
}

struct diff {
	FCGX_Request req;
	const char *path;
	int n;      /* TAP lines so far */
	int failed; /* not ok lines */
};

/* Runs one stream both ways: 0 as expected, 1 not; *nul as compare. */
static int
diff_one(struct diff *d, const struct bytes *s, uint32_t seed,
    const char *expect, int *nul, int *refused, int *partial, char *why,
    size_t whylen)
{
	struct outcome lib, cod;
	int differ, rc;

	lib_run(&d->req, d->path, s, &lib);
	codec_run(s, seed, &cod);
	why[0] = '\0';
	differ = compare(&lib, &cod, nul, partial, why, whylen);
	if (differ && getenv("DIFF_VERBOSE") != NULL)
		fprintf(stderr,
		    "# libfcgi: accepted %d role %d params %zu body %zu complete "
		    "%d; codec: accepted %d role %d params %zu body %zu complete "
		    "%d\n",
		    lib.accepted, lib.role, lib.nparams, lib.body.n,
		    lib.complete, cod.accepted, cod.role, cod.nparams,
		    cod.body.n, cod.complete);
	if (!differ && !lib.accepted && !cod.accepted)
		(*refused)++;
	if (expect == NULL)
		rc = differ;
	else
		rc = !differ || strstr(why, expect) != why;
	outcome_free(&lib);
	outcome_free(&cod);
	return rc;
}

static void
tap(struct diff *d, int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%sok %d - ", ok ? "" : "not ", ++d->n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!ok)
		d->failed++;
}

/* --- the hand-made streams ------------------------------------------- */

struct hand {
	const char *name;
	void (*build)(struct bytes *s);
	const char *expect; /* NULL: agree; else how they differ (prefix) */
};

static void
charge_params(struct bytes *p)
{
	spair(p, "REQUEST_METHOD", "POST");
	spair(p, "SCRIPT_NAME", "/charge");
	spair(p, "CONTENT_TYPE", "application/json");
	spair(p, "CONTENT_LENGTH", "27");
	spair(p, "HTTP_IDEMPOTENCY_KEY",
	    "3f1c9a7e-1b2d-4c5e-8f90-a1b2c3d4e5f6");
	spair(p, "HTTP_AUTHORIZATION", "Bearer sk_test_123");
}

static void
h_minimal(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_charge(struct bytes *s)
{
	struct bytes p = { 0 };

	begin(s, 1, FCGI_RESPONDER, FCGI_KEEP_CONN);
	charge_params(&p);
	params_records(s, 1, &p, 50, 6);
	rec(s, FCGI_STDIN, 1, "{\"amount\":1250,\"currency\":\"E", 27, 5);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
	bytes_free(&p);
}

static void
h_params_bytewise(struct bytes *s)
{
	struct bytes p = { 0 };

	begin(s, 2, FCGI_RESPONDER, 0);
	charge_params(&p);
	params_records(s, 2, &p, 1, 0);
	stdin_records(s, 2, 10, 3, 1, 1);
	bytes_free(&p);
}

static void
h_long(struct bytes *s)
{
	struct bytes p = { 0 }, n = { 0 }, v = { 0 };
	size_t i;

	for (i = 0; i < 200; i++)
		put(&n, "N", 1);
	for (i = 0; i < 5000; i++)
		put(&v, &"abcdefghijklmnopqrstuvwxyz"[i % 26], 1);
	begin(s, 300, FCGI_RESPONDER, 0);
	pair(&p, n.p, n.n, v.p, v.n);
	spair(&p, "SHORT", "x");
	nv_len(&p, 4, 1); /* a short length in 4 bytes */
	nv_len(&p, 3, 1);
	put(&p, "FOURabc", 7);
	params_records(s, 300, &p, 1000, 0);
	stdin_records(s, 300, 100, 100, 0, 1);
	bytes_free(&p);
	bytes_free(&n);
	bytes_free(&v);
}

static void
h_nul_value(struct bytes *s)
{
	struct bytes p = { 0 };

	begin(s, 1, FCGI_RESPONDER, 0);
	spair(&p, "A", "b");
	pair(&p, "HTTP_IDEMPOTENCY_KEY", 20, "ab\0cd", 5);
	params_records(s, 1, &p, 100, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
	bytes_free(&p);
}

static void
h_nul_name(struct bytes *s)
{
	struct bytes p = { 0 };

	begin(s, 1, FCGI_RESPONDER, 0);
	pair(&p, "X\0Y", 3, "v", 1);
	params_records(s, 1, &p, 100, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
	bytes_free(&p);
}

static void
h_big_body(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	stdin_records(s, 1, 200000, 65535, 255, 1);
}

static void
h_body_bytewise(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	stdin_records(s, 1, 300, 1, 7, 1);
}

static void
h_management(struct bytes *s)
{
	struct bytes p = { 0 }, q = { 0 };

	spair(&q, FCGI_MAX_CONNS, "");
	spair(&q, FCGI_MPXS_CONNS, "");
	spair(&q, "OTHER", "");
	rec(s, FCGI_GET_VALUES, 0, q.p, q.n, 3);
	rec(s, 0x42, 0, NULL, 0, 0);
	begin(s, 5, FCGI_RESPONDER, 0);
	charge_params(&p);
	rec(s, FCGI_PARAMS, 5, p.p, 40, 0);
	rec(s, FCGI_GET_VALUES, 0, q.p, q.n, 0);
	rec(s, FCGI_PARAMS, 5, p.p + 40, p.n - 40, 0);
	rec(s, FCGI_PARAMS, 5, NULL, 0, 0);
	rec(s, 0x63, 0, NULL, 0, 0);
	rec(s, FCGI_STDIN, 5, "body", 4, 0);
	rec(s, FCGI_STDIN, 5, NULL, 0, 0);
	bytes_free(&p);
	bytes_free(&q);
}

static void
h_unknown_content(struct bytes *s)
{
	rec(s, 0x42, 0, "xyz", 3, 5);
	h_minimal(s);
}

static void
h_other_empty(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_ABORT_REQUEST, 3, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, "body", 4, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_params_end_padded(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB",
	    4, 4);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 8);
	rec(s, FCGI_STDIN, 1, "x", 1, 7);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_other_ids(struct bytes *s)
{
	rec(s, FCGI_PARAMS, 9,
	    "\x01\x01"
	    "ab",
	    4, 0);
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 9,
	    "\x01\x01"
	    "ab",
	    4, 0);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB",
	    4, 0);
	rec(s, FCGI_STDIN, 9, "zz", 2, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 2, "zz", 2, 0);
	rec(s, FCGI_ABORT_REQUEST, 3, "x", 1, 7);
	rec(s, FCGI_STDIN, 1, "body", 4, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_mpx(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, FCGI_KEEP_CONN);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB",
	    4, 0);
	begin(s, 2, FCGI_RESPONDER, FCGI_KEEP_CONN);
	rec(s, FCGI_PARAMS, 2,
	    "\x01\x01"
	    "ab",
	    4, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, "one", 3, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_bad_version_first(struct bytes *s)
{
	h_minimal(s);
	s->p[0] = 2;
}

static void
h_bad_version_params(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB",
	    4, 0);
	put(s, "\x00\x04\x00\x01\x00\x00\x00\x00", 8);
}

static void
h_bad_version_body(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, "abc", 3, 0);
	put(s, "\x03\x05\x00\x01\x00\x01\x00\x00x", 9);
}

static void
h_truncated_header(struct bytes *s)
{
	h_minimal(s);
	s->n -= 3;
}

static void
h_truncated_params(struct bytes *s)
{
	struct bytes p = { 0 };

	begin(s, 1, FCGI_RESPONDER, 0);
	charge_params(&p);
	rec(s, FCGI_PARAMS, 1, p.p, p.n, 0);
	s->n -= 10;
	bytes_free(&p);
}

static void
h_truncated_body(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, "complete", 8, 0);
	rec(s, FCGI_STDIN, 1, "cut short", 9, 0);
	s->n -= 4;
}

static void
h_no_stdin_end(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	stdin_records(s, 1, 5000, 1000, 0, 0);
}

static void
h_begin_short(struct bytes *s)
{
	rec(s, FCGI_BEGIN_REQUEST, 1, "\0\1\0\0\0\0\0", 7, 1);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_stdin_early(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB",
	    4, 0);
	rec(s, FCGI_STDIN, 1, "x", 1, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
}

static void
h_abort_params(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB",
	    4, 0);
	rec(s, FCGI_ABORT_REQUEST, 1, NULL, 0, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_abort_body(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, "part", 4, 4);
	rec(s, FCGI_ABORT_REQUEST, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_overrun(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x05"
	    "Aabcd",
	    7, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_long_length_cut(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB\x80\x00",
	    6, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_stdout(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDOUT, 1, "out", 3, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_get_values_bad(struct bytes *s)
{
	rec(s, FCGI_GET_VALUES, 0,
	    "\x05\x00"
	    "AB",
	    4, 0);
	h_minimal(s);
}

static void
role_request(struct bytes *s, int role)
{
	begin(s, 1, role, 0);
	rec(s, FCGI_PARAMS, 1,
	    "\x01\x01"
	    "AB",
	    4, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, "x", 1, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_authorizer(struct bytes *s)
{
	role_request(s, FCGI_AUTHORIZER);
}

static void
h_role_unknown(struct bytes *s)
{
	role_request(s, 99);
}

static void
h_pipelined(struct bytes *s)
{
	unsigned id;

	for (id = 1; id <= 3; id++) {
		begin(s, id, FCGI_RESPONDER, FCGI_KEEP_CONN);
		rec(s, FCGI_PARAMS, id,
		    "\x01\x01"
		    "Ax",
		    4, 4);
		rec(s, FCGI_PARAMS, id, NULL, 0, 0);
		rec(s, FCGI_STDIN, id, "body", 4, 4);
		rec(s, FCGI_STDIN, id, NULL, 0, 0);
	}
}

static void
h_begin_id0(struct bytes *s)
{
	begin(s, 0, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 0, NULL, 0, 0);
	rec(s, FCGI_STDIN, 0, NULL, 0, 0);
}

static void
h_data(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, "ab", 2, 0);
	rec(s, FCGI_DATA, 1, "data", 4, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_type12(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, 12, 1, "twelve", 6, 2);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_begin_twice(struct bytes *s)
{
	begin(s, 1, FCGI_RESPONDER, 0);
	begin(s, 1, FCGI_RESPONDER, 0);
	rec(s, FCGI_PARAMS, 1, NULL, 0, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
}

static void
h_params_large(struct bytes *s)
{
	struct bytes p = { 0 }, v = { 0 };
	int i;

	for (i = 0; i < 7000; i++)
		put(&v, "v", 1);
	for (i = 0; i < 10; i++)
		pair(&p, "BIG", 3, v.p, v.n);
	begin(s, 1, FCGI_RESPONDER, 0);
	params_records(s, 1, &p, 65535, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
	bytes_free(&p);
	bytes_free(&v);
}

static void
h_params_many(struct bytes *s)
{
	struct bytes p = { 0 };
	int i;

	for (i = 0; i <= FCGI_PARAMS_COUNT_MAX; i++)
		spair(&p, "K", "v");
	begin(s, 1, FCGI_RESPONDER, 0);
	params_records(s, 1, &p, 65535, 0);
	rec(s, FCGI_STDIN, 1, NULL, 0, 0);
	bytes_free(&p);
}

static const struct hand hands[] = {
	{ "minimal request", h_minimal, NULL },
	{ "a charge request, params in 50-byte records", h_charge, NULL },
	{ "params in 1-byte records", h_params_bytewise, NULL },
	{ "4-byte lengths (name 200, value 5000; a short one)", h_long, NULL },
	{ "NUL in a value", h_nul_value, NULL },
	{ "NUL in a name", h_nul_name, NULL },
	{ "200000-byte body in the largest records, padding 255", h_big_body,
	    NULL },
	{ "body in 1-byte records", h_body_bytewise, NULL },
	{ "GET_VALUES and unknown management records around a request",
	    h_management, NULL },
	{ "records of other ids ignored", h_other_ids, NULL },
	{ "a second BEGIN_REQUEST for another id (CANT_MPX_CONN)", h_mpx,
	    NULL },
	{ "bad version first", h_bad_version_first, NULL },
	{ "bad version in the params", h_bad_version_params, NULL },
	{ "bad version in the body", h_bad_version_body, NULL },
	{ "truncated header", h_truncated_header, NULL },
	{ "truncated params", h_truncated_params, NULL },
	{ "truncated STDIN record", h_truncated_body, NULL },
	{ "EOF without the empty STDIN", h_no_stdin_end, NULL },
	{ "BEGIN_REQUEST of 7 bytes", h_begin_short, NULL },
	{ "STDIN before the params ended", h_stdin_early, NULL },
	{ "ABORT_REQUEST in the params", h_abort_params, NULL },
	{ "ABORT_REQUEST in the body", h_abort_body, NULL },
	{ "a pair running past the end", h_overrun, NULL },
	{ "a 4-byte length cut", h_long_length_cut, NULL },
	{ "STDOUT from the web server", h_stdout, NULL },
	{ "GET_VALUES with a bad pair", h_get_values_bad, NULL },
	{ "authorizer role", h_authorizer, NULL },
	{ "unknown role 99", h_role_unknown, NULL },
	{ "three pipelined requests on a kept connection", h_pipelined, NULL },
	{ "BEGIN_REQUEST with id 0", h_begin_id0, NULL },
	/* known differences: the codec's documented choices */
	{ "FCGI_DATA in the body (codec ignores it, libfcgi fails the body)",
	    h_data, "served: libfcgi 0, codec 1" },
	{ "type 12 record (codec ignores it, libfcgi fails the request)",
	    h_type12, "served: libfcgi 0, codec 1" },
	{ "the same BEGIN_REQUEST twice (codec: error; libfcgi answers "
	  "CANT_MPX_CONN to itself and goes on)",
	    h_begin_twice, "served: libfcgi 1, codec 0" },
	{ "params over FCGI_PARAMS_MAX (codec refuses, libfcgi has no limit)",
	    h_params_large, "served: libfcgi 1, codec 0" },
	{ "params over FCGI_PARAMS_COUNT_MAX (codec refuses, libfcgi has no "
	  "limit)",
	    h_params_many, "served: libfcgi 1, codec 0" },
	/* libfcgi 2.4.2 faults the codec does not share */
	{ "unknown management type with content (libfcgi reads the content "
	  "as a stream and drops the connection)",
	    h_unknown_content, "served: libfcgi 0, codec 1" },
	{ "an empty record of another id (libfcgi then skips the content of "
	  "the next record: the body is lost)",
	    h_other_empty, "body: libfcgi 0 bytes, codec 4" },
	{ "padding on the empty PARAMS record (libfcgi drops it unread and "
	  "reads the padding as a header)",
	    h_params_end_padded, "served: libfcgi 0, codec 1" },
};

/* --- generated streams ----------------------------------------------- */

static void
rand_text(uint32_t *g, struct bytes *b, size_t n, const char *alphabet)
{
	size_t i, a = strlen(alphabet);

	for (i = 0; i < n; i++)
		put(b, &alphabet[below(g, a)], 1);
}

static size_t
rand_len(uint32_t *g)
{
	switch (below(g, 10)) {
	case 0: return 0;
	case 1: return 128 + below(g, 3000); /* a 4-byte length */
	case 2: return 120 + below(g, 16);   /* around the edge */
	default: return 1 + below(g, 60);
	}
}

/* Records of other ids and management records, now and then. */
static void
noise(uint32_t *g, struct bytes *s, unsigned id)
{
	unsigned other = id == 0xffff ? 1 : id + 1;

	switch (below(g, 12)) {
	case 0:
		rec(s, FCGI_PARAMS, other,
		    "\x01\x01"
		    "zz",
		    4, 0);
		break;
	case 1: rec(s, FCGI_STDIN, other, "zz", 2, below(g, 8)); break;
	case 2:
		rec(s, FCGI_GET_VALUES, 0,
		    "\x0e\x00" FCGI_MAX_CONNS "\x0f\x00" FCGI_MPXS_CONNS, 33,
		    7);
		break;
	case 3: rec(s, 0x20 + (int)below(g, 50), 0, NULL, 0, 0); break;
	case 4: begin(s, other, FCGI_RESPONDER, 0); break;
	default: break;
	}
}

/*
 * One generated stream: random params (some long, some with a NUL) split
 * into records at random points, records of other ids and management
 * records between, a body of varied size in random records; some streams
 * then corrupted (cut, a bad version, another type or id, a content
 * length off by a few bytes in the body).
 */
static void
generate(uint32_t *g, struct bytes *s)
{
	static const char upper[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_";
	static const char text[] = "abcdefghijklmnopqrstuvwxyz0123456789 "
	                           "-_.:/=;,{}\"'!?ABCDEFGHIJKLMNOPQRSTUVWXYZ";
	struct bytes p = { 0 }, name = { 0 }, value = { 0 };
	size_t i, np = below(g, 20), off, k, body, max, nrec;
	size_t starts[256];
	unsigned id = 1 + (unsigned)below(g, 0xffff);
	unsigned char *h;

	for (i = 0; i < np; i++) {
		name.n = value.n = 0;
		rand_text(g, &name, 1 + (below(g, 8) == 0 ? 130 : below(g, 30)),
		    upper);
		rand_text(g, &value, rand_len(g), text);
		if (below(g, 25) == 0 && value.n > 0)
			value.p[below(g, value.n)] = '\0';
		pair(&p, name.p, name.n, value.p, value.n);
	}
	nrec = 0;
	begin(s, id, FCGI_RESPONDER, below(g, 2) ? FCGI_KEEP_CONN : 0);
	starts[nrec++] = 0;
	for (off = 0; off < p.n; off += k) {
		noise(g, s, id);
		max = below(g, 3) == 0 ? 1 + below(g, 8) : 1 + below(g, 2000);
		k = p.n - off < max ? p.n - off : max;
		if (nrec < 256)
			starts[nrec++] = s->n;
		rec(s, FCGI_PARAMS, id, p.p + off, k,
		    below(g, 4) ? 0 : below(g, 256));
	}
	rec(s, FCGI_PARAMS, id, NULL, 0, 0);
	switch (below(g, 6)) {
	case 0: body = 0; break;
	case 1: body = 1 + below(g, 10); break;
	case 2: body = 65535 + below(g, 3); break;
	case 3: body = below(g, 200000); break;
	default: body = below(g, 3000); break;
	}
	for (off = 0; off < body; off += k) {
		if (below(g, 4) == 0)
			noise(g, s, id);
		max = below(g, 2) ? 65535 : 1 + below(g, 5000);
		k = body - off < max ? body - off : max;
		if (nrec < 256)
			starts[nrec++] = s->n;
		stdin_records(s, id, k, k, below(g, 3) ? 0 : below(g, 256), 0);
	}
	if (below(g, 10) != 0)
		rec(s, FCGI_STDIN, id, NULL, 0, 0);
	/* corruptions, one in three */
	if (below(g, 3) == 0) {
		h = (unsigned char *)s->p + starts[below(g, nrec)];
		switch (below(g, 5)) {
		case 0: s->n = below(g, s->n); break;
		case 1: h[0] = (unsigned char)(2 + below(g, 250)); break;
		case 2: {
			static const int types[] = { FCGI_STDIN, FCGI_PARAMS,
				FCGI_ABORT_REQUEST, FCGI_STDOUT,
				FCGI_END_REQUEST };

			h[1] = (unsigned char)types[below(g, 5)];
			break;
		}
		case 3: h[3] ^= (unsigned char)(1 + below(g, 255)); break;
		default:
			/* a body record's length off: printable bytes then
			 * meet the header, never version 1 */
			if (h[1] == FCGI_STDIN)
				h[5] = (unsigned char)(h[5] + 1 + below(g, 3));
			else
				s->n = below(g, s->n);
			break;
		}
	}
	bytes_free(&p);
	bytes_free(&name);
	bytes_free(&value);
}

/* --- main ------------------------------------------------------------ */

static int
listen_unix(const char *path)
{
	struct sockaddr_un sa;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, DIFF_BACKLOG) != 0) {
		perror("fcgi_diff: listen");
		exit(2);
	}
	return fd;
}

int
main(int argc, char **argv)
{
	char dir[] = "/tmp/fcgi-diff.XXXXXX", path[128], why[DIFF_WHY];
	size_t ncases = DIFF_GENERATED, i, j;
	uint32_t seed = DIFF_SEED, g;
	struct bytes s = { 0 };
	struct diff d;
	int lfd, nul, refused, partial, bad, nuls = 0, differ;
	char first_why[DIFF_WHY];

	if (argc > 1)
		ncases = strtoul(argv[1], NULL, 10);
	if (argc > 2)
		seed = (uint32_t)strtoul(argv[2], NULL, 10);
	if (seed == 0)
		seed = 1;
	alarm(DIFF_ALARM_S);
	signal(SIGPIPE, SIG_IGN);
	if (mkdtemp(dir) == NULL) {
		perror("fcgi_diff: mkdtemp");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/sock", dir);
	lfd = listen_unix(path);
	memset(&d, 0, sizeof(d));
	d.path = path;
	if (FCGX_Init() != 0 || FCGX_InitRequest(&d.req, lfd, 0) != 0) {
		fprintf(stderr, "fcgi_diff: FCGX_Init failed\n");
		return 2;
	}
	for (i = 0; i < sizeof(hands) / sizeof(hands[0]); i++) {
		s.n = 0;
		hands[i].build(&s);
		nul = refused = partial = 0;
		differ = diff_one(&d, &s, (uint32_t)(i + 1), hands[i].expect,
		    &nul, &refused, &partial, why, sizeof(why));
		nuls += nul;
		if (differ)
			tap(&d, 0, "%s: %s", hands[i].name,
			    why[0] ? why : "no difference where one is known");
		else if (hands[i].expect != NULL)
			tap(&d, 1, "%s: known difference (%s)", hands[i].name,
			    why);
		else if (partial > 0)
			tap(&d, 1,
			    "%s: both fail (libfcgi hands out the params read "
			    "up to the error, then fails the body; the codec "
			    "refuses)",
			    hands[i].name);
		else if (nul > 0)
			tap(&d, 1,
			    "%s: same, but libfcgi ends %d param(s) at "
			    "the NUL (the codec keeps the length)",
			    hands[i].name, nul);
		else
			tap(&d, 1, "%s", hands[i].name);
	}
	g = seed;
	for (i = 0; i < ncases; i += DIFF_BATCH) {
		refused = bad = nul = partial = 0;
		first_why[0] = '\0';
		for (j = i; j < ncases && j < i + DIFF_BATCH; j++) {
			s.n = 0;
			generate(&g, &s);
			if (diff_one(&d, &s, g, NULL, &nul, &refused, &partial,
			        why, sizeof(why))) {
				if (bad++ == 0)
					snprintf(first_why, sizeof(first_why),
					    "stream %zu: %s", j, why);
			}
		}
		nuls += nul;
		tap(&d, bad == 0,
		    "generated streams %zu-%zu (seed %u): %zu agree (%d both "
		    "refuse, %d fail after libfcgi's partial params, %d params "
		    "ended at a NUL by libfcgi)%s%s",
		    i, j - 1, seed, j - i - (size_t)bad, refused, partial, nul,
		    bad ? "; " : "", first_why);
	}
	printf("# %d params with a NUL: libfcgi's string ends at it, the "
	       "codec keeps the whole length\n",
	    nuls);
	printf("1..%d\n", d.n);
	bytes_free(&s);
	close(lfd);
	unlink(path);
	rmdir(dir);
	return d.failed ? 1 : 0;
}
