/*
 * charge_answer.h - what one /charge request carries between its steps
 * (struct charge_ctx), and the answers and checks charge.c sequences.
 */
#ifndef CHARGE_CHARGE_ANSWER_H
#define CHARGE_CHARGE_ANSWER_H

#include <stddef.h>

#include <uv.h>

#include "charge_object.h"
#include "exchange.h"
#include "idem.h"
#include "provider.h"
#include "validate.h"

/* Everything one /charge request carries between its steps. */
struct charge_ctx {
	struct exchange *x; /* NULL once finished */
	struct worker *w;
	const char *principal;
	char key[IDEM_KEY_MAX + 1];
	size_t keylen;
	struct charge_params params;
	char *canon; /* canonical text of params (free) */
	size_t canonlen;
	char fingerprint[65];
	char params_hex[CHARGE_PARAMS_HEX_LEN + 1]; /* per-parameter digests */
	char owner[TOKEN_HEX_LEN + 1];
	char rkey[IDEM_RKEY_MAX];
	long long claim_us;         /* monotonic time the last claim was sent */
	long long wait_deadline_us; /* Prefer: wait; 0: none */
	long long pause_ms;         /* before the next claim while waiting */
	int execute;      /* 0 after a lapse: a claim is given back, not run */
	uv_timer_t timer; /* the provider's latency; Prefer: wait pauses */
	uv_work_t work;   /* a spill write or read on the worker pool */
	struct provider_result pr;
	struct idem_record out;    /* the outcome to record */
	enum problem prob;         /* out's problem, PROB_NONE for a charge */
	long long ttl_ms, now_ms;  /* of the record sent */
	struct idem_record replay; /* a recorded outcome to answer with */
	int io_rc;                 /* the pool's spill_write/spill_read */
	char *io_body;             /* spill_read's body (malloc'd) */
	char io_err[160];
};

/*
 * Seconds until our claim lapses by itself (at least 1): when the claim or
 * the record may have been written but we cannot tell, the key stays
 * in_progress under our owner until then, and a retry before it gets 409.
 */
long long claim_left_s(const struct charge_ctx *cx);

/* 503 service-unavailable with Retry-After: retry_s. */
void answer_unavailable(struct charge_ctx *cx, const char *detail,
    long long retry_s);

/* Counts a Redis error and logs why (the request's id). */
void redis_error_note(struct charge_ctx *cx, const char *why);

/* The same 503, counted as a Redis error and logged with why. */
void answer_redis_error(struct charge_ctx *cx, const char *why,
    const char *detail, long long retry_s);

/* 409; claim_created_ms: when the holder's claim was made (0: unknown). */
void answer_in_progress(struct charge_ctx *cx, long long claim_created_ms);

/* 422 with "mismatched_params" from the stored digests (may be ""). */
void answer_mismatch(struct charge_ctx *cx, const char *stored_params);

/*
 * Answers with cx->replay; a spilled body is cx->io_body as the pool's
 * spill_read left it (io_rc, io_err): 503 when the process lacked
 * resources, 500 stored-response-unavailable when the file is unsound.
 */
void answer_replay_body(struct charge_ctx *cx);

/* Renders cx->pr into cx->out and cx->prob. 0, or -1 on ENOMEM. */
int render_outcome(struct charge_ctx *cx);

/* Answers with cx->out, just recorded (Idempotent-Replayed: false). */
void answer_recorded(struct charge_ctx *cx);

/*
 * Checks method, API key, Idempotency-Key, content type and body; fills
 * cx->principal, key and params. 0 when the request may claim its key,
 * else -1 with the problem in the response.
 */
int charge_check(struct charge_ctx *cx);

#endif
