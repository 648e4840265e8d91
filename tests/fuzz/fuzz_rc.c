/*
 * fuzz_rc.c - the target "rc" of fuzz.c: what charge-reconcile reads from
 * outside (src/reconcile/rc_wire.c), the input as a page of the
 * provider's list of charges (rc_page_parse), one charge (rc_charge_parse),
 * a record's 201 body (rc_body_charge) and a --since/--until time
 * (rc_time_parse). Each charge read must be within its bounds: an id,
 * every string ended in its buffer, the metadata both halves or none, a
 * request only when it has the downstream key's shape.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "rc_wire.h"

#define FUZZ_PAGE_MAX 8 /* charges a page may hold here (more: refused) */
#define FUZZ_NOW_S 1796616600LL
#define FUZZ_AMOUNT_MAX 999999999999LL
#define FUZZ_CREATED_MAX 253402300799LL
#define FUZZ_SINCE_MAX (3650LL * 86400) /* rc_wire.c: ten years back */

static void
check_str(const char *s, size_t cap)
{
	if (memchr(s, '\0', cap) == NULL)
		abort();
}

static void
check_charge(const struct rc_charge *c)
{
	check_str(c->id, sizeof(c->id));
	check_str(c->currency, sizeof(c->currency));
	check_str(c->principal, sizeof(c->principal));
	check_str(c->key, sizeof(c->key));
	check_str(c->request, sizeof(c->request));
	if (c->id[0] == '\0' || c->amount < -1 || c->amount > FUZZ_AMOUNT_MAX ||
	    c->created < -1 || c->created > FUZZ_CREATED_MAX ||
	    (c->status != RC_CHARGE_SUCCEEDED &&
	        c->status != RC_CHARGE_FAILED &&
	        c->status != RC_CHARGE_OTHER) ||
	    c->keylen != strlen(c->key) ||
	    (c->principal[0] == '\0') != (c->keylen == 0) ||
	    (c->request[0] != '\0' && !rc_is_request(c->request)))
		abort();
	if (c->request[0] != '\0')
		(void)rc_request_hash(c->request);
	(void)rc_id_hash(c->id, strlen(c->id));
}

static void
fuzz_page(const uint8_t *data, size_t size)
{
	struct rc_charge out[FUZZ_PAGE_MAX];
	char err[256];
	size_t n = FUZZ_PAGE_MAX + 1, i;
	int more = -1;

	if (rc_page_parse((const char *)data, size, out, FUZZ_PAGE_MAX, &n,
	        &more, err, sizeof(err)) != 0) {
		if (err[0] == '\0' || n > FUZZ_PAGE_MAX)
			abort();
		return;
	}
	if (n > FUZZ_PAGE_MAX || (more != 0 && more != 1))
		abort();
	for (i = 0; i < n; i++)
		check_charge(&out[i]);
}

static void
fuzz_one(const uint8_t *data, size_t size)
{
	char id[RC_ID_MAX], cur[RC_CURRENCY_MAX], err[256];
	struct rc_charge c;
	long long amount = -2;

	if (rc_charge_parse((const char *)data, size, &c, err, sizeof(err)) ==
	    0)
		check_charge(&c);
	if (rc_body_charge((const char *)data, size, id, &amount, cur) == 0) {
		check_str(id, sizeof(id));
		check_str(cur, sizeof(cur));
		if (amount < 0 || amount > FUZZ_AMOUNT_MAX)
			abort();
	}
}

static void
fuzz_time(const uint8_t *data, size_t size)
{
	char err[512], *s;
	long long t = -1;

	if (size > 64 || (s = fuzz_cstr(data, size)) == NULL)
		return;
	if (rc_time_parse(s, FUZZ_NOW_S, &t, err, sizeof(err)) == 0) {
		/* never before 1970 less ten years, never past 9999 */
		if (t < -FUZZ_SINCE_MAX || t > FUZZ_CREATED_MAX + 86400)
			abort();
	} else if (err[0] == '\0') {
		abort();
	}
	free(s);
}

void
fuzz_rc(const uint8_t *data, size_t size)
{
	fuzz_page(data, size);
	fuzz_one(data, size);
	fuzz_time(data, size);
}
