/*
 * fuzz_parsers.c - libFuzzer target over every parser that takes bytes from
 * outside: the JSON layer (against cJSON's own parser), the charge body
 * (with a canonical-form round trip), the request headers, a stored record,
 * a Redis URL, configuration text, a Redis Cluster redirection and key
 * slot, and FastCGI streams through the codec (fed in varied pieces, every
 * event checked, the writer's framing read back).
 * The target "parsers" of fuzz.c; tests/fuzz/run.sh builds and runs it.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "cluster.h"
#include "config.h"
#include "config_load.h"
#include "fcgi_codec.h"
#include "fuzz.h"
#include "headers.h"
#include "idem.h"
#include "json.h"
#include "utf8.h"
#include "redis_url.h"
#include "validate.h"

#define JSON_INT_EXACT 1e15      /* json.c's plain integers saturate here */
#define FUZZ_FCGI_CHUNK_MAX 4096 /* bytes: the largest piece fed at once */

/* 1 when json.c's tree a reads as cJSON's tree b of the same text. */
static int
same_tree(const cJSON *a, const cJSON *b)
{
	double d;

	if ((a->string == NULL) != (b->string == NULL) ||
	    (a->string != NULL && strcmp(a->string, b->string) != 0))
		return 0;
	if (cJSON_IsRaw(a)) {
		/* a number not written as a plain integer keeps its text */
		d = strtod(a->valuestring, NULL);
		return cJSON_IsNumber(b) && d == b->valuedouble;
	}
	if ((a->type & 0xff) != (b->type & 0xff))
		return 0;
	if (cJSON_IsNumber(a))
		return fabs(b->valuedouble) >= JSON_INT_EXACT
		    ? fabs(a->valuedouble) == JSON_INT_EXACT
		    : a->valuedouble == b->valuedouble &&
		        /* "-0" reads as 0 here, as -0.0 in cJSON */
		        (signbit(a->valuedouble) == signbit(b->valuedouble) ||
		            (a->valuedouble == 0 && !signbit(a->valuedouble)));
	if (cJSON_IsString(a))
		return strcmp(a->valuestring, b->valuestring) == 0;
	for (a = a->child, b = b->child; a != NULL && b != NULL;
	     a = a->next, b = b->next)
		if (!same_tree(a, b))
			return 0;
	return a == NULL && b == NULL;
}

static void
problem_field_utf8(void *ctx, const char *field, const char *message)
{
	(void)ctx;
	if (!utf8_valid(field, strlen(field)) || *message == '\0')
		abort();
}

/*
 * json_parse() accepts what cJSON's parser accepts, reads the same tree
 * and names the byte cJSON names; only its own checks come on top.
 */
static void
fuzz_json(const char *buf, size_t size)
{
	struct json_doc doc;
	enum json_status st = json_parse(buf, size, &doc);
	const char *end = NULL;
	cJSON *ref = NULL;

	if (st != JSON_EMPTY && st != JSON_TOO_DEEP && st != JSON_NOMEM)
		ref = cJSON_ParseWithLengthOpts(buf, size, &end, 0);
	switch (st) {
	case JSON_SYNTAX:
		if (ref != NULL || end != buf + doc.at)
			abort();
		break;
	case JSON_NOT_UTF8:
		if (ref != NULL || utf8_valid(buf, size))
			abort();
		break;
	case JSON_BAD_BYTE:
	case JSON_TRAILING:
		if (ref == NULL || doc.at >= size)
			abort();
		break;
	case JSON_OK:
		if (ref == NULL || !same_tree(doc.root, ref) ||
		    json_problems(&doc, problem_field_utf8, NULL) != 0)
			abort();
		break;
	default: break;
	}
	cJSON_Delete(ref);
	json_doc_free(&doc);
}

static void
fuzz_body(const char *buf, size_t size)
{
	struct charge_params p, q;
	struct validation v;
	size_t n, m;
	char *t, *t2;
	int i;

	if (validate_charge(buf, size, &p, &v) != 0) {
		if (v.n < 1 || v.n > VALIDATION_ERRORS_MAX)
			abort();
		for (i = 0; i < v.n; i++)
			if (!utf8_valid(v.errors[i].field,
			        strlen(v.errors[i].field)))
				abort();
		return;
	}
	/* the canonical form is valid input with the same canonical form */
	t = p.canonical;
	n = p.canonical_len;
	if (t == NULL || validate_charge(t, n, &q, &v) != 0)
		abort();
	t2 = q.canonical;
	m = q.canonical_len;
	if (t2 == NULL || m != n || memcmp(t, t2, n) != 0)
		abort();
	charge_params_free(&p);
	charge_params_free(&q);
}

static void
fuzz_headers(const char *s)
{
	char key[IDEM_KEY_MAX + 1], trace[TRACE_ID_HEX + 1], flags[3];
	const char *tok;
	size_t len, tl;
	size_t i;

	if (idem_key_parse(s, key, &len) == KEY_OK) {
		if (len < 1 || len > IDEM_KEY_MAX || strlen(key) != len)
			abort();
		for (i = 0; i < len; i++)
			if (key[i] < 0x21 || key[i] > 0x7e)
				abort();
	}
	(void)content_type_is_json(s);
	(void)content_length_parse(s, DEF_MAX_REQUEST_BYTES, &len);
	(void)prefer_wait_parse(s);
	(void)bearer_token(s, &tok, &tl);
	/* an accepted X-Request-Id is safe anywhere (log, header, JSON) */
	if (request_id_acceptable(s)) {
		if (strlen(s) < 1 || strlen(s) > REQUEST_ID_MAX ||
		    strspn(s,
		        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") !=
		        strlen(s))
			abort();
	}
	if (traceparent_parse(s, trace, flags) == 0 &&
	    (strlen(trace) != TRACE_ID_HEX ||
	        strspn(trace, "0123456789abcdef") != TRACE_ID_HEX ||
	        strspn(trace, "0") == TRACE_ID_HEX || strlen(flags) != 2))
		abort();
}

/* Splits the input at NUL bytes into the 8 fields of a stored record. */
static void
fuzz_record(const char *buf, size_t size)
{
	struct idem_field f[8];
	struct idem_record rec;
	char err[128];
	size_t i, start = 0, k = 0;

	for (i = 0; i <= size && k < 8; i++) {
		if (i == size || buf[i] == '\0') {
			f[k].p = (i - start == 1 && buf[start] == '~')
			    ? NULL
			    : buf + start;
			f[k].n = i - start;
			k++;
			start = i + 1;
		}
	}
	if (idem_record_decode(f, k, &rec, err, sizeof(err)) == 0)
		idem_record_free(&rec);
}

static void
fuzz_cluster(const char *buf, size_t size)
{
	struct cluster_redirect r;

	switch (cluster_redirect_parse(buf, size, &r)) {
	case CLUSTER_REDIRECT_MOVED:
	case CLUSTER_REDIRECT_ASK:
		if (r.slot >= CLUSTER_SLOTS || r.port < 1 || r.port > 65535 ||
		    strlen(r.host) > REDIS_HOST_MAX)
			abort();
		break;
	default: break;
	}
	if (cluster_keyslot(buf, size) >= CLUSTER_SLOTS)
		abort();
}

/* Reads every byte of p (ASan sees an out-of-bounds event pointer). */
static unsigned
touch(const char *p, size_t n)
{
	unsigned sum = 0;
	size_t i;

	for (i = 0; i < n; i++)
		sum += (unsigned char)p[i];
	return sum;
}

/* The invariants of one event; 1 when the reader ended (ERROR). */
static int
fcgi_check_event(struct fcgi_reader *r, const struct fcgi_event *ev,
    unsigned *sum)
{
	size_t i, total = 0;

	switch (ev->type) {
	case FCGI_EV_PARAMS:
	case FCGI_EV_GET_VALUES:
		if (ev->nparams > FCGI_PARAMS_COUNT_MAX ||
		    (ev->nparams > 0 && ev->params == NULL))
			abort();
		for (i = 0; i < ev->nparams; i++) {
			*sum +=
			    touch(ev->params[i].name, ev->params[i].namelen);
			*sum +=
			    touch(ev->params[i].value, ev->params[i].valuelen);
			total += ev->params[i].namelen + ev->params[i].valuelen;
		}
		if (total > (ev->type == FCGI_EV_PARAMS ? FCGI_PARAMS_MAX
		                                        : FCGI_MAX_LENGTH))
			abort();
		break;
	case FCGI_EV_STDIN:
		if (ev->len == 0 || ev->len > FCGI_MAX_LENGTH ||
		    ev->data == NULL)
			abort();
		*sum += touch(ev->data, ev->len);
		break;
	case FCGI_EV_BEGIN:
	case FCGI_EV_REFUSE_MPX:
	case FCGI_EV_ABORT:
		if (ev->request_id == 0 || ev->request_id > 0xffff)
			abort();
		break;
	case FCGI_EV_ERROR:
		if (*fcgi_reader_error(r) == '\0' || fcgi_reader_room(r) != 0 ||
		    fcgi_reader_feed(r, "x", 1) != -1)
			abort();
		return 1;
	default: break;
	}
	return 0;
}

/*
 * The first two bytes seed the sizes of the pieces fed; the rest is the
 * stream. Every event is checked; after FCGI_EV_NONE the reader has room
 * for more (it never stalls); an error stays.
 */
static void
fuzz_fcgi_reader(const uint8_t *data, size_t size)
{
	struct fcgi_reader *r;
	struct fcgi_event ev;
	unsigned seed, sum = 0;
	size_t off = 2, k;

	if (size < 2 || (r = fcgi_reader_new()) == NULL)
		return;
	seed = (unsigned)data[0] << 8 | data[1];
	for (;;) {
		do {
			fcgi_reader_next(r, &ev);
			if (fcgi_check_event(r, &ev, &sum))
				goto out;
			if (ev.type == FCGI_EV_STDIN_END ||
			    ev.type == FCGI_EV_ABORT || (seed & 0x10000) != 0)
				fcgi_reader_request_done(r);
		} while (ev.type != FCGI_EV_NONE);
		if (off == size)
			break;
		if (fcgi_reader_room(r) == 0)
			abort();
		seed = seed * 1103515245u + 12345u;
		k = 1 + (seed >> 8) % FUZZ_FCGI_CHUNK_MAX;
		if (k > size - off)
			k = size - off;
		if (k > fcgi_reader_room(r))
			k = fcgi_reader_room(r);
		if (fcgi_reader_feed(r, (const char *)data + off, k) != 0)
			abort();
		off += k;
	}
	fcgi_reader_next(r, &ev);
	if (ev.type != FCGI_EV_NONE && ev.type != FCGI_EV_ERROR)
		abort();
out:
	fcgi_reader_free(r);
	(void)sum;
}

/* The input framed as one request's STDIN reads back as its body. */
static void
fuzz_fcgi_writer(const char *buf, size_t size)
{
	static const unsigned char head[] = { 1, FCGI_BEGIN_REQUEST, 0, 9, 0, 8,
		0, 0, 0, FCGI_RESPONDER, 0, 0, 0, 0, 0, 0, 1, FCGI_PARAMS, 0, 9,
		0, 0, 0, 0 };
	struct fcgi_reader *r = NULL;
	struct fcgi_event ev;
	size_t n = 0, got = 0, k, framed;
	char *out = NULL;
	int ended = 0;

	framed = fcgi_stream_size(size);
	if ((out = malloc(sizeof(head) + framed + FCGI_HEADER_LEN)) == NULL ||
	    (r = fcgi_reader_new()) == NULL)
		goto out;
	memcpy(out, head, sizeof(head));
	n = sizeof(head);
	if (fcgi_write_stream(out + n, FCGI_STDIN, 9, buf, size) != framed)
		abort();
	n += framed;
	if (size > 0)
		n += fcgi_write_stream(out + n, FCGI_STDIN, 9, NULL, 0);
	for (k = 0; k < n;) {
		size_t piece =
		    n - k < fcgi_reader_room(r) ? n - k : fcgi_reader_room(r);

		if (fcgi_reader_feed(r, out + k, piece) != 0)
			abort();
		k += piece;
		for (fcgi_reader_next(r, &ev); ev.type != FCGI_EV_NONE;
		     fcgi_reader_next(r, &ev)) {
			if (ev.type == FCGI_EV_STDIN) {
				if (ev.len > size - got ||
				    memcmp(ev.data, buf + got, ev.len) != 0)
					abort();
				got += ev.len;
			} else if (ev.type == FCGI_EV_STDIN_END) {
				ended = 1;
			} else if (ev.type != FCGI_EV_BEGIN &&
			    ev.type != FCGI_EV_PARAMS) {
				abort();
			}
		}
	}
	if (!ended || got != size)
		abort();
out:
	free(out);
	fcgi_reader_free(r);
}

void
fuzz_parsers(const uint8_t *data, size_t size)
{
	struct redis_target t;
	struct config c;
	char err[256];
	char *buf;

	if ((buf = fuzz_cstr(data, size)) == NULL)
		return;
	fuzz_json(buf, size);
	fuzz_body(buf, size);
	fuzz_headers(buf);
	fuzz_record(buf, size);
	(void)redis_url_parse(buf, &t, err, sizeof(err));
	fuzz_cluster(buf, size);
	fuzz_fcgi_reader(data, size);
	fuzz_fcgi_writer(buf, size);
	config_defaults(&c, "/base");
	(void)config_parse_text(&c, buf, size, err, sizeof(err));
	free(buf);
}
