/*
 * idem.h - the idempotency store: claim, record, release and look up an
 * Idempotency-Key through the Lua scripts of lua/, and decode records.
 */
#ifndef CHARGE_IDEM_H
#define CHARGE_IDEM_H

#include <stddef.h>

#include "defaults.h"
#include "spill.h"

struct redis_client; /* redis.h */

enum idem_status {
	IDEM_CLAIMED, /* the caller owns the key: execute */
	IDEM_RESUMED, /* the caller took over an unknown outcome: ask again */
	IDEM_SETTLED, /* resume: the record is not unknown (any more) */
	IDEM_DONE,    /* pending: done (due: res.due filled) */
	IDEM_REPLAY,  /* rec holds the recorded outcome */
	IDEM_IN_PROGRESS, /* another attempt holds the claim */
	IDEM_MISMATCH,    /* same key, other fingerprint */
	IDEM_RECORDED,    /* record: written */
	IDEM_NOT_DURABLE, /* record: written, fewer replicas acknowledged it */
	IDEM_FENCED,      /* record: another attempt owns the claim now */
	IDEM_RELEASED,    /* release: deleted */
	IDEM_NOT_OWNER,   /* release: not ours (any more) */
	IDEM_FOUND,       /* lookup: the key holds a record */
	IDEM_ABSENT,      /* lookup: it holds none */
	IDEM_ERR_REDIS,   /* Redis failed or answered nonsense: fail closed */
};

/* A recorded outcome, as stored in the hash (docs/API.md §18.1). */
struct idem_record {
	char
	    state[16]; /* "completed" | "failed" | "unknown" (recording only) */
	int status;
	char content_type[128];
	char retry_after[16];           /* "" when none */
	char *body;                     /* inline body, malloc'd, or NULL */
	size_t body_len;                /* inline or file length */
	char body_file[SPILL_NAME_MAX]; /* "" when inline */
	char body_sha256[65];           /* file only */
	long long expires_ms;           /* when the record expires (Unix
					       ms); 0 when it predates the
					       field */
	/*
	 * unknown: the latest an attempt of it may have sent (Unix ms; 0: the
	 * recording's now); a read-only probe keeps the earlier one
	 */
	long long sent_ms;
	/* unknown: where the next read of the list goes on from (0: top) */
	long long probe_lte;
};

/* Longest per-parameter digest string the store passes on (opaque here). */
#define IDEM_PARAMS_MAX 128

/*
 * What the key holds when the caller cannot have it: the claim of another
 * attempt (IN_PROGRESS, FENCED) or another request's digests (MISMATCH).
 */
struct idem_conflict {
	long long claim_created_ms;       /* the holder's claim; 0: unknown */
	char params[IDEM_PARAMS_MAX + 1]; /* stored digests; "": none */
};

/* A record as introspection shows it: no body, no owner, no fingerprint. */
struct idem_info {
	char state[16]; /* in_progress|completed|failed|unknown */
	long long created_ms;
	long long updated_ms; /* 0 while in progress */
	long long expires_ms; /* 0 while in progress or unknown */
	int status;           /* 0 while in progress */
	long long pttl_ms;    /* Redis's remaining TTL, -1 none */
};

struct idem_field {
	const char *p; /* NULL for nil */
	size_t n;
};

/*
 * The fields of a recorded outcome, in the order the scripts return them
 * after 'recorded' (claim.lua, record.lua): named once, here.
 */
enum idem_record_field {
	RF_STATE,
	RF_STATUS,
	RF_CONTENT_TYPE,
	RF_RETRY_AFTER,
	RF_BODY,
	RF_BODY_FILE,
	RF_BODY_LEN,
	RF_BODY_SHA256,
	RF_EXPIRES_MS,
	RECORD_FIELDS
};

/* The fields of lua/lookup.lua's reply, before its PTTL. */
enum idem_info_field {
	IF_STATE,
	IF_CREATED_MS,
	IF_UPDATED_MS,
	IF_EXPIRES_MS,
	IF_STATUS,
	INFO_FIELDS
};

/*
 * Decodes the RECORD_FIELDS fields of a recorded outcome (a nil
 * expires_ms gives 0). Pure. 0, or -1 with errstr (rec then holds nothing
 * to free).
 */
int idem_record_decode(const struct idem_field *f, size_t n,
    struct idem_record *rec, char *errstr, size_t errlen);
/* NULL-safe; frees the inline body. */
void idem_record_free(struct idem_record *rec);

/*
 * Decodes the 5 fields of lua/lookup.lua (state, created_ms, updated_ms,
 * expires_ms, status) and its PTTL. Pure. 1 when a record exists, 0 when
 * none (state nil), -1 with errstr when the fields make no sense.
 */
int idem_info_decode(const struct idem_field *f, size_t n, long long pttl_ms,
    struct idem_info *info, char *errstr, size_t errlen);

/* Room for any record's key name, NUL included. */
#define IDEM_RKEY_MAX (KEY_PREFIX_MAX + 8 + PRINCIPAL_MAX + IDEM_KEY_MAX + 8)

/* Builds <prefix>idem:<principal>:<key> into out. Length, or -1 if too long. */
int idem_key_name(char *out, size_t outlen, const char *prefix,
    const char *principal, const char *key, size_t keylen);

/* Loads the embedded scripts' SHA-1s. 0 or -1. */
int idem_init(void);

/*
 * What an operation came to, given to its callback: st, and by status
 * rec (REPLAY: the callback may take rec.body, setting it NULL; the rest is
 * freed after the callback), cf (IN_PROGRESS, FENCED, MISMATCH) or info
 * (FOUND). With ERR_REDIS: errstr, and outcome_unknown when the script may
 * have run (its reply was lost). Valid during the callback only.
 */
/*
 * What resume.lua hands the completer: enough to ask the provider again.
 * A claim that RESUMED fills created_ms and quiet_ms only (0: not known).
 */
struct idem_resume {
	char fingerprint[65];
	char params[IDEM_PARAMS_MAX + 1]; /* per-parameter digests */
	char *request; /* the canonical parameters (freed after the callback) */
	size_t request_len;
	long long created_ms; /* the first claim, Unix ms */
	/*
	 * The latest moment an earlier attempt may have sent to the provider
	 * (the last unknown recorded, or a lapsed lease's end), Unix ms.
	 */
	long long quiet_ms;
	/*
	 * Where the next read of the provider's list goes on from: its
	 * created[lte] (the provider's Unix seconds); 0: from the top
	 */
	long long probe_lte;
};

#define IDEM_DUE_MAX 64 /* names one pending 'due' can return */

/*
 * What pending.lua's 'due' found: the index's size, names due now; or its
 * 'oldest': the size and first_ms.
 */
struct idem_due {
	long long count;
	long long
	    first_ms; /* oldest: when the longest-named was first named; 0: none */
	size_t n;
	char *names[IDEM_DUE_MAX]; /* freed after the callback */
};

struct idem_result {
	enum idem_status st;
	struct idem_record rec;
	struct idem_resume resume; /* RESUMED from idem_resume */
	struct idem_due due;       /* DONE from idem_pending_due */
	struct idem_conflict cf;
	struct idem_info info;
	int outcome_unknown;
	const char *errstr;
};

/* Called exactly once per operation, never before the call returned. */
typedef void idem_cb(struct idem_result *res, void *arg);

/*
 * The operations below send one script and return 0 (cb will be called),
 * or -1 when it could not be queued (ENOMEM; cb will not be called).
 *
 * idem_claim: claims rkey for owner, storing params (the request's
 * per-parameter digests) with the claim. CLAIMED, RESUMED (the key held
 * an unknown outcome: the caller owns it for lock_ttl_ms and asks the
 * provider again; res.resume.created_ms and quiet_ms), REPLAY,
 * IN_PROGRESS, MISMATCH, ERR_REDIS.
 */
int idem_claim(struct redis_client *redis, const char *rkey,
    const char *fingerprint, const char *params, const char *owner,
    long long now_ms, long long lock_ttl_ms, idem_cb *cb, void *arg);

/*
 * Records out (inline when out->body_file is "", else the file reference),
 * to expire at now_ms + ttl_ms (stored as expires_ms), followed by WAIT
 * when redis_min_replicas is set. RECORDED (also when this owner's outcome
 * was already written: a re-sent record is idempotent), NOT_DURABLE
 * (recorded, but fewer replicas acknowledged it in time: errstr), REPLAY
 * (another attempt recorded first; rec filled), MISMATCH (the key now holds
 * another request), FENCED, ERR_REDIS. out is copied before this returns.
 * An out->state "unknown" is recorded inline with request (the canonical
 * parameters, kept to ask the provider again); request is NULL otherwise.
 */
int idem_record_send(struct redis_client *redis, const char *rkey,
    const char *owner, const char *fingerprint, const char *params,
    const struct idem_record *out, const char *request, long long ttl_ms,
    long long now_ms, idem_cb *cb, void *arg);

/*
 * The completer takes over rkey's unknown outcome for owner until now_ms +
 * lease_ms: RESUMED (res.resume), IN_PROGRESS (a retry or another
 * completer holds it), SETTLED (not unknown, or gone), ERR_REDIS.
 */
int idem_resume(struct redis_client *redis, const char *rkey, const char *owner,
    long long now_ms, long long lease_ms, idem_cb *cb, void *arg);

/*
 * The index of unknown outcomes (index: <prefix>unknown), a second command
 * beside record.lua (in Redis Cluster a script touches one key):
 * idem_pending_add names rkey, due at due_ms; idem_pending_remove forgets
 * it; idem_pending_due finds at most limit names due by now_ms (res.due).
 * DONE or ERR_REDIS.
 */
int idem_pending_add(struct redis_client *redis, const char *index,
    const char *rkey, long long due_ms, idem_cb *cb, void *arg);
int idem_pending_remove(struct redis_client *redis, const char *index,
    const char *rkey, idem_cb *cb, void *arg);
int idem_pending_due(struct redis_client *redis, const char *index,
    long long now_ms, int limit, idem_cb *cb, void *arg);

/*
 * pending.lua's 'oldest': res.due.count (the index's size) and
 * res.due.first_ms, when the name longest in the index was first added
 * (Unix ms, Redis's clock; 0 when none). DONE or ERR_REDIS.
 */
int idem_pending_oldest(struct redis_client *redis, const char *index,
    idem_cb *cb, void *arg);

/* Builds <prefix>unknown into out. Length, or -1 if too long. */
int idem_index_name(char *out, size_t outlen, const char *prefix);

/*
 * Splits a record name <prefix>idem:<principal>:<key> back into its
 * principal (principal[PRINCIPAL_MAX + 1]) and key (key[IDEM_KEY_MAX + 1],
 * *keylen). Pure. 0, or -1 when rkey is not such a name.
 */
int idem_key_split(const char *rkey, const char *prefix, char *principal,
    char *key, size_t *keylen);

/* RELEASED, NOT_OWNER, ERR_REDIS. */
int idem_release(struct redis_client *redis, const char *rkey,
    const char *owner, idem_cb *cb, void *arg);

/*
 * Reads what rkey holds without writing anything (no key created, no TTL
 * touched): FOUND (info filled), ABSENT, ERR_REDIS.
 */
int idem_lookup(struct redis_client *redis, const char *rkey, idem_cb *cb,
    void *arg);

#endif
