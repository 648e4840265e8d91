/*
 * provider_wire.c - the pure parts of the HTTP provider: downstream key,
 * form body, the classification table, the provider's JSON, backoff and
 * the completer's schedule. No I/O.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "canon.h"
#include "defaults.h"
#include "digest.h"
#include "metrics.h"
#include "provider_wire.h"
#include "util.h"

int
wire_downstream_key(const char *secret, const char *principal, const char *key,
    size_t keylen, const char *fingerprint, char out[WIRE_KEY_LEN + 1])
{
	unsigned char mac[SHA256_LEN];

	if (provider_request_mac(secret, principal, key, keylen, fingerprint,
	        mac) != 0)
		return -1;
	memcpy(out, WIRE_KEY_PREFIX, sizeof(WIRE_KEY_PREFIX) - 1);
	digest_hex(mac, sizeof(mac), out + sizeof(WIRE_KEY_PREFIX) - 1);
	out[WIRE_KEY_LEN] = '\0';
	return 0;
}

/* Percent-encodes s[0..n) into b: unreserved bytes as they are. */
static void
form_escape(struct util_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	char e[3];
	size_t i, run;

	for (i = 0; i < n; i++) {
		unsigned char c;

		/* a run of unreserved bytes goes in at once */
		for (run = i; run < n; run++) {
			c = (unsigned char)s[run];
			if (!((c >= 'A' && c <= 'Z') ||
			        (c >= 'a' && c <= 'z') ||
			        (c >= '0' && c <= '9') || c == '-' ||
			        c == '.' || c == '_' || c == '~'))
				break;
		}
		if (run > i)
			util_buf_put(b, s + i, run - i);
		if ((i = run) == n)
			break;
		c = (unsigned char)s[i];
		e[0] = '%';
		e[1] = hex[c >> 4];
		e[2] = hex[c & 15];
		util_buf_put(b, e, 3);
	}
}

static void
form_pair(struct util_buf *b, const char *name, const char *v, size_t n)
{
	if (util_buf_len(b) > 0)
		util_buf_put(b, "&", 1);
	util_buf_str(b, name);
	util_buf_put(b, "=", 1);
	form_escape(b, v, n);
}

/*
 * Percent-encodes the escaped string s[0..n) of a canonical text
 * (canon_string_byte() decodes it) into b. 0, or -1 at an escape the
 * canonical form does not write.
 */
static int
form_escape_canon(struct util_buf *b, const char *s, size_t n)
{
	size_t i = 0, from;
	int c;

	while (i < n) {
		/* a run without escapes goes through form_escape() at once */
		for (from = i; i < n && s[i] != '\\'; i++)
			;
		form_escape(b, s + from, i - from);
		if (i < n) {
			char byte;

			if ((c = canon_string_byte(s, n, &i)) < 0)
				return -1;
			byte = (char)c;
			form_escape(b, &byte, 1);
		}
	}
	return 0;
}

char *
wire_form_body(const struct provider_call *call, const char *dkey, size_t *len)
{
	const struct charge_params *p = call->params;
	const char *desc = NULL;
	size_t desclen = 0, cap;
	struct util_buf b;
	char *out;
	long n;
	int has;

	/*
	 * The description is read from the canonical text: the parameters
	 * hold only what the use case decides on.
	 */
	if ((has = canon_string_member(p->canonical, p->canonical_len,
	         "description", &desc, &desclen)) < 0)
		return NULL;
	/* every byte may become three; the names, separators and amount fit */
	cap = 3 *
	        (strlen(p->currency) + strlen(p->source) + desclen +
	            strlen(call->principal) + call->keylen + strlen(dkey)) +
	    192;
	if ((out = malloc(cap)) == NULL)
		return NULL;
	util_buf_init(&b, out, cap);
	util_buf_str(&b, "amount=");
	util_buf_ll(&b, p->amount);
	util_buf_str(&b, "&currency=");
	form_escape(&b, p->currency, strlen(p->currency));
	util_buf_str(&b, "&source=");
	form_escape(&b, p->source, strlen(p->source));
	if (has) {
		util_buf_str(&b, "&description=");
		if (form_escape_canon(&b, desc, desclen) != 0)
			goto fail;
	}
	form_pair(&b, "metadata[charge_principal]", call->principal,
	    strlen(call->principal));
	form_pair(&b, "metadata[charge_idempotency_key]", call->key,
	    call->keylen);
	form_pair(&b, "metadata[charge_request]", dkey, strlen(dkey));
	if ((n = util_buf_len(&b)) < 0 || (size_t)n >= cap)
		goto fail;
	out[n] = '\0';
	*len = (size_t)n;
	return out;
fail:
	free(out);
	return NULL;
}

int
wire_list_query(long long gte, long long lte, const char *after, char *out,
    size_t outlen)
{
	int n;

	if (after != NULL && after[0] != '\0')
		n = snprintf(out, outlen,
		    "created[gte]=%lld&created[lte]=%lld&limit=%d&starting_after=%s",
		    gte, lte, WIRE_LIST_LIMIT, after);
	else
		n = snprintf(out, outlen,
		    "created[gte]=%lld&created[lte]=%lld&limit=%d", gte, lte,
		    WIRE_LIST_LIMIT);
	return n < 0 || (size_t)n >= outlen ? -1 : n;
}

/*
 * The classification, in one table read top down: the first row whose
 * status range holds the attempt's status (0: no answer at all) and whose
 * error type, error code and Stripe-Should-Retry (when the row names them)
 * match decides.
 */
struct class_row {
	long lo, hi;          /* status range */
	const char *err_type; /* NULL: any */
	const char *err_code; /* NULL: any */
	int should_retry;     /* -1: any; 1: the header said true */
	enum wire_class cls;
	enum settle_class settle; /* what it proves (settle.h) */
	enum metrics_attempt
	    attempt; /* its charge_provider_attempts_total label */
};

static const struct class_row class_rows[] = {
	/* no HTTP answer: refused, reset, closed, timed out (see wire_transport) */
	{ 0, 0, NULL, NULL, -1, WIRE_RETRY, SC_MAYBE, MA_TRANSPORT },
	/* a charge: proven the request's or not by the caller (settle_is_ours) */
	{ 200, 200, NULL, NULL, -1, WIRE_CHARGE, SC_CHARGE, MA_CHARGE },
	{ 402, 402, NULL, NULL, -1, WIRE_DECLINE, SC_DECLINE, MA_DECLINE },
	/*
	 * our key used earlier with other parameters: that delivery may have
	 * executed (never "failed"); a re-send meets the same refusal
	 */
	{ 400, 400, "idempotency_error", NULL, -1, WIRE_BUG, SC_KEY_USED,
	    MA_IDEMPOTENCY_ERROR },
	/* the first delivery under the key is still running */
	{ 409, 409, NULL, NULL, -1, WIRE_RETRY, SC_MAYBE, MA_IN_USE },
	/* not processed: try again */
	{ 429, 429, NULL, NULL, -1, WIRE_RETRY, SC_LATER, MA_RATE_LIMITED },
	{ 500, 599, NULL, NULL, -1, WIRE_RETRY, SC_MAYBE, MA_SERVER_ERROR },
	{ 400, 499, NULL, NULL, 1, WIRE_RETRY, SC_LATER, MA_SHOULD_RETRY },
	/* refused (the request's fault, the key, a WAF): this delivery did not execute */
	{ 400, 499, NULL, NULL, -1, WIRE_REJECTED, SC_REJECTED, MA_REJECTED },
	/* anything else (1xx, 2xx other than 200, 3xx): ambiguous */
	{ 0, 999, NULL, NULL, -1, WIRE_RETRY, SC_MAYBE, MA_UNEXPECTED },
};

static int
row_str_matches(const char *want, const char *have)
{
	return want == NULL || (have != NULL && strcmp(want, have) == 0);
}

struct wire_verdict
wire_classify(const struct wire_attempt *a)
{
	struct wire_verdict v = { WIRE_RETRY, SC_MAYBE, MA_UNEXPECTED,
		"unexpected" };
	size_t i;

	for (i = 0; i < sizeof(class_rows) / sizeof(class_rows[0]); i++) {
		const struct class_row *r = &class_rows[i];

		if (a->status < r->lo || a->status > r->hi ||
		    !row_str_matches(r->err_type, a->err_type) ||
		    !row_str_matches(r->err_code, a->err_code) ||
		    (r->should_retry != -1 &&
		        a->should_retry != r->should_retry))
			continue;
		v.cls = r->cls;
		v.settle = r->settle;
		v.attempt = r->attempt;
		v.label = metrics_attempt_labels[r->attempt];
		return v;
	}
	return v;
}

/* A string member of o into dst (dstlen), "" when absent. -1 if too long. */
static int
json_string_copy(const cJSON *o, const char *name, char *dst, size_t dstlen)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, name);
	size_t n;

	dst[0] = '\0';
	if (!cJSON_IsString(s))
		return 0;
	if ((n = strlen(s->valuestring)) >= dstlen)
		return -1;
	memcpy(dst, s->valuestring, n + 1);
	return 0;
}

/*
 * The decline code a 402 names, the same from the error and from the
 * failed charge: the issuer's reason (decline_code, outcome.reason)
 * unless it is the generic one, else the error's code (failure_code).
 */
static void
decline_code_set(struct provider_result *res, const char *reason,
    const char *code)
{
	const char *c = reason;

	if (c == NULL || c[0] == '\0' || strcmp(c, "generic_decline") == 0)
		c = code;
	if (c == NULL || c[0] == '\0')
		c = "card_declined";
	(void)snprintf(res->decline_buf, sizeof(res->decline_buf), "%s", c);
	res->decline_code = res->decline_buf;
}

/*
 * A provider's charge id goes into our JSON as it is: letters, digits and
 * underscores only (Stripe's "ch_..." are), so it never needs escaping.
 */
static int
charge_id_ok(const char *id)
{
	size_t i;

	for (i = 0; id[i] != '\0'; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') ||
		        (id[i] >= 'A' && id[i] <= 'Z') ||
		        (id[i] >= '0' && id[i] <= '9') || id[i] == '_'))
			return 0;
	return i > 0;
}

/*
 * What a charge object says of itself: metadata.charge_request, amount,
 * currency ("" and -1 when absent or not of their type).
 */
static void
charge_seen_from_json(const cJSON *o, struct provider_result *res)
{
	const cJSON *amount = cJSON_GetObjectItemCaseSensitive(o, "amount");
	const cJSON *md = cJSON_GetObjectItemCaseSensitive(o, "metadata");

	res->seen_amount = cJSON_IsNumber(amount) && amount->valuedouble >= 0 &&
	        amount->valuedouble < 1e15 &&
	        amount->valuedouble == (double)(long long)amount->valuedouble
	    ? (long long)amount->valuedouble
	    : -1;
	if (json_string_copy(o, "currency", res->seen_currency,
	        sizeof(res->seen_currency)) != 0)
		res->seen_currency[0] = '\0';
	if (!cJSON_IsObject(md) ||
	    json_string_copy(md, "charge_request", res->seen_request,
	        sizeof(res->seen_request)) != 0)
		res->seen_request[0] = '\0';
}

/* A charge object (200, or an element of a list) into res. */
static int
charge_from_json(const cJSON *o, struct provider_result *res)
{
	const cJSON *created = cJSON_GetObjectItemCaseSensitive(o, "created");
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(o, "status");
	const cJSON *outcome = cJSON_GetObjectItemCaseSensitive(o, "outcome");
	char reason[PROVIDER_CODE_MAX], fcode[PROVIDER_CODE_MAX];

	if (json_string_copy(o, "id", res->charge_id, sizeof(res->charge_id)) !=
	        0 ||
	    !charge_id_ok(res->charge_id) || !cJSON_IsNumber(created) ||
	    created->valuedouble < 0 || created->valuedouble > 1e12 ||
	    created->valuedouble != (double)(long long)created->valuedouble ||
	    !cJSON_IsString(status))
		return -1;
	res->created = (long long)created->valuedouble;
	charge_seen_from_json(o, res);
	if (strcmp(status->valuestring, "succeeded") == 0) {
		res->outcome = PROV_SUCCEEDED;
		res->decline_code = NULL;
		return 0;
	}
	if (strcmp(status->valuestring, "failed") != 0)
		return -1; /* pending: not settled */
	if (json_string_copy(o, "failure_code", fcode, sizeof(fcode)) != 0 ||
	    (cJSON_IsObject(outcome) ? json_string_copy(outcome, "reason",
	                                   reason, sizeof(reason))
	                             : (reason[0] = '\0', 0)) != 0)
		return -1;
	res->outcome = PROV_DECLINED;
	decline_code_set(res, reason, fcode);
	return 0;
}

/*
 * The fast path of wire_parse_charge, one pass without a tree. It answers
 * only for strict JSON (which cJSON reads the same) whose first top-level
 * members object, id, created and status are plain: strings without
 * escapes, created a plain integer, keys without escapes. Anything else,
 * however valid, is left to cJSON, whose answer is the reference.
 */
#define SCAN_DEPTH_MAX 32

struct scan {
	const char *p, *end;
};

static void
scan_ws(struct scan *s)
{
	while (s->p < s->end &&
	    (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static int
scan_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
	    (c >= 'A' && c <= 'F');
}

/*
 * The first byte in [p, end) that is '"', '\\' or below 0x20, or end: eight
 * bytes a step while none of them is (the "has a zero byte" and "has a
 * byte less than n" tests of Hacker's Delight, 6-1), the rest one by one.
 * A string's bytes cost a fraction of the byte loop's.
 */
static const char *
skip_plain(const char *p, const char *end)
{
	const uint64_t ones = 0x0101010101010101ULL;
	const uint64_t high = 0x8080808080808080ULL;

	while (end - p >= 8) {
		uint64_t w, q, b;

		memcpy(&w, p, sizeof(w));
		q = w ^ (ones * '"');
		b = w ^ (ones * '\\');
		if ((((w - ones * 0x20) & ~w) | ((q - ones) & ~q) |
		        ((b - ones) & ~b)) &
		    high)
			break;
		p += 8;
	}
	while (p < end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20)
		p++;
	return p;
}

/* A string at s->p: its raw bytes [*str, *str + *len); *esc: has escapes. */
static int
scan_string(struct scan *s, const char **str, size_t *len, int *esc)
{
	int i;

	if (s->p >= s->end || *s->p != '"')
		return -1;
	*str = ++s->p;
	*esc = 0;
	for (; s->p < s->end; s->p++) {
		unsigned char c;

		s->p = skip_plain(s->p, s->end);
		if (s->p >= s->end)
			break;
		c = (unsigned char)*s->p;

		if (c == '"') {
			*len = (size_t)(s->p++ - *str);
			return 0;
		}
		if (c < 0x20)
			return -1;
		if (c != '\\')
			continue;
		*esc = 1;
		if (++s->p >= s->end)
			return -1;
		c = (unsigned char)*s->p;
		if (c == 'u') {
			for (i = 0; i < 4; i++)
				if (++s->p >= s->end || !scan_hex(*s->p))
					return -1;
			/* a surrogate: cJSON refuses one not paired, left to it */
			if ((s->p[-3] == 'd' || s->p[-3] == 'D') &&
			    strchr("89abcdefABCDEF", s->p[-2]) != NULL)
				return -1;
		} else if (c != '"' && c != '\\' && c != '/' && c != 'b' &&
		    c != 'f' && c != 'n' && c != 'r' && c != 't')
			return -1;
	}
	return -1;
}

/* A number at s->p; *plain: -?(0|[1-9][0-9]*), nothing more. */
static int
scan_number(struct scan *s, int *plain)
{
	const char *d;

	*plain = 1;
	if (s->p < s->end && *s->p == '-')
		s->p++;
	d = s->p;
	while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
		s->p++;
	if (s->p == d || (*d == '0' && s->p - d > 1))
		return -1;
	if (s->p < s->end && *s->p == '.') {
		*plain = 0;
		d = ++s->p;
		while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
			s->p++;
		if (s->p == d)
			return -1;
	}
	if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
		*plain = 0;
		s->p++;
		if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
			s->p++;
		d = s->p;
		while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
			s->p++;
		if (s->p == d)
			return -1;
	}
	return 0;
}

static int
scan_literal(struct scan *s, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
		return -1;
	s->p += n;
	return 0;
}

/* Skips one value at s->p (whitespace before it skipped). */
static int
scan_value(struct scan *s, int depth)
{
	const char *str;
	size_t len;
	int esc, plain;
	char close;

	if (s->p >= s->end)
		return -1;
	switch (*s->p) {
	case '"': return scan_string(s, &str, &len, &esc);
	case 't': return scan_literal(s, "true");
	case 'f': return scan_literal(s, "false");
	case 'n': return scan_literal(s, "null");
	case '{':
	case '[': break;
	default: return scan_number(s, &plain);
	}
	if (depth >= SCAN_DEPTH_MAX)
		return -1;
	close = *s->p == '{' ? '}' : ']';
	s->p++;
	scan_ws(s);
	if (s->p < s->end && *s->p == close) {
		s->p++;
		return 0;
	}
	for (;;) {
		if (close == '}') {
			if (scan_string(s, &str, &len, &esc) != 0)
				return -1;
			scan_ws(s);
			if (s->p >= s->end || *s->p++ != ':')
				return -1;
			scan_ws(s);
		}
		if (scan_value(s, depth + 1) != 0)
			return -1;
		scan_ws(s);
		if (s->p >= s->end)
			return -1;
		if (*s->p == close) {
			s->p++;
			return 0;
		}
		if (*s->p++ != ',')
			return -1;
		scan_ws(s);
	}
}

/*
 * The metadata object at s->p: the raw value of its charge_request member
 * (a plain string) into *v and *vlen (left NULL when absent). 0, or -1 when
 * the fast path cannot answer.
 */
static int
scan_metadata(struct scan *s, const char **v, size_t *vlen)
{
	static const char name[] = "charge_request";
	const char *key, *str;
	size_t klen, len;
	int esc;

	if (s->p >= s->end || *s->p++ != '{')
		return -1;
	scan_ws(s);
	if (s->p < s->end && *s->p == '}') {
		s->p++;
		return 0;
	}
	for (;;) {
		if (scan_string(s, &key, &klen, &esc) != 0 || esc)
			return -1;
		scan_ws(s);
		if (s->p >= s->end || *s->p++ != ':')
			return -1;
		scan_ws(s);
		if (klen == sizeof(name) - 1 && memcmp(key, name, klen) == 0) {
			if (*v != NULL ||
			    scan_string(s, &str, &len, &esc) != 0 || esc)
				return -1;
			*v = str;
			*vlen = len;
		} else if (scan_value(s, 2) != 0)
			return -1;
		scan_ws(s);
		if (s->p >= s->end)
			return -1;
		if (*s->p == '}') {
			s->p++;
			return 0;
		}
		if (*s->p++ != ',')
			return -1;
		scan_ws(s);
	}
}

/* A plain non-negative integer of n digits (n <= 15) from its text. */
static long long
digits_value(const char *d, size_t n)
{
	long long x = 0;
	size_t i;

	for (i = 0; i < n; i++)
		x = x * 10 + (d[i] - '0');
	return x;
}

/* Members the fast path reads; the first four must be there. */
enum { F_OBJECT, F_ID, F_CREATED, F_STATUS, F_AMOUNT, F_CURRENCY, F_META, F_N };

/* Their names, with their lengths to compare a key's with first. */
static const struct {
	const char *s;
	size_t len;
} charge_names[F_N] = {
	{ "object", 6 },
	{ "id", 2 },
	{ "created", 7 },
	{ "status", 6 },
	{ "amount", 6 },
	{ "currency", 8 },
	{ "metadata", 8 },
};

static int
charge_fast(const char *body, size_t len, struct provider_result *res)
{
	struct scan s = { body, body + len };
	const char *val[F_N] = { NULL }, *key, *v, *rq = NULL;
	size_t vlen[F_N] = { 0 }, klen, i, rqlen = 0;
	int esc, plain;

	scan_ws(&s);
	if (s.p >= s.end || *s.p++ != '{')
		return -1;
	scan_ws(&s);
	if (s.p < s.end && *s.p == '}')
		return -1; /* no members: cJSON says no */
	for (;;) {
		if (scan_string(&s, &key, &klen, &esc) != 0 || esc)
			return -1;
		scan_ws(&s);
		if (s.p >= s.end || *s.p++ != ':')
			return -1;
		scan_ws(&s);
		for (i = 0; i < F_N; i++)
			if (val[i] == NULL && charge_names[i].len == klen &&
			    memcmp(key, charge_names[i].s, klen) == 0)
				break;
		v = s.p;
		if (i == F_N) {
			if (scan_value(&s, 1) != 0)
				return -1;
		} else if (i == F_CREATED || i == F_AMOUNT) {
			if (scan_number(&s, &plain) != 0 || !plain ||
			    *v == '-' || s.p - v > 13)
				return -1;
			val[i] = v;
			vlen[i] = (size_t)(s.p - v);
		} else if (i == F_META) {
			if (scan_metadata(&s, &rq, &rqlen) != 0)
				return -1;
			val[i] = v;
		} else {
			if (scan_string(&s, &val[i], &vlen[i], &esc) != 0 ||
			    esc)
				return -1;
		}
		scan_ws(&s);
		if (s.p >= s.end)
			return -1;
		if (*s.p == '}')
			break;
		if (*s.p++ != ',')
			return -1;
		scan_ws(&s);
	}
	s.p++;
	scan_ws(&s);
	if (s.p != s.end || val[F_OBJECT] == NULL || val[F_ID] == NULL ||
	    val[F_CREATED] == NULL || val[F_STATUS] == NULL ||
	    vlen[F_OBJECT] != 6 || memcmp(val[F_OBJECT], "charge", 6) != 0 ||
	    vlen[F_STATUS] != 9 || memcmp(val[F_STATUS], "succeeded", 9) != 0 ||
	    vlen[F_ID] == 0 || vlen[F_ID] >= sizeof(res->charge_id) ||
	    vlen[F_CURRENCY] >= sizeof(res->seen_currency) ||
	    rqlen >= sizeof(res->seen_request))
		return -1;
	for (i = 0; i < vlen[F_ID]; i++)
		if (!((val[F_ID][i] >= 'a' && val[F_ID][i] <= 'z') ||
		        (val[F_ID][i] >= 'A' && val[F_ID][i] <= 'Z') ||
		        (val[F_ID][i] >= '0' && val[F_ID][i] <= '9') ||
		        val[F_ID][i] == '_'))
			return -1;
	res->created = digits_value(val[F_CREATED], vlen[F_CREATED]);
	if (res->created > 1000000000000LL)
		return -1;
	memcpy(res->charge_id, val[F_ID], vlen[F_ID]);
	res->charge_id[vlen[F_ID]] = '\0';
	res->seen_amount = val[F_AMOUNT] != NULL
	    ? digits_value(val[F_AMOUNT], vlen[F_AMOUNT])
	    : -1;
	memcpy(res->seen_currency,
	    val[F_CURRENCY] != NULL ? val[F_CURRENCY] : "", vlen[F_CURRENCY]);
	res->seen_currency[vlen[F_CURRENCY]] = '\0';
	memcpy(res->seen_request, rq != NULL ? rq : "", rqlen);
	res->seen_request[rqlen] = '\0';
	res->outcome = PROV_SUCCEEDED;
	res->decline_code = NULL;
	return 0;
}

int
wire_parse_charge(const char *body, size_t len, struct provider_result *res)
{
	cJSON *root;
	const cJSON *obj;
	int rc = -1;

	if (charge_fast(body, len, res) == 0)
		return 0;
	root = cJSON_ParseWithLength(body, len);
	if (cJSON_IsObject(root) &&
	    cJSON_IsString(
	        obj = cJSON_GetObjectItemCaseSensitive(root, "object")) &&
	    strcmp(obj->valuestring, "charge") == 0 &&
	    charge_from_json(root, res) == 0 && res->outcome == PROV_SUCCEEDED)
		rc = 0;
	cJSON_Delete(root);
	return rc;
}

int
wire_parse_error(const char *body, size_t len, long status,
    char type[PROVIDER_CODE_MAX], char code[PROVIDER_CODE_MAX],
    struct provider_result *res)
{
	cJSON *root = cJSON_ParseWithLength(body, len);
	const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
	char reason[PROVIDER_CODE_MAX];
	int rc = -1;

	type[0] = code[0] = '\0';
	if (!cJSON_IsObject(err) ||
	    json_string_copy(err, "type", type, PROVIDER_CODE_MAX) != 0 ||
	    json_string_copy(err, "code", code, PROVIDER_CODE_MAX) != 0)
		goto done;
	if (status == 402) {
		/* a decline that names no charge is a decline all the same */
		if (json_string_copy(err, "charge", res->charge_id,
		        sizeof(res->charge_id)) != 0 ||
		    (res->charge_id[0] != '\0' &&
		        !charge_id_ok(res->charge_id)) ||
		    json_string_copy(err, "decline_code", reason,
		        sizeof(reason)) != 0)
			goto done;
		res->outcome = PROV_DECLINED;
		decline_code_set(res, reason, code);
	}
	rc = 0;
done:
	cJSON_Delete(root);
	return rc;
}

void
wire_result_clear(struct provider_result *res)
{
	res->outcome = PROV_UNKNOWN;
	res->charge_id[0] = res->decline_buf[0] = '\0';
	res->seen_request[0] = res->seen_currency[0] = '\0';
	res->decline_code = NULL;
	res->created = 0;
	res->seen_amount = -1;
}

int
wire_search_query(const char *dkey, const char *page, char *out, size_t outlen)
{
	struct util_buf b;

	if (!charge_id_ok(dkey)) /* "charge_" + hex: no quote to escape */
		return -1;
	util_buf_init(&b, out, outlen);
	/* metadata['charge_request']:'<dkey>' */
	util_buf_str(&b, "query=metadata%5B%27charge_request%27%5D%3A%27");
	util_buf_str(&b, dkey);
	util_buf_str(&b, "%27&limit=");
	util_buf_ll(&b, WIRE_LIST_LIMIT);
	if (page != NULL && page[0] != '\0') {
		util_buf_str(&b, "&page=");
		form_escape(&b, page, strlen(page));
	}
	return (int)util_buf_len(&b);
}

enum settle_class
wire_answer_class(const struct wire_answer *a, const struct settle_expect *e,
    struct provider_result *res, struct wire_verdict *v,
    char code[PROVIDER_CODE_MAX])
{
	struct wire_attempt w = { a->status, NULL, NULL, a->should_retry };
	char type[PROVIDER_CODE_MAX];
	struct settle_seen seen;
	enum settle_class sc;

	wire_result_clear(res);
	code[0] = '\0';
	if (a->status != 200 && a->body != NULL &&
	    wire_parse_error(a->body, a->len, a->status, type, code, res) ==
	        0) {
		w.err_type = type;
		w.err_code = code;
	}
	*v = wire_classify(&w);
	sc = v->settle;
	if (sc == SC_CHARGE) {
		if (a->body == NULL ||
		    wire_parse_charge(a->body, a->len, res) != 0)
			sc = SC_MAYBE; /* a 200 that is no succeeded charge */
		else {
			seen.request = res->seen_request;
			seen.amount = res->seen_amount;
			seen.currency = res->seen_currency;
			if (!settle_is_ours(e, &seen))
				sc = SC_NOT_OURS;
		}
	}
	if (sc == SC_DECLINE && res->outcome != PROV_DECLINED)
		sc = SC_MAYBE; /* a 402 without an error object */
	/* a saved answer: an execution under the key began earlier */
	if (a->replayed && (sc == SC_REJECTED || sc == SC_LATER))
		sc = SC_MAYBE;
	if (sc != SC_CHARGE && sc != SC_DECLINE)
		wire_result_clear(res); /* nothing of it is this request's */
	return sc;
}

/*
 * The charges of one page (a list's or a search's root) for e's: as
 * wire_parse_list says; after: the page's last charge id.
 */
static enum settle_probe
page_parse(const cJSON *root, const struct settle_expect *e,
    struct provider_result *res, int *has_more, char after[PROVIDER_ID_MAX],
    long long *last_created)
{
	const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
	const cJSON *more = cJSON_GetObjectItemCaseSensitive(root, "has_more");
	const cJSON *c, *id, *md, *rq, *cr;
	enum settle_probe found = PROBE_NONE;
	struct provider_result r;
	struct settle_seen seen;

	*has_more = 0;
	after[0] = '\0';
	*last_created = 0;
	if (!cJSON_IsArray(data) || !cJSON_IsBool(more))
		return PROBE_INCOMPLETE;
	*has_more = cJSON_IsTrue(more);
	cJSON_ArrayForEach(c, data)
	{
		id = cJSON_GetObjectItemCaseSensitive(c, "id");
		if (!cJSON_IsString(id) || !charge_id_ok(id->valuestring) ||
		    strlen(id->valuestring) >= PROVIDER_ID_MAX)
			return PROBE_INCOMPLETE; /* no cursor to go on from */
		memcpy(after, id->valuestring, strlen(id->valuestring) + 1);
		cr = cJSON_GetObjectItemCaseSensitive(c, "created");
		*last_created = cJSON_IsNumber(cr) && cr->valuedouble >= 0 &&
		        cr->valuedouble < 1e12
		    ? (long long)cr->valuedouble
		    : 0;
		md = cJSON_GetObjectItemCaseSensitive(c, "metadata");
		rq = cJSON_GetObjectItemCaseSensitive(md, "charge_request");
		if (found == PROBE_FOUND || found == PROBE_FOUND_DECLINED ||
		    !cJSON_IsString(rq) ||
		    strcmp(rq->valuestring, e->request) != 0)
			continue;
		memset(&r, 0, sizeof(r));
		if (charge_from_json(c, &r) != 0) {
			found =
			    PROBE_NOT_OURS; /* names us, but no settled charge */
			continue;
		}
		seen.request = r.seen_request;
		seen.amount = r.seen_amount;
		seen.currency = r.seen_currency;
		if (!settle_is_ours(e, &seen)) {
			found = PROBE_NOT_OURS;
			continue;
		}
		*res = r;
		if (r.decline_code == r.decline_buf)
			res->decline_code = res->decline_buf;
		found = r.outcome == PROV_SUCCEEDED ? PROBE_FOUND
		                                    : PROBE_FOUND_DECLINED;
	}
	return found;
}

/* A list's page (next NULL) or a search's: page_parse, and next_page. */
static enum settle_probe
page_body(const char *body, size_t len, const struct settle_expect *e,
    struct provider_result *res, int *has_more, char after[PROVIDER_ID_MAX],
    char *next, long long *last_created)
{
	cJSON *root = cJSON_ParseWithLength(body, len);
	const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "next_page");
	long long lc;
	enum settle_probe f = page_parse(root, e, res, has_more, after,
	    last_created != NULL ? last_created : &lc);

	if (next != NULL) {
		next[0] = '\0';
		if (f != PROBE_INCOMPLETE && cJSON_IsString(np) &&
		    strlen(np->valuestring) < PROVIDER_ID_MAX)
			memcpy(next, np->valuestring,
			    strlen(np->valuestring) + 1);
		if ((f == PROBE_NONE || f == PROBE_NOT_OURS) && *has_more &&
		    next[0] == '\0')
			f = PROBE_INCOMPLETE; /* more, and no way to them */
	}
	cJSON_Delete(root);
	return f;
}

enum settle_probe
wire_parse_list(const char *body, size_t len, const struct settle_expect *e,
    struct provider_result *res, int *has_more, char after[PROVIDER_ID_MAX],
    long long *last_created)
{
	return page_body(body, len, e, res, has_more, after, NULL,
	    last_created);
}

enum settle_probe
wire_parse_search(const char *body, size_t len, const struct settle_expect *e,
    struct provider_result *res, int *has_more, char next[PROVIDER_ID_MAX])
{
	char last[PROVIDER_ID_MAX];

	return page_body(body, len, e, res, has_more, last, next, NULL);
}

long
wire_backoff_ms(int n, double r)
{
	long base = WIRE_BACKOFF_BASE_MS, ms;
	int i;

	if (r < 0 || r >= 1)
		r = 0;
	for (i = 1; i < n && base < WIRE_BACKOFF_CAP_MS; i++)
		base *= 2;
	ms = (long)((double)base * (1.0 + r));
	return ms > WIRE_BACKOFF_CAP_MS ? WIRE_BACKOFF_CAP_MS : ms;
}

long long
wire_schedule_next(const long *steps, int n, long long created_ms,
    long long now_ms, int *last)
{
	int i;

	*last = n == 0 || now_ms >= created_ms + 1000LL * steps[n - 1];
	for (i = 0; i < n; i++)
		if (created_ms + 1000LL * steps[i] > now_ms)
			return created_ms + 1000LL * steps[i];
	/* past the last step: ask again every last interval */
	return now_ms +
	    1000LL *
	    (n > 1 ? steps[n - 1] - steps[n - 2] : (n == 1 ? steps[0] : 3600));
}

int
wire_charge_object(const struct cJSON *o, struct provider_result *res)
{
	return cJSON_IsObject(o) ? charge_from_json(o, res) : -1;
}
