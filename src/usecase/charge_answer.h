/*
 * charge_answer.h - every answer the /charge use case gives, rendered in
 * one place, one text per problem: the checks' refusals, the charge and
 * its failures (also rendered for the record, by the use case and by the
 * completer alike), the replay, 409, 422, 503. Each fills a response; the
 * use case's state and sequence are charge.c's.
 */
#ifndef CHARGE_CHARGE_ANSWER_H
#define CHARGE_CHARGE_ANSWER_H

#include <stddef.h>

#include "config.h"
#include "idem.h"
#include "provider.h"
#include "response.h"
#include "validate.h"

/* Why a request may not claim its key (charge.c's check). */
enum charge_refusal {
	REFUSE_METHOD,       /* 405 */
	REFUSE_UNAUTHORIZED, /* 401 */
	REFUSE_MISSING_KEY,  /* 400 */
	REFUSE_INVALID_KEY,  /* 400 */
	REFUSE_MEDIA_TYPE,   /* 415 */
	REFUSE_TOO_LARGE,    /* 413 */
	REFUSE_BODY_TIMEOUT, /* 408 */
	REFUSE_INVALID,      /* 400 with v's errors */
};

/* The refusal; v: the validation errors (REFUSE_INVALID only). */
void answer_refusal(struct response *r, const struct config *cfg,
    enum charge_refusal why, const struct validation *v);

/* The answers whose text is fixed: one row each in charge_answer.c. */
enum charge_text {
	TEXT_STORE_DOWN,        /* 503: claim failed, nothing charged */
	TEXT_LAPSED,            /* 503: held up past the claim */
	TEXT_NOT_RECORDED,      /* 503: the record may not have been written */
	TEXT_NOT_DURABLE,       /* 503 outcome-not-durable */
	TEXT_STORED_BUSY,       /* 503: a spilled body cannot be read now */
	TEXT_STORED_UNREADABLE, /* 500 stored-response-unavailable */
	TEXT_INTERNAL,          /* 500 */
};

/* The fixed answer t, with Retry-After: retry_s unless it is 0. */
void answer_text(struct response *r, enum charge_text t, long long retry_s);

/*
 * 409; claim_created_ms: when the holder's claim was made (0: unknown),
 * for Idempotency-Key-Expires.
 */
void answer_in_progress(struct response *r, const struct config *cfg,
    long long claim_created_ms);

/* 422 naming the parameters whose stored digests differ from ours. */
void answer_mismatch(struct response *r, const char *stored_params,
    const char *our_params);

/*
 * What the provider's result pr becomes, as recorded: out (state, status,
 * content type, body, Retry-After) and *prob (PROB_NONE for a charge).
 * The body is a function of the request (canon, key) and the provider's
 * answer only, never of our clock: an outcome rendered again (a retry
 * after the record was lost, the completer) is byte for byte the same.
 * 0, or -1 on ENOMEM.
 */
int answer_outcome_render(const struct provider_result *pr, const char *canon,
    size_t canonlen, const char *key, size_t keylen, const struct config *cfg,
    struct idem_record *out, enum problem *prob);

/*
 * Answers with out, just recorded (out->body moves into r), expiring at
 * expires_ms. Idempotent-Replayed: true when the provider said its first
 * delivery of this call was a replay (an earlier run charged, and Redis
 * lost its record): the same answer, said the same way; else false.
 */
void answer_recorded(struct response *r, struct idem_record *out,
    enum problem prob, long long expires_ms, int replayed);

/*
 * Answers with a recorded outcome: body (malloc'd, moves into r) of
 * rec->body_len bytes (Idempotent-Replayed: true).
 */
void answer_replay(struct response *r, const struct idem_record *rec,
    char *body);

#endif
