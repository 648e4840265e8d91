/*
 * test_provider.c - the simulated provider: outcomes by token, the
 * deterministic charge id, the ledger line per call and the timeout.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "digest.h"
#include "provider.h"
#include "clock.h"

#define SECRET "unit-test-secret"
#define FP "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
#define FP2 "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"

static void
test_outcomes(void **state)
{
	static const char *succeed[] = {
		"tok_visa",
		"tok_mastercard",
		"tok_",
		"tok_x",
		"tok_chargedeclined",
		"tok_chargeDeclined_",
		"tok_ChargeDeclined",
		"tok_insufficientFundsX",
		"tok_providerError2",
		"tok_providerTimeou",
		"tok_providerTimeoutt",
	};
	const char *code = "junk";
	size_t i;

	(void)state;
	assert_int_equal(provider_outcome_for("tok_chargeDeclined", &code),
	    PROV_DECLINED);
	assert_non_null(code);
	assert_string_equal(code, "card_declined");
	code = "junk";
	assert_int_equal(provider_outcome_for("tok_insufficientFunds", &code),
	    PROV_DECLINED);
	assert_non_null(code);
	assert_string_equal(code, "insufficient_funds");
	code = "junk";
	assert_int_equal(provider_outcome_for("tok_providerError", &code),
	    PROV_ERROR);
	assert_null(code);
	code = "junk";
	assert_int_equal(provider_outcome_for("tok_providerTimeout", &code),
	    PROV_TIMEOUT);
	assert_null(code);
	/* a chain: the in-process provider reads its first element */
	assert_int_equal(provider_outcome_for("tok_chargeDeclined|tok_visa",
	                     &code),
	    PROV_DECLINED);
	assert_int_equal(provider_outcome_for("tok_visa|tok_chargeDeclined",
	                     &code),
	    PROV_SUCCEEDED);
	for (i = 0; i < sizeof(succeed) / sizeof(succeed[0]); i++) {
		code = "junk";
		assert_int_equal(provider_outcome_for(succeed[i], &code),
		    PROV_SUCCEEDED);
		assert_null(code);
	}
}

static void
assert_charge_id_format(const char *id)
{
	size_t i;

	assert_int_equal(strlen(id), 3 + CHARGE_ID_HEX_LEN);
	assert_memory_equal(id, "ch_", 3);
	for (i = 3; id[i] != '\0'; i++)
		assert_true((id[i] >= '0' && id[i] <= '9') ||
		    (id[i] >= 'a' && id[i] <= 'f'));
}

static void
id(const char *secret, const char *principal, const char *key,
    char out[4 + CHARGE_ID_HEX_LEN])
{
	memset(out, 'X', 4 + CHARGE_ID_HEX_LEN);
	assert_int_equal(provider_charge_id(secret, principal, key, strlen(key),
	                     FP, out),
	    0);
	assert_charge_id_format(out);
}

static void
test_charge_id(void **state)
{
	char a[4 + CHARGE_ID_HEX_LEN], b[4 + CHARGE_ID_HEX_LEN];

	(void)state;
	id(SECRET, "demo", "k1", a);
	id(SECRET, "demo", "k1", b);
	assert_string_equal(a, b);
	id(SECRET, "acme", "k1", b);
	assert_string_not_equal(a, b);
	id(SECRET, "demo", "k2", b);
	assert_string_not_equal(a, b);
	id("another-secret", "demo", "k1", b);
	assert_string_not_equal(a, b);
	/* naive concatenation would make these equal */
	id(SECRET, "ab", "c", a);
	id(SECRET, "a", "bc", b);
	assert_string_not_equal(a, b);
	id(SECRET, "demo", "k1", a);
	id(SECRET, "demok", "1", b);
	assert_string_not_equal(a, b);
	/* keylen bounds the key */
	assert_int_equal(provider_charge_id(SECRET, "demo", "k1xyz", 2, FP, b),
	    0);
	assert_string_equal(a, b);
	/* the same key with another request is another charge */
	assert_int_equal(provider_charge_id(SECRET, "demo", "k1", 2, FP2, b),
	    0);
	assert_string_not_equal(a, b);
	assert_int_equal(provider_charge_id(SECRET, "demo", "k1", 2, FP, b), 0);
	assert_string_equal(a, b);
}

/*
 * The documented construction: HMAC-SHA256(secret, principal NUL key NUL
 * fingerprint).
 */
static void
test_charge_id_construction(void **state)
{
	static const char msg[] = "demo\0order-42\0" FP;
	unsigned char mac[SHA256_LEN];
	char hex[2 * SHA256_LEN + 1], want[4 + CHARGE_ID_HEX_LEN];
	char got[4 + CHARGE_ID_HEX_LEN];

	(void)state;
	assert_int_equal(digest_hmac_sha256(SECRET, strlen(SECRET), msg,
	                     sizeof(msg) - 1, mac),
	    0);
	digest_hex(mac, sizeof(mac), hex);
	(void)snprintf(want, sizeof(want), "ch_%.24s", hex);
	id(SECRET, "demo", "order-42", got);
	assert_string_equal(got, want);
}

static void
test_charge_id_limits(void **state)
{
	char principal[PRINCIPAL_MAX + 2], key[IDEM_KEY_MAX + 2];
	char out[4 + CHARGE_ID_HEX_LEN];

	(void)state;
	memset(principal, 'p', sizeof(principal));
	principal[PRINCIPAL_MAX] = '\0';
	memset(key, 'k', sizeof(key));
	assert_int_equal(provider_charge_id(SECRET, principal, key,
	                     IDEM_KEY_MAX, FP, out),
	    0);
	assert_charge_id_format(out);
	assert_int_equal(provider_charge_id(SECRET, principal, key,
	                     IDEM_KEY_MAX + 1, FP, out),
	    -1);
	assert_int_equal(provider_charge_id(SECRET, principal, key, 1, FP "0",
	                     out),
	    -1);
	principal[PRINCIPAL_MAX] = 'p';
	principal[PRINCIPAL_MAX + 1] = '\0';
	assert_int_equal(provider_charge_id(SECRET, principal, key, 1, FP, out),
	    -1);
}

struct fixture {
	char dir[64];
	char ledger[128];
	struct config cfg;
	int ledger_fd;
};

static int
setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (fx == NULL)
		return -1;
	(void)snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_provider.XXXXXX");
	if (mkdtemp(fx->dir) == NULL) {
		free(fx);
		return -1;
	}
	(void)snprintf(fx->ledger, sizeof(fx->ledger), "%s/ledger.log",
	    fx->dir);
	fx->ledger_fd = -1;
	config_defaults(&fx->cfg, fx->dir);
	fx->cfg.provider_latency_ms = 0;
	fx->cfg.provider_timeout_ms = 10;
	(void)snprintf(fx->cfg.provider_ledger, sizeof(fx->cfg.provider_ledger),
	    "%s", fx->ledger);
	(void)snprintf(fx->cfg.provider_secret, sizeof(fx->cfg.provider_secret),
	    "%s", SECRET);
	*state = fx;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *fx = *state;

	provider_close(&fx->ledger_fd);
	(void)unlink(fx->ledger);
	(void)rmdir(fx->dir);
	free(fx);
	return 0;
}

/* Reads the ledger into lines[] (at most max); returns the line count. */
static int
ledger_lines(const char *path, char lines[][1024], int max)
{
	FILE *f = fopen(path, "r");
	int n = 0;

	if (f == NULL)
		return 0;
	while (n < max && fgets(lines[n], 1024, f) != NULL) {
		size_t len = strlen(lines[n]);

		assert_true(len > 0 && lines[n][len - 1] == '\n');
		lines[n][len - 1] = '\0';
		n++;
	}
	assert_true(fgetc(f) == EOF);
	(void)fclose(f);
	return n;
}

/* Splits line on tabs into exactly 7 fields and checks them. */
static void
assert_ledger_line(char *line, const char *principal, const char *key,
    const char *charge_id, const char *outcome, const char *amount,
    const char *currency, long long t0_ms, long long t1_ms)
{
	char *field[8], *p = line, *tab;
	long long ms;
	char *end;
	int n = 0;

	for (;;) {
		assert_true(n < 8);
		field[n++] = p;
		if ((tab = strchr(p, '\t')) == NULL)
			break;
		*tab = '\0';
		p = tab + 1;
	}
	assert_int_equal(n, 7);
	ms = strtoll(field[0], &end, 10);
	assert_true(*field[0] != '\0' && *end == '\0');
	assert_in_range(ms, t0_ms, t1_ms);
	assert_string_equal(field[1], principal);
	assert_string_equal(field[2], key);
	assert_string_equal(field[3], charge_id);
	assert_string_equal(field[4], outcome);
	assert_string_equal(field[5], amount);
	assert_string_equal(field[6], currency);
}

static long long
mono_ms(void)
{
	struct timespec ts;

	assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &ts), 0);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
test_charge_succeeded(void **state)
{
	struct fixture *fx = *state;
	struct provider_result r1, r2;
	char want[4 + CHARGE_ID_HEX_LEN];
	char lines[4][1024];
	long long t0, t1;

	t0 = now_wall_ms();
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo",
	                     "order-1", 7, FP, 1999, "usd", "tok_visa", 0, &r1),
	    0);
	t1 = now_wall_ms();
	assert_int_equal(r1.outcome, PROV_SUCCEEDED);
	assert_null(r1.decline_code);
	assert_int_equal(provider_charge_id(SECRET, "demo", "order-1", 7, FP,
	                     want),
	    0);
	assert_string_equal(r1.charge_id, want);
	assert_in_range(r1.created, t0 / 1000, t1 / 1000);
	assert_int_equal(ledger_lines(fx->ledger, lines, 4), 1);
	assert_ledger_line(lines[0], "demo", "order-1", want, "succeeded",
	    "1999", "usd", t0, t1);

	/* the same key again: the same charge, and a second ledger line */
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo",
	                     "order-1", 7, FP, 1999, "usd", "tok_visa", 0, &r2),
	    0);
	t1 = now_wall_ms();
	assert_string_equal(r2.charge_id, r1.charge_id);
	assert_int_equal(ledger_lines(fx->ledger, lines, 4), 2);
	assert_ledger_line(lines[1], "demo", "order-1", want, "succeeded",
	    "1999", "usd", t0, t1);

	/* another principal with the same key: another charge */
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "acme",
	                     "order-1", 7, FP, 5, "eur", "tok_visa", 0, &r2),
	    0);
	assert_string_not_equal(r2.charge_id, r1.charge_id);
	assert_int_equal(ledger_lines(fx->ledger, lines, 4), 3);
	assert_ledger_line(lines[2], "acme", "order-1", r2.charge_id,
	    "succeeded", "5", "eur", t0, now_wall_ms());
}

static void
test_charge_declined_and_error(void **state)
{
	struct fixture *fx = *state;
	struct provider_result r;
	char lines[4][1024];
	long long t0 = now_wall_ms();

	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo", "d1",
	                     2, FP, 100, "usd", "tok_chargeDeclined", 0, &r),
	    0);
	assert_int_equal(r.outcome, PROV_DECLINED);
	assert_string_equal(r.decline_code, "card_declined");
	assert_charge_id_format(r.charge_id);
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo", "d2",
	                     2, FP, 200, "usd", "tok_insufficientFunds", 0, &r),
	    0);
	assert_int_equal(r.outcome, PROV_DECLINED);
	assert_string_equal(r.decline_code, "insufficient_funds");
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo", "e1",
	                     2, FP, 300, "gbp", "tok_providerError", 0, &r),
	    0);
	assert_int_equal(r.outcome, PROV_ERROR);
	assert_null(r.decline_code);
	assert_int_equal(ledger_lines(fx->ledger, lines, 4), 3);
	{
		char id1[4 + CHARGE_ID_HEX_LEN], id2[4 + CHARGE_ID_HEX_LEN];
		char id3[4 + CHARGE_ID_HEX_LEN];
		long long t1 = now_wall_ms();

		id(SECRET, "demo", "d1", id1);
		id(SECRET, "demo", "d2", id2);
		id(SECRET, "demo", "e1", id3);
		assert_ledger_line(lines[0], "demo", "d1", id1, "declined",
		    "100", "usd", t0, t1);
		assert_ledger_line(lines[1], "demo", "d2", id2, "declined",
		    "200", "usd", t0, t1);
		assert_ledger_line(lines[2], "demo", "e1", id3, "error", "300",
		    "gbp", t0, t1);
	}
}

static void
test_charge_timeout(void **state)
{
	struct fixture *fx = *state;
	struct provider_result r;
	char lines[2][1024], want[4 + CHARGE_ID_HEX_LEN];
	long long t0, m0, m1;

	fx->cfg.provider_timeout_ms = 60;
	t0 = now_wall_ms();
	m0 = mono_ms();
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo", "t1",
	                     2, FP, 1999, "usd", "tok_providerTimeout", 0, &r),
	    0);
	m1 = mono_ms();
	assert_true(m1 - m0 >= 60);
	assert_true(m1 - m0 < 5000);
	assert_int_equal(r.outcome, PROV_TIMEOUT);
	assert_null(r.decline_code);
	id(SECRET, "demo", "t1", want);
	assert_string_equal(r.charge_id, want);
	assert_int_equal(ledger_lines(fx->ledger, lines, 2), 1);
	assert_ledger_line(lines[0], "demo", "t1", want, "timeout", "1999",
	    "usd", t0, now_wall_ms());

	/* the default test config: timeout 10 ms */
	fx->cfg.provider_timeout_ms = 10;
	m0 = mono_ms();
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo", "t2",
	                     2, FP, 1, "usd", "tok_providerTimeout", 0, &r),
	    0);
	assert_true(mono_ms() - m0 >= 10);
}

static void
test_charge_latency(void **state)
{
	struct fixture *fx = *state;
	struct provider_result r;
	long long m0;

	fx->cfg.provider_latency_ms = 40;
	fx->cfg.provider_timeout_ms = 5000;
	m0 = mono_ms();
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo", "l1",
	                     2, FP, 1, "usd", "tok_visa", 0, &r),
	    0);
	assert_true(mono_ms() - m0 >= 40);
	assert_true(mono_ms() - m0 < 5000); /* not the timeout */
}

/*
 * A call that reaches the charge after the caller's deadline (its claim on
 * the key has lapsed: the worker was stopped) charges nothing: no ledger
 * line, PROV_LAPSED.
 */
static void
test_charge_deadline(void **state)
{
	struct fixture *fx = *state;
	struct provider_result r;
	char lines[2][1024];
	long long now_us;

	fx->cfg.provider_latency_ms = 30;
	now_us = now_mono_us();
	/* the deadline passes during the provider's latency */
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo",
	                     "dl1", 3, FP, 1, "usd", "tok_visa", now_us + 10000,
	                     &r),
	    0);
	assert_int_equal(r.outcome, PROV_LAPSED);
	assert_int_equal(ledger_lines(fx->ledger, lines, 2), 0);
	/* well within it: charged as usual */
	now_us = now_mono_us();
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo",
	                     "dl2", 3, FP, 1, "usd", "tok_visa",
	                     now_us + 5000000, &r),
	    0);
	assert_int_equal(r.outcome, PROV_SUCCEEDED);
	assert_int_equal(ledger_lines(fx->ledger, lines, 2), 1);
}

static void
test_charge_long_fields(void **state)
{
	struct fixture *fx = *state;
	char principal[PRINCIPAL_MAX + 1], key[IDEM_KEY_MAX + 1];
	char lines[2][1024];
	struct provider_result r;
	long long t0 = now_wall_ms();

	memset(principal, 'P', PRINCIPAL_MAX);
	principal[PRINCIPAL_MAX] = '\0';
	memset(key, '~', IDEM_KEY_MAX);
	key[IDEM_KEY_MAX] = '\0';
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, principal,
	                     key, IDEM_KEY_MAX, FP, 99999999, "usd", "tok_visa",
	                     0, &r),
	    0);
	assert_int_equal(ledger_lines(fx->ledger, lines, 2), 1);
	assert_ledger_line(lines[0], principal, key, r.charge_id, "succeeded",
	    "99999999", "usd", t0, now_wall_ms());
}

static void
test_charge_unwritable_ledger(void **state)
{
	struct fixture *fx = *state;
	struct provider_result r;

	/* a directory */
	(void)snprintf(fx->cfg.provider_ledger, sizeof(fx->cfg.provider_ledger),
	    "%s", fx->dir);
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo", "k",
	                     1, FP, 1, "usd", "tok_visa", 0, &r),
	    -1);
	/* a missing directory */
	(void)snprintf(fx->cfg.provider_ledger, sizeof(fx->cfg.provider_ledger),
	    "%s/missing/ledger.log", fx->dir);
	assert_int_equal(provider_charge(&fx->cfg, &fx->ledger_fd, "demo", "k",
	                     1, FP, 1, "usd", "tok_visa", 0, &r),
	    -1);
	assert_int_equal(access(fx->ledger, F_OK), -1);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

static int
group_setup(void **state)
{
	(void)state;
	return digest_init();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_outcomes),
		cmocka_unit_test(test_charge_id),
		cmocka_unit_test(test_charge_id_construction),
		cmocka_unit_test(test_charge_id_limits),
		T(test_charge_succeeded),
		T(test_charge_declined_and_error),
		T(test_charge_timeout),
		T(test_charge_latency),
		T(test_charge_deadline),
		T(test_charge_long_fields),
		T(test_charge_unwritable_ledger),
	};

	return cmocka_run_group_tests_name("provider", tests, group_setup,
	    NULL);
}
