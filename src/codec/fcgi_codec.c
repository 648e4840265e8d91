/*
 * fcgi_codec.c - the FastCGI 1.0 protocol as a pure codec: the reader takes
 * bytes and gives events, the writer frames records into a caller's buffer.
 * No I/O, no FCGX_* calls. See fcgi_codec.h for the contract and for which
 * records are ignored and which are protocol errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fcgi_codec.h"
#include "util.h"

#define FCGI_READER_BUF_MIN 2048 /* bytes: first allocation of the buffer */
#define FCGI_PARAMS_BUF_MIN 1024 /* bytes: first allocation for PARAMS */
#define FCGI_PV_MIN 32 /* pairs: first allocation (a web server sends ~30) */
#define FCGI_BEGIN_BODY_LEN 8      /* bytes of FCGI_BeginRequestBody */
#define FCGI_PAD_ALIGN 8           /* bytes: records are padded to this */
#define FCGI_NV_LONG 0x80          /* high bit: a 4-byte length follows */
#define FCGI_NV_HIGH_MASK 0x7f     /* the length bits of the first byte */
#define FCGI_NV_SHORT_MAX 127      /* bytes: the largest 1-byte length */
#define FCGI_NV_LEN_MAX 0x7fffffff /* bytes: a 4-byte length has 31 bits */
#define FCGI_ERRSTR_LEN 128        /* bytes of the error text */
#define FCGI_DECIMAL_LEN 24        /* bytes: an unsigned as decimal text */

/* Where the active request stands. */
enum fcgi_phase {
	PHASE_IDLE,   /* no request: the next BEGIN_REQUEST starts one */
	PHASE_PARAMS, /* BEGIN seen: PARAMS records accumulate */
	PHASE_STDIN,  /* the params ended: STDIN records follow */
	PHASE_DONE    /* the empty STDIN came: the body ended */
};

struct fcgi_reader {
	char *buf;    /* received bytes; [pos, len) is unread */
	size_t cap;   /* bytes allocated at buf, <= FCGI_READER_MAX */
	size_t pos;   /* first unread byte */
	size_t len;   /* end of the received bytes */
	char *params; /* PARAMS content of the active request */
	size_t params_cap;
	size_t params_len;
	struct fcgi_param *pv; /* decoded pairs, grown up to the bound */
	size_t pv_cap;
	enum fcgi_phase phase;
	unsigned active_id; /* meaningful unless phase == PHASE_IDLE */
	int answered;       /* END_REQUEST sent for the active request */
	int failed;
	char errstr[FCGI_ERRSTR_LEN];
};

struct fcgi_reader *
fcgi_reader_new(void)
{
	return calloc(1, sizeof(struct fcgi_reader));
}

void
fcgi_reader_free(struct fcgi_reader *r)
{
	if (r == NULL)
		return;
	free(r->buf);
	free(r->params);
	free(r->pv);
	free(r);
}

size_t
fcgi_reader_room(const struct fcgi_reader *r)
{
	if (r->failed)
		return 0;
	return FCGI_READER_MAX - (r->len - r->pos);
}

int
fcgi_reader_feed(struct fcgi_reader *r, const char *buf, size_t len)
{
	size_t unread = r->len - r->pos;

	if (len > fcgi_reader_room(r))
		return -1;
	if (len == 0)
		return 0;
	/* compact: event pointers into buf end with this call anyway */
	if (r->pos > 0) {
		memmove(r->buf, r->buf + r->pos, unread);
		r->pos = 0;
		r->len = unread;
	}
	if (util_grow(&r->buf, &r->cap, unread + len, FCGI_READER_BUF_MIN,
	        FCGI_READER_MAX) != 0)
		return -1;
	memcpy(r->buf + r->len, buf, len);
	r->len += len;
	return 0;
}

const char *
fcgi_reader_error(const struct fcgi_reader *r)
{
	return r->errstr;
}

void
fcgi_reader_request_done(struct fcgi_reader *r)
{
	r->phase = PHASE_IDLE;
	r->active_id = 0;
	r->params_len = 0;
	r->answered = 0;
}

void
fcgi_reader_answered(struct fcgi_reader *r)
{
	r->answered = 1;
}

/* Marks the reader failed with errstr (sticky) and fills ev. */
static void
reader_fail(struct fcgi_reader *r, struct fcgi_event *ev, const char *errstr)
{
	if (!r->failed) {
		r->failed = 1;
		snprintf(r->errstr, sizeof(r->errstr), "%s", errstr);
	}
	ev->type = FCGI_EV_ERROR;
}

/*
 * One name or value length at *p (1 byte, or 4 with the high bit set) of
 * the n bytes left; advances *p. -1 when the length runs past the end.
 */
static int
nv_length(const unsigned char **p, size_t *n, size_t *out)
{
	const unsigned char *b = *p;

	if (*n < 1)
		return -1;
	if ((b[0] & FCGI_NV_LONG) == 0) {
		*out = b[0];
		*p += 1;
		*n -= 1;
		return 0;
	}
	if (*n < 4)
		return -1;
	*out = ((size_t)(b[0] & FCGI_NV_HIGH_MASK) << 24) |
	    ((size_t)b[1] << 16) | ((size_t)b[2] << 8) | (size_t)b[3];
	*p += 4;
	*n -= 4;
	return 0;
}

/*
 * Room for more pairs in r->pv: a connection holds as many as its largest
 * request had (about 30), not FCGI_PARAMS_COUNT_MAX. 0 or -1 (ENOMEM).
 */
static int
pv_grow(struct fcgi_reader *r)
{
	size_t cap = r->pv_cap ? 2 * r->pv_cap : FCGI_PV_MIN;
	struct fcgi_param *pv;

	if (cap > FCGI_PARAMS_COUNT_MAX)
		cap = FCGI_PARAMS_COUNT_MAX;
	if ((pv = realloc(r->pv, cap * sizeof(*pv))) == NULL)
		return -1;
	r->pv = pv;
	r->pv_cap = cap;
	return 0;
}

/*
 * Decodes the name-value pairs of the n bytes at buf into r->pv. The number
 * of pairs, or -1 with *errstr when a pair runs past the end or there are
 * more than FCGI_PARAMS_COUNT_MAX.
 */
static long
nv_decode(struct fcgi_reader *r, const char *buf, size_t n, const char **errstr)
{
	const unsigned char *p = (const unsigned char *)buf;
	size_t nl, vl, count = 0;

	while (n > 0) {
		if (nv_length(&p, &n, &nl) != 0 ||
		    nv_length(&p, &n, &vl) != 0 || nl > n || vl > n - nl) {
			*errstr = "name-value pair runs past the end";
			return -1;
		}
		if (count == FCGI_PARAMS_COUNT_MAX) {
			*errstr = "too many params";
			return -1;
		}
		if (count == r->pv_cap && pv_grow(r) != 0) {
			*errstr = "out of memory";
			return -1;
		}
		r->pv[count].name = (const char *)p;
		r->pv[count].namelen = nl;
		r->pv[count].value = (const char *)p + nl;
		r->pv[count].valuelen = vl;
		count++;
		p += nl + vl;
		n -= nl + vl;
	}
	return (long)count;
}

/* Appends n bytes of PARAMS content; -1 with *errstr past the bound. */
static int
params_append(struct fcgi_reader *r, const char *buf, size_t n,
    const char **errstr)
{
	if (n > FCGI_PARAMS_MAX - r->params_len) {
		*errstr = "params too large";
		return -1;
	}
	if (util_grow(&r->params, &r->params_cap, r->params_len + n,
	        FCGI_PARAMS_BUF_MIN, FCGI_PARAMS_MAX) != 0) {
		*errstr = "out of memory";
		return -1;
	}
	memcpy(r->params + r->params_len, buf, n);
	r->params_len += n;
	return 0;
}

/* A management record (request id 0): GET_VALUES or UNKNOWN. */
static void
on_management(struct fcgi_reader *r, struct fcgi_event *ev, int type,
    const char *content, size_t clen)
{
	const char *errstr = NULL;
	long n;

	if (type != FCGI_GET_VALUES) {
		ev->type = FCGI_EV_UNKNOWN;
		ev->unknown_type = (unsigned char)type;
		return;
	}
	if ((n = nv_decode(r, content, clen, &errstr)) < 0) {
		reader_fail(r, ev, errstr);
		return;
	}
	ev->type = FCGI_EV_GET_VALUES;
	ev->params = r->pv;
	ev->nparams = (size_t)n;
}

static void
on_begin(struct fcgi_reader *r, struct fcgi_event *ev, unsigned id,
    const unsigned char *body, size_t clen)
{
	if (clen != FCGI_BEGIN_BODY_LEN) {
		reader_fail(r, ev, "bad BEGIN_REQUEST length");
		return;
	}
	/* the web server gave up the rest of an answered request's input */
	if (r->phase != PHASE_IDLE && r->answered)
		fcgi_reader_request_done(r);
	if (r->phase != PHASE_IDLE && id == r->active_id) {
		reader_fail(r, ev, "BEGIN_REQUEST for the active request");
		return;
	}
	ev->request_id = id;
	if (r->phase != PHASE_IDLE) {
		ev->type = FCGI_EV_REFUSE_MPX;
		return;
	}
	r->phase = PHASE_PARAMS;
	r->active_id = id;
	r->params_len = 0;
	ev->type = FCGI_EV_BEGIN;
	ev->role = (body[0] << 8) | body[1];
	ev->keep_conn = (body[2] & FCGI_KEEP_CONN) != 0;
}

/*
 * A record of the active request other than BEGIN_REQUEST. Leaves ev->type
 * FCGI_EV_NONE when the record is ignored.
 */
static void
on_stream(struct fcgi_reader *r, struct fcgi_event *ev, int type,
    const char *content, size_t clen)
{
	const char *errstr = NULL;
	long n;

	switch (type) {
	case FCGI_ABORT_REQUEST: ev->type = FCGI_EV_ABORT; return;
	case FCGI_DATA: return; /* the responder role has no data stream */
	case FCGI_PARAMS:
		if (r->phase != PHASE_PARAMS) {
			reader_fail(r, ev, "PARAMS after the params ended");
			return;
		}
		if (clen > 0) {
			if (params_append(r, content, clen, &errstr) != 0)
				reader_fail(r, ev, errstr);
			return;
		}
		if ((n = nv_decode(r, r->params, r->params_len, &errstr)) < 0) {
			reader_fail(r, ev, errstr);
			return;
		}
		r->phase = PHASE_STDIN;
		ev->type = FCGI_EV_PARAMS;
		ev->params = r->pv;
		ev->nparams = (size_t)n;
		return;
	case FCGI_STDIN:
		if (r->phase == PHASE_PARAMS) {
			reader_fail(r, ev, "STDIN before the params ended");
			return;
		}
		if (r->phase == PHASE_DONE) {
			reader_fail(r, ev, "STDIN after the body ended");
			return;
		}
		if (clen == 0) {
			r->phase = PHASE_DONE;
			ev->type = FCGI_EV_STDIN_END;
			return;
		}
		ev->type = FCGI_EV_STDIN;
		ev->data = content;
		ev->len = clen;
		return;
	default:
		if (type >= 1 && type <= FCGI_MAXTYPE)
			reader_fail(r, ev, "unexpected record type");
		return; /* a type this version does not define: ignored */
	}
}

void
fcgi_reader_next(struct fcgi_reader *r, struct fcgi_event *ev)
{
	const unsigned char *h;
	const char *content;
	size_t clen, total;
	unsigned id;
	int type;

	memset(ev, 0, sizeof(*ev));
	while (!r->failed && ev->type == FCGI_EV_NONE) {
		if (r->len == r->pos)
			return;
		h = (const unsigned char *)r->buf + r->pos;
		/* the version is known from the first byte on */
		if (h[0] != FCGI_VERSION_1) {
			reader_fail(r, ev, "bad version");
			break;
		}
		if (r->len - r->pos < FCGI_HEADER_LEN)
			return;
		type = h[1];
		id = ((unsigned)h[2] << 8) | h[3];
		clen = ((size_t)h[4] << 8) | h[5];
		total = FCGI_HEADER_LEN + clen + h[6];
		if (r->len - r->pos < total)
			return;
		content = r->buf + r->pos + FCGI_HEADER_LEN;
		r->pos += total;
		if (id == FCGI_NULL_REQUEST_ID)
			on_management(r, ev, type, content, clen);
		else if (type == FCGI_BEGIN_REQUEST)
			on_begin(r, ev, id, (const unsigned char *)content,
			    clen);
		else if (r->phase != PHASE_IDLE && id == r->active_id) {
			ev->request_id = id;
			on_stream(r, ev, type, content, clen);
		}
		/* else: a record of a request that is not active, ignored */
	}
	if (r->failed) {
		memset(ev, 0, sizeof(*ev));
		ev->type = FCGI_EV_ERROR;
	}
}

/* Writes a record header; returns FCGI_HEADER_LEN. */
static size_t
put_header(char *out, int type, unsigned id, size_t clen, size_t plen)
{
	unsigned char *h = (unsigned char *)out;

	h[0] = FCGI_VERSION_1;
	h[1] = (unsigned char)type;
	h[2] = (unsigned char)((id >> 8) & 0xff);
	h[3] = (unsigned char)(id & 0xff);
	h[4] = (unsigned char)((clen >> 8) & 0xff);
	h[5] = (unsigned char)(clen & 0xff);
	h[6] = (unsigned char)plen;
	h[7] = 0;
	return FCGI_HEADER_LEN;
}

/* Padding that brings n content bytes to a multiple of FCGI_PAD_ALIGN. */
static size_t
pad_of(size_t n)
{
	return (FCGI_PAD_ALIGN - n % FCGI_PAD_ALIGN) % FCGI_PAD_ALIGN;
}

size_t
fcgi_stream_size(size_t n)
{
	size_t full = n / FCGI_STREAM_CHUNK, rest = n % FCGI_STREAM_CHUNK;
	size_t size = full * (FCGI_HEADER_LEN + FCGI_STREAM_CHUNK);

	if (rest > 0 || n == 0)
		size += FCGI_HEADER_LEN + rest + pad_of(rest);
	return size;
}

size_t
fcgi_write_stream(char *out, int type, unsigned request_id, const char *data,
    size_t n)
{
	size_t off = 0, chunk, pad;

	if (n == 0)
		return put_header(out, type, request_id, 0, 0);
	while (n > 0) {
		chunk = n < FCGI_STREAM_CHUNK ? n : FCGI_STREAM_CHUNK;
		pad = pad_of(chunk);
		off += put_header(out + off, type, request_id, chunk, pad);
		memcpy(out + off, data, chunk);
		memset(out + off + chunk, 0, pad);
		off += chunk + pad;
		data += chunk;
		n -= chunk;
	}
	return off;
}

size_t
fcgi_write_end(char *out, unsigned request_id, unsigned app_status,
    int protocol_status)
{
	unsigned char *b = (unsigned char *)out + FCGI_HEADER_LEN;

	put_header(out, FCGI_END_REQUEST, request_id,
	    sizeof(FCGI_EndRequestBody), 0);
	b[0] = (unsigned char)((app_status >> 24) & 0xff);
	b[1] = (unsigned char)((app_status >> 16) & 0xff);
	b[2] = (unsigned char)((app_status >> 8) & 0xff);
	b[3] = (unsigned char)(app_status & 0xff);
	b[4] = (unsigned char)protocol_status;
	b[5] = b[6] = b[7] = 0;
	return FCGI_END_REQUEST_SIZE;
}

size_t
fcgi_write_unknown_type(char *out, unsigned char type)
{
	unsigned char *b = (unsigned char *)out + FCGI_HEADER_LEN;

	put_header(out, FCGI_UNKNOWN_TYPE, FCGI_NULL_REQUEST_ID,
	    sizeof(FCGI_UnknownTypeBody), 0);
	b[0] = type;
	memset(b + 1, 0, sizeof(FCGI_UnknownTypeBody) - 1);
	return FCGI_HEADER_LEN + sizeof(FCGI_UnknownTypeBody);
}

/* Writes one length (1 or 4 bytes) at *off of out; -1 past outlen. */
static int
put_nv_length(char *out, size_t outlen, size_t *off, size_t n)
{
	unsigned char *b = (unsigned char *)out + *off;

	if (n <= FCGI_NV_SHORT_MAX) {
		if (outlen - *off < 1)
			return -1;
		b[0] = (unsigned char)n;
		*off += 1;
		return 0;
	}
	if (outlen - *off < 4 || n > FCGI_NV_LEN_MAX)
		return -1;
	b[0] = (unsigned char)(((n >> 24) & FCGI_NV_HIGH_MASK) | FCGI_NV_LONG);
	b[1] = (unsigned char)((n >> 16) & 0xff);
	b[2] = (unsigned char)((n >> 8) & 0xff);
	b[3] = (unsigned char)(n & 0xff);
	*off += 4;
	return 0;
}

/* Appends one name-value pair at *off of out; -1 past outlen. */
static int
put_pair(char *out, size_t outlen, size_t *off, const char *name,
    const char *value)
{
	size_t nl = strlen(name), vl = strlen(value);

	if (put_nv_length(out, outlen, off, nl) != 0 ||
	    put_nv_length(out, outlen, off, vl) != 0 || outlen - *off < nl + vl)
		return -1;
	memcpy(out + *off, name, nl);
	memcpy(out + *off + nl, value, vl);
	*off += nl + vl;
	return 0;
}

size_t
fcgi_write_values(char *out, size_t outlen, const struct fcgi_param *asked,
    size_t nasked, unsigned max_conns, unsigned max_reqs, int mpxs_conns)
{
	static const char *const known[] = { FCGI_MAX_CONNS, FCGI_MAX_REQS,
		FCGI_MPXS_CONNS };
	enum { NKNOWN = sizeof(known) / sizeof(known[0]) };
	unsigned values[NKNOWN];
	char dec[FCGI_DECIMAL_LEN];
	int answered[NKNOWN] = { 0 };
	size_t i, k, off = FCGI_HEADER_LEN, clen, pad;

	values[0] = max_conns;
	values[1] = max_reqs;
	values[2] = mpxs_conns ? 1 : 0;
	if (outlen < FCGI_HEADER_LEN)
		return 0;
	/* each known name once, in the order asked */
	for (i = 0; i < nasked; i++) {
		for (k = 0; k < NKNOWN; k++) {
			if (answered[k] ||
			    asked[i].namelen != strlen(known[k]) ||
			    memcmp(asked[i].name, known[k], asked[i].namelen) !=
			        0)
				continue;
			answered[k] = 1;
			snprintf(dec, sizeof(dec), "%u", values[k]);
			if (put_pair(out, outlen, &off, known[k], dec) != 0)
				return 0;
		}
	}
	clen = off - FCGI_HEADER_LEN;
	pad = pad_of(clen);
	if (outlen - off < pad)
		return 0;
	memset(out + off, 0, pad);
	put_header(out, FCGI_GET_VALUES_RESULT, FCGI_NULL_REQUEST_ID, clen,
	    pad);
	return off + pad;
}
