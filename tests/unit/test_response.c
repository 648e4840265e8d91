/*
 * test_response.c - the problem table, problem+json rendering, header lines
 * and the CGI/FastCGI response written through a memory sink.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "response.h"

#define PROBLEM_CTYPE "application/problem+json"

/*
 * A fixed buffer behind struct response_sink (no heap: a failing assertion
 * leaves nothing for valgrind to report).
 */
struct membuf {
	char p[8192];
	size_t n;
	int calls;
	int fail_after; /* fail the write call with this index; -1 never */
};

static int
membuf_write(void *ctx, const char *p, size_t n)
{
	struct membuf *m = ctx;

	if (m->fail_after >= 0 && m->calls >= m->fail_after)
		return -1;
	m->calls++;
	if (n >= sizeof(m->p) - m->n)
		return -1;
	memcpy(m->p + m->n, p, n);
	m->n += n;
	m->p[m->n] = '\0';
	return 0;
}

static void
membuf_init(struct membuf *m, struct response_sink *sink)
{
	memset(m, 0, sizeof(*m));
	m->fail_after = -1;
	sink->write = membuf_write;
	sink->ctx = m;
}

/* The expected table (helper brief, "Problem details"). */
static const struct {
	enum problem p;
	const char *slug;
	int status;
} want_problems[] = {
	{ PROB_NOT_FOUND, "not-found", 404 },
	{ PROB_METHOD_NOT_ALLOWED, "method-not-allowed", 405 },
	{ PROB_UNAUTHORIZED, "unauthorized", 401 },
	{ PROB_MISSING_KEY, "missing-idempotency-key", 400 },
	{ PROB_INVALID_KEY, "invalid-idempotency-key", 400 },
	{ PROB_UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type", 415 },
	{ PROB_TOO_LARGE, "content-too-large", 413 },
	{ PROB_REQUEST_TIMEOUT, "request-timeout", 408 },
	{ PROB_INVALID_REQUEST, "invalid-request", 400 },
	{ PROB_DECLINED, "payment-declined", 402 },
	{ PROB_PROVIDER_ERROR, "provider-error", 502 },
	{ PROB_OUTCOME_UNKNOWN, "outcome-unknown", 504 },
	{ PROB_IN_PROGRESS, "request-in-progress", 409 },
	{ PROB_KEY_REUSED, "idempotency-key-reused", 422 },
	{ PROB_UNAVAILABLE, "service-unavailable", 503 },
	{ PROB_STORED_UNAVAILABLE, "stored-response-unavailable", 500 },
	{ PROB_INTERNAL, "internal-error", 500 },
	{ PROB_NOT_DURABLE, "outcome-not-durable", 503 },
	{ PROB_KEY_NOT_FOUND, "key-not-found", 404 },
	{ PROB_WEBHOOK_INVALID, "invalid-webhook", 400 },
	{ PROB_WEBHOOK_REJECTED, "webhook-signature-rejected", 401 },
};
#define NWANT (sizeof(want_problems) / sizeof(want_problems[0]))

static void
test_problem_table(void **state)
{
	size_t i, j;

	(void)state;
	assert_int_equal(NWANT, PROB_COUNT);
	for (i = 0; i < NWANT; i++) {
		const struct problem_info *pi =
		    problem_info(want_problems[i].p);

		assert_non_null(pi);
		assert_non_null(pi->slug);
		assert_non_null(pi->title);
		assert_true(strlen(pi->title) > 0);
		assert_string_equal(pi->slug, want_problems[i].slug);
		assert_int_equal(pi->status, want_problems[i].status);
		/* the status has a reason phrase */
		assert_true(strlen(http_reason(pi->status)) > 0);
	}
	/* every enum value has its own slug (slugs are metrics labels) */
	for (i = 0; i < PROB_COUNT; i++)
		for (j = i + 1; j < PROB_COUNT; j++)
			assert_string_not_equal(problem_info((enum problem)i)
			                            ->slug,
			    problem_info((enum problem)j)->slug);
	/* out of range: never NULL */
	assert_non_null(problem_info(PROB_COUNT));
	assert_string_equal(problem_info(PROB_COUNT)->slug, "internal-error");
}

/* Parses body as a JSON object and checks type, title and status. */
static cJSON *
parse_problem(const char *body, size_t len, enum problem p)
{
	const struct problem_info *pi = problem_info(p);
	char type[128];
	cJSON *o, *item;

	assert_int_equal(strlen(body), len);
	o = cJSON_ParseWithLength(body, len);
	assert_non_null(o);
	assert_true(cJSON_IsObject(o));
	(void)snprintf(type, sizeof(type), "/problems/%s", pi->slug);
	item = cJSON_GetObjectItemCaseSensitive(o, "type");
	assert_true(cJSON_IsString(item));
	assert_string_equal(item->valuestring, type);
	item = cJSON_GetObjectItemCaseSensitive(o, "title");
	assert_true(cJSON_IsString(item));
	assert_string_equal(item->valuestring, pi->title);
	item = cJSON_GetObjectItemCaseSensitive(o, "status");
	assert_true(cJSON_IsNumber(item));
	assert_int_equal(item->valueint, pi->status);
	return o;
}

static void
test_problem_render_every_problem(void **state)
{
	size_t len;
	char *body;
	cJSON *o, *d;
	int i;

	(void)state;
	for (i = 0; i < PROB_COUNT; i++) {
		len = 0;
		body =
		    problem_render((enum problem)i, "some detail", NULL, &len);
		assert_non_null(body);
		o = parse_problem(body, len, (enum problem)i);
		d = cJSON_GetObjectItemCaseSensitive(o, "detail");
		assert_true(cJSON_IsString(d));
		assert_string_equal(d->valuestring, "some detail");
		assert_int_equal(cJSON_GetArraySize(o), 4);
		cJSON_Delete(o);
		free(body);
	}
}

static void
test_problem_render_exact(void **state)
{
	size_t len = 0;
	cJSON *extras;
	char *body;

	(void)state;
	extras = cJSON_CreateObject();
	assert_non_null(extras);
	assert_non_null(
	    cJSON_AddStringToObject(extras, "decline_code", "card_declined"));
	body = problem_render(PROB_DECLINED, "The payment was declined.",
	    extras, &len);
	assert_non_null(body);
	assert_string_equal(body,
	    "{\"type\":\"/problems/payment-declined\","
	    "\"title\":\"Payment declined\",\"status\":402,"
	    "\"detail\":\"The payment was declined.\","
	    "\"decline_code\":\"card_declined\"}");
	assert_int_equal(len, strlen(body));
	free(body);
}

static void
test_problem_render_detail_null(void **state)
{
	size_t len = 0;
	char *body;
	cJSON *o;

	(void)state;
	body = problem_render(PROB_NOT_FOUND, NULL, NULL, &len);
	assert_non_null(body);
	o = parse_problem(body, len, PROB_NOT_FOUND);
	assert_null(cJSON_GetObjectItemCaseSensitive(o, "detail"));
	assert_int_equal(cJSON_GetArraySize(o), 3);
	assert_string_equal(body,
	    "{\"type\":\"/problems/not-found\","
	    "\"title\":\"Not Found\",\"status\":404}");
	cJSON_Delete(o);
	free(body);
	/* len may be NULL */
	body = problem_render(PROB_INTERNAL, NULL, NULL, NULL);
	assert_non_null(body);
	free(body);
}

static void
test_problem_render_errors_array(void **state)
{
	size_t len = 0;
	cJSON *extras, *errors, *e, *o, *item;
	char *body;

	(void)state;
	extras = cJSON_CreateObject();
	assert_non_null(extras);
	errors = cJSON_AddArrayToObject(extras, "errors");
	assert_non_null(errors);
	e = cJSON_CreateObject();
	assert_non_null(e);
	cJSON_AddItemToArray(errors, e);
	assert_non_null(cJSON_AddStringToObject(e, "field", "amount"));
	assert_non_null(cJSON_AddStringToObject(e, "message", "must be > 0"));
	e = cJSON_CreateObject();
	assert_non_null(e);
	cJSON_AddItemToArray(errors, e);
	assert_non_null(
	    cJSON_AddStringToObject(e, "field", "line_items[3].quantity"));
	assert_non_null(cJSON_AddStringToObject(e, "message", "too big"));
	assert_non_null(cJSON_AddNumberToObject(extras, "limit", 16));

	body = problem_render(PROB_INVALID_REQUEST, "amount: must be > 0",
	    extras, &len);
	assert_non_null(body);
	o = parse_problem(body, len, PROB_INVALID_REQUEST);
	item = cJSON_GetObjectItemCaseSensitive(o, "detail");
	assert_true(cJSON_IsString(item));
	assert_string_equal(item->valuestring, "amount: must be > 0");
	item = cJSON_GetObjectItemCaseSensitive(o, "errors");
	assert_true(cJSON_IsArray(item));
	assert_int_equal(cJSON_GetArraySize(item), 2);
	e = cJSON_GetArrayItem(item, 1);
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "field")
	                        ->valuestring,
	    "line_items[3].quantity");
	assert_string_equal(cJSON_GetObjectItemCaseSensitive(e, "message")
	                        ->valuestring,
	    "too big");
	item = cJSON_GetObjectItemCaseSensitive(o, "limit");
	assert_true(cJSON_IsNumber(item));
	assert_int_equal(item->valueint, 16);
	/* base members first, extras after, in their order */
	assert_non_null(strstr(body, "\"status\":400,\"detail\":"));
	assert_true(strstr(body, "\"errors\"") < strstr(body, "\"limit\""));
	cJSON_Delete(o);
	free(body);
}

static void
test_problem_render_empty_extras_and_escaping(void **state)
{
	const char *detail =
	    "quote \" backslash \\ newline \n tab \t caf\xc3\xa9";
	size_t len = 0;
	cJSON *o, *item, *extras;
	char *body;

	(void)state;
	extras = cJSON_CreateObject();
	assert_non_null(extras);
	body = problem_render(PROB_KEY_REUSED, detail, extras, &len);
	assert_non_null(body);
	assert_null(memchr(body, '\n', len)); /* compact, escaped */
	o = parse_problem(body, len, PROB_KEY_REUSED);
	item = cJSON_GetObjectItemCaseSensitive(o, "detail");
	assert_true(cJSON_IsString(item));
	assert_string_equal(item->valuestring, detail);
	assert_int_equal(cJSON_GetArraySize(o), 4);
	cJSON_Delete(o);
	free(body);
}

static void
test_header_append(void **state)
{
	struct response r;

	(void)state;
	response_init(&r);
	assert_int_equal(r.headers_len, 0);
	assert_int_equal(response_header(&r, "Retry-After", "%d", 300), 0);
	assert_int_equal(response_header(&r, "Idempotent-Replayed", "%s",
	                     "true"),
	    0);
	assert_string_equal(r.headers,
	    "Retry-After: 300\r\nIdempotent-Replayed: true\r\n");
	assert_int_equal(r.headers_len, strlen(r.headers));
	response_free(&r);
}

static void
test_header_overflow(void **state)
{
	char value[RESPONSE_HEADERS_MAX + 16], saved[RESPONSE_HEADERS_MAX];
	struct response r;
	size_t before = 0;
	int i, rc = 0;

	(void)state;
	/* a single line larger than the whole buffer: refused, nothing added */
	response_init(&r);
	memset(value, 'v', sizeof(value) - 1);
	value[sizeof(value) - 1] = '\0';
	assert_int_equal(response_header(&r, "X", "%s", value), -1);
	assert_int_equal(r.headers_len, 0);
	assert_string_equal(r.headers, "");

	/* fill with lines until one is refused; earlier ones stay intact */
	for (i = 0; i < 1000; i++) {
		before = r.headers_len;
		memcpy(saved, r.headers, before);
		rc = response_header(&r, "X-Filler", "%040d", i);
		if (rc != 0)
			break;
		assert_int_equal(r.headers_len, before + 52);
	}
	assert_int_equal(rc, -1);
	assert_true(i > 0 && i < 1000);
	assert_int_equal(r.headers_len, before);
	assert_memory_equal(r.headers, saved, before);
	assert_int_equal(strlen(r.headers), before);
	/* a refused header does not prevent a smaller one that fits */
	if (before + 6 < RESPONSE_HEADERS_MAX) {
		assert_int_equal(response_header(&r, "A", "b"), 0);
		assert_int_equal(r.headers_len, before + 6);
	}
	response_free(&r);

	/* the exact boundary: the lines may use RESPONSE_HEADERS_MAX - 1 bytes */
	response_init(&r);
	memset(value, 'v', sizeof(value));
	/* "X: " + v + "\r\n" = 5 + len */
	value[RESPONSE_HEADERS_MAX - 5] = '\0'; /* 512 bytes: too big */
	assert_int_equal(response_header(&r, "X", "%s", value), -1);
	assert_int_equal(r.headers_len, 0);
	value[RESPONSE_HEADERS_MAX - 6] = '\0'; /* 511 bytes: fits */
	assert_int_equal(response_header(&r, "X", "%s", value), 0);
	assert_int_equal(r.headers_len, RESPONSE_HEADERS_MAX - 1);
	memcpy(saved, r.headers, r.headers_len);
	assert_int_equal(response_header(&r, "Y", "z"), -1);
	assert_int_equal(r.headers_len, RESPONSE_HEADERS_MAX - 1);
	assert_memory_equal(r.headers, saved, RESPONSE_HEADERS_MAX - 1);
	response_free(&r);
}

static void
test_send_201(void **state)
{
	static const char body[] = "{\"id\":\"ch_1\"}";
	struct response_sink sink;
	struct response r;
	struct membuf m;
	char want[1024];

	(void)state;
	membuf_init(&m, &sink);
	response_init(&r);
	assert_int_equal(response_copy_body(&r, 201, "application/json", body,
	                     sizeof(body) - 1),
	    0);
	assert_int_equal(response_header(&r, "Idempotent-Replayed", "false"),
	    0);
	assert_int_equal(response_header(&r, "Retry-After", "%d", 7), 0);
	assert_int_equal(response_send(&r, "0123456789abcdef0123456789abcdef",
	                     &sink, 0),
	    0);
	(void)snprintf(want, sizeof(want),
	    "Status: 201 Created\r\n"
	    "Content-Type: application/json\r\n"
	    "Content-Length: %zu\r\n"
	    "Cache-Control: no-store\r\n"
	    "X-Request-Id: 0123456789abcdef0123456789abcdef\r\n"
	    "Idempotent-Replayed: false\r\n"
	    "Retry-After: 7\r\n"
	    "\r\n"
	    "%s",
	    sizeof(body) - 1, body);
	assert_string_equal(m.p, want);
	assert_int_equal(m.n, strlen(want));
	response_free(&r);
}

static void
test_send_binary_body(void **state)
{
	static const char body[] = "a\0b\xff\r\n\r\nz";
	struct response_sink sink;
	struct response r;
	struct membuf m;
	const char *sep;

	(void)state;
	membuf_init(&m, &sink);
	response_init(&r);
	assert_int_equal(response_copy_body(&r, 200, "application/octet-stream",
	                     body, sizeof(body) - 1),
	    0);
	assert_int_equal(response_send(&r, "rid", &sink, 0), 0);
	assert_non_null(strstr(m.p, "Content-Length: 9\r\n"));
	sep = strstr(m.p, "\r\n\r\n");
	assert_non_null(sep);
	sep += 4;
	assert_int_equal(m.n - (size_t)(sep - m.p), sizeof(body) - 1);
	assert_memory_equal(sep, body, sizeof(body) - 1);
	response_free(&r);
}

static void
test_send_head_only(void **state)
{
	struct response_sink sink;
	struct response r;
	struct membuf m;
	size_t len;

	(void)state;
	membuf_init(&m, &sink);
	response_init(&r);
	response_problem(&r, PROB_NOT_FOUND, "No such route.", NULL);
	assert_int_equal(r.status, 404);
	assert_string_equal(r.content_type, PROBLEM_CTYPE);
	assert_string_equal(r.outcome, "not-found");
	len = r.body_len;
	assert_true(len > 0);
	assert_int_equal(response_send(&r, "rid-1", &sink, 1), 0);
	/* the head ends the output: no body, but its length is announced */
	assert_true(m.n >= 4);
	assert_memory_equal(m.p + m.n - 4, "\r\n\r\n", 4);
	assert_null(strstr(m.p, "\r\n\r\n{"));
	assert_null(strchr(m.p, '{'));
	assert_non_null(strstr(m.p, "Status: 404 Not Found\r\n"));
	assert_non_null(
	    strstr(m.p, "Content-Type: application/problem+json\r\n"));
	assert_non_null(strstr(m.p, "Cache-Control: no-store\r\n"));
	assert_non_null(strstr(m.p, "X-Request-Id: rid-1\r\n"));
	{
		char cl[64];

		(void)snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", len);
		assert_non_null(strstr(m.p, cl));
	}
	response_free(&r);
}

static void
test_send_empty_body(void **state)
{
	struct response_sink sink;
	struct response r;
	struct membuf m;

	(void)state;
	membuf_init(&m, &sink);
	response_init(&r);
	assert_int_equal(response_copy_body(&r, 200, "text/plain", "", 0), 0);
	assert_int_equal(response_send(&r, "rid", &sink, 0), 0);
	assert_non_null(strstr(m.p, "Status: 200 OK\r\n"));
	assert_non_null(strstr(m.p, "Content-Length: 0\r\n"));
	assert_memory_equal(m.p + m.n - 4, "\r\n\r\n", 4);
	response_free(&r);
}

/* Checks that out is a complete 500 response with the fallback body. */
static void
assert_fallback_500(const struct membuf *m)
{
	const char *body;
	char cl[64];
	cJSON *o, *item;

	assert_non_null(strstr(m->p, "Status: 500 Internal Server Error\r\n"));
	assert_non_null(
	    strstr(m->p, "Content-Type: application/problem+json\r\n"));
	assert_non_null(strstr(m->p, "Cache-Control: no-store\r\n"));
	assert_non_null(strstr(m->p, "X-Request-Id: rid\r\n"));
	body = strstr(m->p, "\r\n\r\n");
	assert_non_null(body);
	body += 4;
	(void)snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n", strlen(body));
	assert_non_null(strstr(m->p, cl));
	o = cJSON_Parse(body);
	assert_non_null(o);
	item = cJSON_GetObjectItemCaseSensitive(o, "type");
	assert_true(cJSON_IsString(item));
	assert_string_equal(item->valuestring, "/problems/internal-error");
	item = cJSON_GetObjectItemCaseSensitive(o, "status");
	assert_true(cJSON_IsNumber(item));
	assert_int_equal(item->valueint, 500);
	cJSON_Delete(o);
}

static void
test_send_null_body_fallback(void **state)
{
	struct response_sink sink;
	struct response r;
	struct membuf m;

	(void)state;
	membuf_init(&m, &sink);
	response_init(&r);
	assert_null(r.body);
	assert_int_equal(response_send(&r, "rid", &sink, 0), 0);
	assert_fallback_500(&m);
	response_free(&r);
}

/*
 * A response whose body went missing after its status was set: the fallback
 * body says 500, so the status line and Content-Type must say so too.
 */
static void
test_send_null_body_forces_500(void **state)
{
	struct response_sink sink;
	struct response r;
	struct membuf m;

	(void)state;
	membuf_init(&m, &sink);
	response_init(&r);
	response_set_body(&r, 201, "application/json", NULL, 0);
	assert_int_equal(response_send(&r, "rid", &sink, 0), 0);
	assert_fallback_500(&m);
	response_free(&r);
}

static void
test_send_sink_failure(void **state)
{
	struct response_sink sink;
	struct response r;
	struct membuf m;

	(void)state;
	response_init(&r);
	assert_int_equal(response_copy_body(&r, 201, "application/json", "{}",
	                     2),
	    0);
	membuf_init(&m, &sink);
	m.fail_after = 0; /* head fails */
	assert_int_equal(response_send(&r, "rid", &sink, 0), -1);
	membuf_init(&m, &sink);
	m.fail_after = 1; /* body fails */
	assert_int_equal(response_send(&r, "rid", &sink, 0), -1);
	response_free(&r);
}

static void
test_response_bodies(void **state)
{
	struct response r;
	char *b;

	(void)state;
	response_init(&r);
	assert_int_equal(r.status, 500);
	assert_null(r.body);
	assert_int_equal(response_copy_body(&r, 200, "text/plain", "abc", 2),
	    0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.content_type, "text/plain");
	assert_int_equal(r.body_len, 2);
	assert_string_equal(r.body, "ab"); /* copied and terminated */
	/* set_body replaces (and frees) the previous body */
	b = strdup("{}");
	assert_non_null(b);
	response_set_body(&r, 201, "application/json", b, 2);
	assert_ptr_equal(r.body, b);
	assert_int_equal(r.status, 201);
	/* a problem keeps an outcome already set */
	r.outcome = "replayed";
	response_problem(&r, PROB_IN_PROGRESS, NULL, NULL);
	assert_string_equal(r.outcome, "replayed");
	assert_int_equal(r.status, 409);
	response_free(&r);
	assert_null(r.body);
	response_free(&r); /* twice: harmless */
	response_free(NULL);
}

static void
test_http_reason(void **state)
{
	static const struct {
		int status;
		const char *reason;
	} want[] = {
		{ 200, "OK" },
		{ 201, "Created" },
		{ 400, "Bad Request" },
		{ 401, "Unauthorized" },
		{ 402, "Payment Required" },
		{ 404, "Not Found" },
		{ 405, "Method Not Allowed" },
		{ 409, "Conflict" },
		{ 413, "Content Too Large" },
		{ 415, "Unsupported Media Type" },
		{ 422, "Unprocessable Content" },
		{ 500, "Internal Server Error" },
		{ 502, "Bad Gateway" },
		{ 503, "Service Unavailable" },
		{ 504, "Gateway Timeout" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_string_equal(http_reason(want[i].status),
		    want[i].reason);
	assert_string_equal(http_reason(0), "");
	assert_string_equal(http_reason(299), "");
	assert_string_equal(http_reason(-1), "");
	assert_string_equal(http_reason(999), "");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_problem_table),
		cmocka_unit_test(test_problem_render_every_problem),
		cmocka_unit_test(test_problem_render_exact),
		cmocka_unit_test(test_problem_render_detail_null),
		cmocka_unit_test(test_problem_render_errors_array),
		cmocka_unit_test(test_problem_render_empty_extras_and_escaping),
		cmocka_unit_test(test_header_append),
		cmocka_unit_test(test_header_overflow),
		cmocka_unit_test(test_send_201),
		cmocka_unit_test(test_send_binary_body),
		cmocka_unit_test(test_send_head_only),
		cmocka_unit_test(test_send_empty_body),
		cmocka_unit_test(test_send_null_body_fallback),
		cmocka_unit_test(test_send_null_body_forces_500),
		cmocka_unit_test(test_send_sink_failure),
		cmocka_unit_test(test_response_bodies),
		cmocka_unit_test(test_http_reason),
	};

	return cmocka_run_group_tests_name("response", tests, NULL, NULL);
}
