/*
 * idem.h - the idempotency store: claim, record and release an
 * Idempotency-Key through the Lua scripts of lua/, and decode records.
 */
#ifndef CHARGE_IDEM_H
#define CHARGE_IDEM_H

#include <stddef.h>

#include "defaults.h"
#include "redis.h"
#include "spill.h"

enum idem_status {
	IDEM_CLAIMED,       /* the caller owns the key: execute */
	IDEM_REPLAY,        /* rec holds the recorded outcome */
	IDEM_IN_PROGRESS,   /* another attempt holds the claim */
	IDEM_MISMATCH,      /* same key, other fingerprint */
	IDEM_RECORDED,      /* record: written */
	IDEM_NOT_DURABLE,   /* record: written, fewer replicas acknowledged it */
	IDEM_FENCED,        /* record: another attempt owns the claim now */
	IDEM_RELEASED,      /* release: deleted */
	IDEM_NOT_OWNER,     /* release: not ours (any more) */
	IDEM_ERR_REDIS,     /* Redis failed or answered nonsense: fail closed */
};

/* A recorded outcome, as stored in the hash (SPEC section 5). */
struct idem_record {
	char state[16];                     /* "completed" | "failed" */
	int status;
	char content_type[128];
	char retry_after[16];               /* "" when none */
	char *body;                         /* inline body, malloc'd, or NULL */
	size_t body_len;                    /* inline or file length */
	char body_file[SPILL_NAME_MAX];     /* "" when inline */
	char body_sha256[65];               /* file only */
};

struct idem_field {
	const char *p;                      /* NULL for nil */
	size_t n;
};

/*
 * Decodes the 8 fields state, status, content_type, retry_after, body,
 * body_file, body_len, body_sha256 (as returned after 'recorded'). Pure.
 * 0, or -1 with errstr (rec then holds nothing to free).
 */
int idem_record_decode(const struct idem_field *f, size_t n,
    struct idem_record *rec, char *errstr, size_t errlen);
/* NULL-safe; frees the inline body. */
void idem_record_free(struct idem_record *rec);

/* Builds <prefix>idem:<principal>:<key> into out. Length, or -1 if too long. */
int idem_key_name(char *out, size_t outlen, const char *prefix,
    const char *principal, const char *key, size_t keylen);

/* Loads the embedded scripts' SHA-1s. 0 or -1. */
int idem_init(void);

/*
 * Claims rkey for owner. CLAIMED, REPLAY (rec filled: free it with
 * idem_record_free), IN_PROGRESS, MISMATCH, ERR_REDIS (c->errstr).
 */
enum idem_status idem_claim(struct redis_conn *c, const char *rkey,
    const char *fingerprint, const char *owner, long long now_ms,
    long long lock_ttl_ms, struct idem_record *rec);

/*
 * Records out (inline when out->body_file is "", else the file reference).
 * RECORDED (also when this owner's outcome was already written: a re-sent
 * record is idempotent), NOT_DURABLE (recorded, but fewer than
 * redis_min_replicas replicas acknowledged it in time: c->errstr), REPLAY
 * (another attempt recorded first; existing filled), MISMATCH (the key now
 * holds another request), FENCED, ERR_REDIS.
 */
enum idem_status idem_record(struct redis_conn *c, const char *rkey,
    const char *owner, const char *fingerprint, const struct idem_record *out,
    long long ttl_ms, long long now_ms, struct idem_record *existing);

/* RELEASED, NOT_OWNER, ERR_REDIS. */
enum idem_status idem_release(struct redis_conn *c, const char *rkey,
    const char *owner);

#endif
