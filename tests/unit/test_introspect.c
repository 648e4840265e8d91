/*
 * test_introspect.c - the body of GET /charge/keys/<key>: members, RFC 3339
 * times, null status while in progress, JSON escaping of the key.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "introspect.h"

static void
assert_render(const char *key, const struct idem_info *info,
    long long expires_ms, const char *want)
{
	size_t len = 0;
	char *got = introspect_render(key, info, expires_ms, &len);

	assert_non_null(got);
	assert_string_equal(got, want);
	assert_int_equal(len, strlen(want));
	free(got);
}

static void
test_render_completed(void **state)
{
	struct idem_info info;

	(void)state;
	memset(&info, 0, sizeof(info));
	(void)strcpy(info.state, "completed");
	info.created_ms = 1795460400123LL;
	info.updated_ms = 1795460400456LL;
	info.expires_ms = 1795546800456LL;
	info.status = 201;
	assert_render("order-1001", &info, info.expires_ms,
	    "{\"key\":\"order-1001\",\"state\":\"completed\","
	    "\"created\":\"2026-11-23T19:00:00.123Z\","
	    "\"updated\":\"2026-11-23T19:00:00.456Z\","
	    "\"expires\":\"2026-11-24T19:00:00.456Z\",\"status\":201}");
	(void)strcpy(info.state, "failed");
	info.status = 402;
	assert_render("a\"b\\c/d", &info, info.expires_ms,
	    "{\"key\":\"a\\\"b\\\\c/d\",\"state\":\"failed\","
	    "\"created\":\"2026-11-23T19:00:00.123Z\","
	    "\"updated\":\"2026-11-23T19:00:00.456Z\","
	    "\"expires\":\"2026-11-24T19:00:00.456Z\",\"status\":402}");
	/* an expiry that is not known (an older record without a TTL): null */
	assert_render("k", &info, 0,
	    "{\"key\":\"k\",\"state\":\"failed\","
	    "\"created\":\"2026-11-23T19:00:00.123Z\","
	    "\"updated\":\"2026-11-23T19:00:00.456Z\","
	    "\"expires\":null,\"status\":402}");
}

static void
test_render_in_progress(void **state)
{
	struct idem_info info;

	(void)state;
	memset(&info, 0, sizeof(info));
	(void)strcpy(info.state, "in_progress");
	info.created_ms = 1795460400123LL;
	/* a claim's update is its creation; its status is null */
	assert_render("k", &info, 1795460430123LL,
	    "{\"key\":\"k\",\"state\":\"in_progress\","
	    "\"created\":\"2026-11-23T19:00:00.123Z\","
	    "\"updated\":\"2026-11-23T19:00:00.123Z\","
	    "\"expires\":\"2026-11-23T19:00:30.123Z\",\"status\":null}");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_render_completed),
		cmocka_unit_test(test_render_in_progress),
	};

	return cmocka_run_group_tests_name("introspect", tests, NULL, NULL);
}
