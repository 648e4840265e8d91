/*
 * fuzz_parsers.c - libFuzzer target over every parser that takes bytes from
 * outside: the JSON layer (against cJSON's own parser), the charge body
 * (with a canonical-form round trip), the request headers, a stored record,
 * a Redis URL, configuration text, and a Redis Cluster redirection and key
 * slot.
 * Build and run: tests/fuzz/run.sh (clang-14, ASan + UBSan).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "cluster.h"
#include "config.h"
#include "headers.h"
#include "idem.h"
#include "json.h"
#include "redis_url.h"
#include "validate.h"

#define JSON_INT_EXACT 1e15 /* json.c's plain integers saturate here */

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
	if ((t = validate_canonical_text(&p, &n)) == NULL)
		abort();
	if (validate_charge(t, n, &q, &v) != 0)
		abort();
	if ((t2 = validate_canonical_text(&q, &m)) == NULL || m != n ||
	    memcmp(t, t2, n) != 0)
		abort();
	free(t);
	free(t2);
	charge_params_free(&p);
	charge_params_free(&q);
}

static void
fuzz_headers(const char *s)
{
	char key[IDEM_KEY_MAX + 1];
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct redis_target t;
	struct config c;
	char err[256];
	char *buf;

	if ((buf = malloc(size + 1)) == NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	fuzz_json(buf, size);
	fuzz_body(buf, size);
	fuzz_headers(buf);
	fuzz_record(buf, size);
	(void)redis_url_parse(buf, &t, err, sizeof(err));
	fuzz_cluster(buf, size);
	config_defaults(&c, "/base");
	(void)config_parse_text(&c, buf, size, err, sizeof(err));
	free(buf);
	return 0;
}
