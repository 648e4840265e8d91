/*
 * fuzz_wire.c - the target "wire" of fuzz.c: the provider's JSON as the
 * responder reads it (src/provider/provider_wire.c), the input as a body.
 *
 * A 200's charge (wire_parse_charge, whose fast path reads without a
 * tree) against a reference made here with cJSON, the rule the fast path
 * must follow: both accept the same bodies and read the same charge from
 * them, or the target aborts; the reconciler's reading of the same charge
 * (rc_charge_parse) agrees with it. An error body for a 402 and a 429
 * (wire_parse_error, then wire_classify), a page of the list
 * (wire_parse_list) and of the search (wire_parse_search) for a request that the seeds' charges name: every
 * string bounded and NUL-terminated, a found charge really this request's.
 */
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "fuzz.h"
#include "provider_wire.h"
#include "rc_wire.h"

/* the request of tests/fuzz/capture_seeds.py's charges */
#define FUZZ_REQUEST                                                            \
	"charge_5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f5f" \
	"5f"
#define FUZZ_AMOUNT 1999
#define FUZZ_CREATED_RC_MAX 253402300799LL /* rc_wire.c: 9999-12-31 */
#define FUZZ_AMOUNT_RC_MAX 999999999999LL  /* rc_wire.c's amounts */

/* A string of a fixed buffer: ended within it. */
static void
check_str(const char *s, size_t cap)
{
	if (memchr(s, '\0', cap) == NULL)
		abort();
}

/* A charge id as the responder puts it into its JSON unescaped. */
static int
id_ok(const char *id)
{
	size_t i;

	for (i = 0; id[i] != '\0'; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') ||
		        (id[i] >= 'A' && id[i] <= 'Z') ||
		        (id[i] >= '0' && id[i] <= '9') || id[i] == '_'))
			return 0;
	return i > 0;
}

/* The reference: a succeeded charge object as cJSON reads it. */
static int
charge_reference(const uint8_t *body, size_t len, struct provider_result *res)
{
	cJSON *root = cJSON_ParseWithLength((const char *)body, len);
	const cJSON *obj = cJSON_GetObjectItemCaseSensitive(root, "object");
	int rc = -1;

	if (cJSON_IsObject(root) && cJSON_IsString(obj) &&
	    strcmp(obj->valuestring, "charge") == 0 &&
	    wire_charge_object(root, res) == 0 &&
	    res->outcome == PROV_SUCCEEDED)
		rc = 0;
	cJSON_Delete(root);
	return rc;
}

static void
fuzz_charge(const uint8_t *data, size_t size)
{
	struct provider_result got, ref;
	struct rc_charge c;
	char err[128];
	int rg, rr;

	memset(&got, 0x5a, sizeof(got));
	memset(&ref, 0xa5, sizeof(ref));
	rg = wire_parse_charge((const char *)data, size, &got);
	rr = charge_reference(data, size, &ref);
	if (rg != rr)
		abort();
	if (rg != 0)
		return;
	check_str(got.charge_id, sizeof(got.charge_id));
	check_str(got.seen_currency, sizeof(got.seen_currency));
	check_str(got.seen_request, sizeof(got.seen_request));
	if (got.outcome != PROV_SUCCEEDED || got.decline_code != NULL ||
	    !id_ok(got.charge_id) ||
	    strcmp(got.charge_id, ref.charge_id) != 0 ||
	    got.created != ref.created || got.created < 0 ||
	    got.seen_amount != ref.seen_amount ||
	    strcmp(got.seen_currency, ref.seen_currency) != 0 ||
	    strcmp(got.seen_request, ref.seen_request) != 0)
		abort();
	/* charge-reconcile reads the same charge (within its own bounds) */
	if (rc_charge_parse((const char *)data, size, &c, err, sizeof(err)) !=
	        0 ||
	    strcmp(c.id, got.charge_id) != 0 ||
	    c.status != RC_CHARGE_SUCCEEDED ||
	    (got.created <= FUZZ_CREATED_RC_MAX && c.created != got.created) ||
	    (got.seen_amount <= FUZZ_AMOUNT_RC_MAX &&
	        c.amount != got.seen_amount))
		abort();
}

static void
fuzz_error(const uint8_t *data, size_t size, long status)
{
	char type[PROVIDER_CODE_MAX], code[PROVIDER_CODE_MAX];
	struct provider_result res;
	struct wire_attempt a;
	struct wire_verdict v;

	memset(&res, 0x5a, sizeof(res));
	res.outcome = PROV_ERROR;
	if (wire_parse_error((const char *)data, size, status, type, code,
	        &res) != 0)
		return;
	check_str(type, sizeof(type));
	check_str(code, sizeof(code));
	if (status == 402) {
		check_str(res.charge_id, sizeof(res.charge_id));
		check_str(res.decline_buf, sizeof(res.decline_buf));
		if (res.outcome != PROV_DECLINED ||
		    res.decline_code != res.decline_buf ||
		    res.decline_buf[0] == '\0' ||
		    (res.charge_id[0] != '\0' && !id_ok(res.charge_id)))
			abort();
	} else if (res.outcome != PROV_ERROR) {
		abort();
	}
	a.status = status;
	a.err_type = type[0] != '\0' ? type : NULL;
	a.err_code = code[0] != '\0' ? code : NULL;
	a.should_retry = -1;
	v = wire_classify(&a);
	if (v.label == NULL ||
	    (status == 402 ? v.cls != WIRE_DECLINE : v.cls != WIRE_RETRY))
		abort();
}

/* One page of the list (search 0) or of the search (search 1). */
static void
fuzz_page(const uint8_t *data, size_t size, int search)
{
	static const struct settle_expect e = { FUZZ_REQUEST, FUZZ_AMOUNT,
		"usd" };
	struct provider_result res;
	char after[PROVIDER_ID_MAX];
	enum settle_probe p;
	long long last = -1;
	int more;

	memset(&res, 0x5a, sizeof(res));
	memset(after, 0x5a, sizeof(after));
	if (search)
		p = wire_parse_search((const char *)data, size, &e, &res, &more,
		    after);
	else
		p = wire_parse_list((const char *)data, size, &e, &res, &more,
		    after, &last);
	check_str(after, sizeof(after));
	/* the list's cursor is a charge id; the search's a token */
	if (!search && after[0] != '\0' && !id_ok(after))
		abort();
	if (!search && last < 0)
		abort();
	switch (p) {
	case PROBE_FOUND:
	case PROBE_FOUND_DECLINED:
		check_str(res.charge_id, sizeof(res.charge_id));
		check_str(res.seen_request, sizeof(res.seen_request));
		check_str(res.seen_currency, sizeof(res.seen_currency));
		if (!id_ok(res.charge_id) || (!search && after[0] == '\0') ||
		    strcmp(res.seen_request, e.request) != 0 ||
		    res.seen_amount != e.amount ||
		    strcmp(res.seen_currency, e.currency) != 0)
			abort();
		if (p == PROBE_FOUND ? res.outcome != PROV_SUCCEEDED ||
		            res.decline_code != NULL
		                     : res.outcome != PROV_DECLINED ||
		            res.decline_code != res.decline_buf ||
		            memchr(res.decline_buf, '\0',
		                sizeof(res.decline_buf)) == NULL)
			abort();
		break;
	case PROBE_NONE:
	case PROBE_NOT_OURS:
	case PROBE_INCOMPLETE: break;
	default: abort();
	}
	if (more != 0 && more != 1)
		abort();
}

void
fuzz_wire(const uint8_t *data, size_t size)
{
	fuzz_charge(data, size);
	fuzz_error(data, size, 402);
	fuzz_error(data, size, 429);
	fuzz_page(data, size, 0);
	fuzz_page(data, size, 1);
}
