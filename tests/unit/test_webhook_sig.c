/*
 * test_webhook_sig.c - Stripe-Signature as Stripe documents it: the valid
 * header, a wrong secret, a tampered payload, stale and future timestamps
 * (at the tolerance's edge both ways), two v1 values while a secret is
 * rolled (either secret, either signature), a missing header, malformed
 * headers, other schemes ignored. The expected signatures were computed
 * outside this code (Python's hmac).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "digest.h"
#include "webhook_sig.h"

#define T 1700000000LL
#define TOL 300L
#define PAYLOAD "{\"id\":\"evt_1\",\"type\":\"charge.succeeded\"}"
/* hmac.new(secret, b"1700000000." + PAYLOAD, sha256).hexdigest() */
#define SIG_NEW                                                                \
	"c0475716eb2200f1fe97fcf35a3c05d1fd4f8ba9a07a596730c8d18bb87c0672"
#define SIG_OLD                                                                \
	"1b4e18a09db4437c413d94446a1dcce3c3c3fa477acb82625a041e762fb66117"
#define SECRET_NEW "whsec_test_secret"
#define SECRET_OLD "whsec_old_secret"
#define ZEROS "0000000000000000000000000000000000000000000000000000000000000000"

static const char *const one[] = { SECRET_NEW };
static const char *const two[] = { SECRET_NEW, SECRET_OLD };

static enum wsig_status
verify(const char *header, const char *payload, const char *const *secrets,
    size_t n, long long now)
{
	return webhook_sig_verify(header, payload, strlen(payload), secrets, n,
	    now, TOL, NULL);
}

static void
test_valid(void **state)
{
	long long t = 0;

	(void)state;
	assert_int_equal(webhook_sig_verify("t=1700000000,v1=" SIG_NEW, PAYLOAD,
	                     strlen(PAYLOAD), one, 1, T, TOL, &t),
	    WSIG_OK);
	assert_int_equal(t, T);
}

static void
test_sign_matches_reference(void **state)
{
	char hex[WSIG_HEX_LEN + 1];

	(void)state;
	assert_int_equal(webhook_sig_sign(SECRET_NEW, T, PAYLOAD,
	                     strlen(PAYLOAD), hex),
	    0);
	assert_string_equal(hex, SIG_NEW);
	assert_int_equal(webhook_sig_sign(SECRET_OLD, T, PAYLOAD,
	                     strlen(PAYLOAD), hex),
	    0);
	assert_string_equal(hex, SIG_OLD);
}

static void
test_wrong_secret(void **state)
{
	static const char *const other[] = { "whsec_someone_else" };

	(void)state;
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW, PAYLOAD, other, 1,
	                     T),
	    WSIG_MISMATCH);
	/* a signature made with the old secret alone, only the new known */
	assert_int_equal(verify("t=1700000000,v1=" SIG_OLD, PAYLOAD, one, 1, T),
	    WSIG_MISMATCH);
	/* no secret at all never verifies */
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW, PAYLOAD, other, 0,
	                     T),
	    WSIG_MISMATCH);
}

static void
test_tampered(void **state)
{
	(void)state;
	/* one byte of the payload, the timestamp, one hex digit */
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW,
	                     "{\"id\":\"evt_2\",\"type\":\"charge.succeeded\"}",
	                     one, 1, T),
	    WSIG_MISMATCH);
	assert_int_equal(verify("t=1700000001,v1=" SIG_NEW, PAYLOAD, one, 1, T),
	    WSIG_MISMATCH);
	assert_int_equal(
	    verify(
	        "t=1700000000,v1="
	        "d0475716eb2200f1fe97fcf35a3c05d1fd4f8ba9a07a596730c8d18bb87c0672",
	        PAYLOAD, one, 1, T),
	    WSIG_MISMATCH);
	/* the payload with a trailing newline is another payload */
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW, PAYLOAD "\n", one,
	                     1, T),
	    WSIG_MISMATCH);
}

static void
test_stale_and_future(void **state)
{
	(void)state;
	/* at the edge: accepted; one second past it: refused */
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW, PAYLOAD, one, 1,
	                     T + TOL),
	    WSIG_OK);
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW, PAYLOAD, one, 1,
	                     T + TOL + 1),
	    WSIG_STALE);
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW, PAYLOAD, one, 1,
	                     T - TOL),
	    WSIG_OK);
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW, PAYLOAD, one, 1,
	                     T - TOL - 1),
	    WSIG_FUTURE);
	/* an unsigned stale header is a mismatch: the time is not trusted */
	assert_int_equal(verify("t=1700000000,v1=" ZEROS, PAYLOAD, one, 1,
	                     T + 10 * TOL),
	    WSIG_MISMATCH);
}

static void
test_rotation(void **state)
{
	(void)state;
	/* the provider signs with both while the secret is rolled */
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW ",v1=" SIG_OLD,
	                     PAYLOAD, two, 2, T),
	    WSIG_OK);
	assert_int_equal(verify("t=1700000000,v1=" SIG_OLD ",v1=" SIG_NEW,
	                     PAYLOAD, one, 1, T),
	    WSIG_OK);
	/* either secret configured verifies either signature */
	assert_int_equal(verify("t=1700000000,v1=" SIG_OLD, PAYLOAD, two, 2, T),
	    WSIG_OK);
	assert_int_equal(verify("t=1700000000,v1=" SIG_NEW, PAYLOAD, two, 2, T),
	    WSIG_OK);
	/* one bad v1 beside a good one does not spoil it */
	assert_int_equal(verify("t=1700000000,v1=" ZEROS ",v1=" SIG_NEW,
	                     PAYLOAD, one, 1, T),
	    WSIG_OK);
	assert_int_equal(verify("t=1700000000,v1=" ZEROS ",v1=" ZEROS, PAYLOAD,
	                     two, 2, T),
	    WSIG_MISMATCH);
}

static void
test_missing(void **state)
{
	(void)state;
	assert_int_equal(verify(NULL, PAYLOAD, one, 1, T), WSIG_MISSING);
	assert_int_equal(verify("", PAYLOAD, one, 1, T), WSIG_MISSING);
}

static void
test_malformed(void **state)
{
	static const char *const bad[] = {
		"garbage", "v1=" SIG_NEW,                /* no t */
		"t=,v1=" SIG_NEW,                        /* empty t */
		"t=17e8,v1=" SIG_NEW,                    /* not digits */
		"t=-1700000000,v1=" SIG_NEW,             /* a sign */
		"t=0,v1=" SIG_NEW,                       /* zero */
		"t=1700000000,t=1700000000,v1=" SIG_NEW, /* two t */
		"t=1700000000,v1=abc",                   /* a short v1 */
		"t=1700000000,v1=" SIG_NEW "0",          /* a long v1 */
		"t=1700000000,v1=C0475716EB2200F1FE97FCF35A3C05D1FD4F8BA9A07A596730C8D18BB87C0672",
		"t=1700000000,v1=" SIG_NEW ",",  /* an empty item */
		"t=1700000000,,v1=" SIG_NEW,     /* an empty item */
		"t=1700000000,v1" SIG_NEW,       /* no '=' */
		"t=1700000000,=x,v1=" SIG_NEW,   /* no name */
		"t=1234567890123456,v1=" SIG_NEW /* too many digits */
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum wsig_status st = verify(bad[i], PAYLOAD, one, 1, T);

		if (st != WSIG_MALFORMED)
			fail_msg("'%s': %s, want malformed", bad[i],
			    webhook_sig_name(st));
	}
	/* a t but no v1 at all: said apart */
	assert_int_equal(verify("t=1700000000", PAYLOAD, one, 1, T),
	    WSIG_NO_V1);
	assert_int_equal(verify("t=1700000000,v0=" SIG_NEW, PAYLOAD, one, 1, T),
	    WSIG_NO_V1);
}

static void
test_other_schemes_ignored(void **state)
{
	(void)state;
	/* v0 (Stripe's test scheme) and unknown items, in any order */
	assert_int_equal(verify("v0=deadbeef,t=1700000000,x=y,v1=" SIG_NEW,
	                     PAYLOAD, one, 1, T),
	    WSIG_OK);
	assert_int_equal(verify(" t=1700000000 , v1=" SIG_NEW " ", PAYLOAD, one,
	                     1, T),
	    WSIG_OK);
}

static void
test_texts(void **state)
{
	enum wsig_status st;

	(void)state;
	for (st = WSIG_OK; st <= WSIG_ERROR; st++) {
		assert_non_null(webhook_sig_detail(st));
		assert_non_null(webhook_sig_name(st));
	}
	assert_string_equal(webhook_sig_name(WSIG_STALE), "stale");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_sign_matches_reference),
		cmocka_unit_test(test_wrong_secret),
		cmocka_unit_test(test_tampered),
		cmocka_unit_test(test_stale_and_future),
		cmocka_unit_test(test_rotation),
		cmocka_unit_test(test_missing),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_other_schemes_ignored),
		cmocka_unit_test(test_texts),
	};
	int rc;

	if (digest_init() != 0)
		return 1;
	rc = cmocka_run_group_tests_name("webhook_sig", tests, NULL, NULL);
	digest_thread_done();
	return rc;
}
