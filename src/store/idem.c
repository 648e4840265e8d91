/*
 * idem.c - the idempotency store. Each operation is one EVALSHA of a script
 * in lua/ touching exactly one key, so a fresh charge costs two round trips
 * (claim, record), a replay one (claim returns the record) and a lookup one.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem.h"
#include "log.h"
#include "lua_scripts.h"
#include "redis.h"
#include "util.h"

/* Unix milliseconds the scripts accept (below 1e14: year 5138) */
#define STORED_MS_MAX 99999999999999LL

static struct lua_script script_claim = { "claim", lua_claim, 0, "" };
static struct lua_script script_record = { "record", lua_record, 0, "" };
static struct lua_script script_release = { "release", lua_release, 0, "" };
static struct lua_script script_lookup = { "lookup", lua_lookup, 0, "" };
static struct lua_script script_resume = { "resume", lua_resume, 0, "" };
static struct lua_script script_pending = { "pending", lua_pending, 0, "" };

int
idem_init(void)
{
	script_claim.len = lua_claim_len;
	script_record.len = lua_record_len;
	script_release.len = lua_release_len;
	script_lookup.len = lua_lookup_len;
	script_resume.len = lua_resume_len;
	script_pending.len = lua_pending_len;
	if (redis_script_init(&script_resume) != 0 ||
	    redis_script_init(&script_pending) != 0 ||
	    redis_script_init(&script_claim) != 0 ||
	    redis_script_init(&script_record) != 0 ||
	    redis_script_init(&script_release) != 0 ||
	    redis_script_init(&script_lookup) != 0)
		return -1;
	return 0;
}

int
idem_key_name(char *out, size_t outlen, const char *prefix,
    const char *principal, const char *key, size_t keylen)
{
	struct util_buf b;

	if (keylen > IDEM_KEY_MAX)
		return -1;
	util_buf_init(&b, out, outlen);
	util_buf_str(&b, prefix);
	util_buf_str(&b, "idem:");
	util_buf_str(&b, principal);
	util_buf_put(&b, ":", 1);
	util_buf_put(&b, key, keylen);
	return (int)util_buf_len(&b);
}

static int
field_copy(char *dst, size_t dstlen, const struct idem_field *f)
{
	if (f->p == NULL) {
		dst[0] = '\0';
		return 0;
	}
	if (f->n >= dstlen || memchr(f->p, '\0', f->n) != NULL)
		return -1;
	memcpy(dst, f->p, f->n);
	dst[f->n] = '\0';
	return 0;
}

/*
 * A stored value that goes into a response header: visible ASCII and space
 * only, so whoever can write to Redis cannot inject header lines (CR, LF)
 * into replays.
 */
static int
header_value_safe(const struct idem_field *f)
{
	size_t i;

	for (i = 0; i < f->n; i++)
		if ((unsigned char)f->p[i] < 0x20 ||
		    (unsigned char)f->p[i] > 0x7e)
			return 0;
	return 1;
}

/* Decimal without sign in [0, max]; -1 otherwise. */
static long long
field_number(const struct idem_field *f, long long max)
{
	unsigned long long v;

	if (f->p == NULL ||
	    util_decimal(f->p, f->n, (unsigned long long)max, &v) !=
	        UTIL_DEC_OK)
		return -1;
	return (long long)v;
}

int
idem_record_decode(const struct idem_field *f, size_t n,
    struct idem_record *rec, char *errstr, size_t errlen)
{
	const char *why = NULL;
	long long v;

	memset(rec, 0, sizeof(*rec));
	if (n != RECORD_FIELDS) {
		why = "wrong number of fields";
		goto fail;
	}
	if (field_copy(rec->state, sizeof(rec->state), &f[RF_STATE]) != 0 ||
	    (strcmp(rec->state, "completed") != 0 &&
	        strcmp(rec->state, "failed") != 0)) {
		why = "bad state";
		goto fail;
	}
	if ((v = field_number(&f[RF_STATUS], 599)) < 100) {
		why = "bad status";
		goto fail;
	}
	rec->status = (int)v;
	if (f[RF_CONTENT_TYPE].p == NULL || f[RF_CONTENT_TYPE].n == 0 ||
	    !header_value_safe(&f[RF_CONTENT_TYPE]) ||
	    field_copy(rec->content_type, sizeof(rec->content_type),
	        &f[RF_CONTENT_TYPE]) != 0) {
		why = "bad content_type";
		goto fail;
	}
	if (field_copy(rec->retry_after, sizeof(rec->retry_after),
	        &f[RF_RETRY_AFTER]) != 0 ||
	    (f[RF_RETRY_AFTER].p != NULL &&
	        field_number(&f[RF_RETRY_AFTER], 1000000000LL) < 0)) {
		why = "bad retry_after";
		goto fail;
	}
	if (f[RF_EXPIRES_MS].p == NULL)
		rec->expires_ms = 0; /* written before records carried it */
	else if ((rec->expires_ms =
	                 field_number(&f[RF_EXPIRES_MS], STORED_MS_MAX)) < 1) {
		why = "bad expires_ms";
		goto fail;
	}
	if (f[RF_BODY].p != NULL) {
		if (f[RF_BODY_FILE].p != NULL) {
			why = "both body and body_file";
			goto fail;
		}
		if ((rec->body = malloc(f[RF_BODY].n + 1)) == NULL) {
			why = "out of memory";
			goto fail;
		}
		memcpy(rec->body, f[RF_BODY].p, f[RF_BODY].n);
		rec->body[f[RF_BODY].n] = '\0';
		rec->body_len = f[RF_BODY].n;
		return 0;
	}
	if (f[RF_BODY_FILE].p == NULL) {
		why = "neither body nor body_file";
		goto fail;
	}
	if (field_copy(rec->body_file, sizeof(rec->body_file),
	        &f[RF_BODY_FILE]) != 0 ||
	    rec->body_file[0] == '\0') {
		why = "bad body_file";
		goto fail;
	}
	if ((v = field_number(&f[RF_BODY_LEN],
	         (long long)MAX_REQUEST_BYTES_MAX * 64)) < 0) {
		why = "bad body_len";
		goto fail;
	}
	rec->body_len = (size_t)v;
	if (field_copy(rec->body_sha256, sizeof(rec->body_sha256),
	        &f[RF_BODY_SHA256]) != 0 ||
	    strlen(rec->body_sha256) != 64 ||
	    !util_is_hex(rec->body_sha256, 64)) {
		why = "bad body_sha256";
		goto fail;
	}
	return 0;
fail:
	(void)snprintf(errstr, errlen, "stored record: %s", why);
	free(rec->body);
	memset(rec, 0, sizeof(*rec));
	return -1;
}

int
idem_info_decode(const struct idem_field *f, size_t n, long long pttl_ms,
    struct idem_info *info, char *errstr, size_t errlen)
{
	const char *why = NULL;
	long long v;

	memset(info, 0, sizeof(*info));
	if (n != INFO_FIELDS) {
		why = "wrong number of fields";
		goto fail;
	}
	if (f[IF_STATE].p == NULL)
		return 0;
	if (field_copy(info->state, sizeof(info->state), &f[IF_STATE]) != 0 ||
	    (strcmp(info->state, "in_progress") != 0 &&
	        strcmp(info->state, "completed") != 0 &&
	        strcmp(info->state, "failed") != 0 &&
	        strcmp(info->state, "unknown") != 0)) {
		why = "bad state";
		goto fail;
	}
	if ((info->created_ms =
	            field_number(&f[IF_CREATED_MS], STORED_MS_MAX)) < 1) {
		why = "bad created_ms";
		goto fail;
	}
	if (strcmp(info->state, "in_progress") == 0) {
		info->updated_ms = info->expires_ms = 0;
		info->status = 0;
	} else {
		if ((info->updated_ms = field_number(&f[IF_UPDATED_MS],
		         STORED_MS_MAX)) < 1) {
			why = "bad updated_ms";
			goto fail;
		}
		if (f[IF_EXPIRES_MS].p == NULL)
			info->expires_ms = 0; /* predates the field */
		else if ((info->expires_ms = field_number(&f[IF_EXPIRES_MS],
		              STORED_MS_MAX)) < 1) {
			why = "bad expires_ms";
			goto fail;
		}
		if ((v = field_number(&f[IF_STATUS], 599)) < 100) {
			why = "bad status";
			goto fail;
		}
		info->status = (int)v;
	}
	info->pttl_ms = pttl_ms;
	return 1;
fail:
	(void)snprintf(errstr, errlen, "stored record: %s", why);
	memset(info, 0, sizeof(*info));
	return -1;
}

void
idem_record_free(struct idem_record *rec)
{
	if (rec == NULL)
		return;
	free(rec->body);
	rec->body = NULL;
}

/* r's bytes when it is a bulk string (*len of them), else NULL. */
static const char *
reply_string(const struct redis_reply *r, size_t *len)
{
	if (redis_reply_type(r) != REDIS_R_STRING)
		return NULL;
	return redis_reply_str(r, len);
}

/* Element i of r as a field: a string, or nil (p NULL); else -1. */
static int
reply_field(const struct redis_reply *r, size_t i, struct idem_field *f)
{
	const struct redis_reply *e = redis_reply_at(r, i);

	if (e != NULL && redis_reply_type(e) == REDIS_R_NIL) {
		f->p = NULL;
		f->n = 0;
		return 0;
	}
	return (f->p = reply_string(e, &f->n)) != NULL ? 0 : -1;
}

/* 1 when r is a bulk string equal to s (up to its first NUL). */
static int
reply_string_is(const struct redis_reply *r, const char *s)
{
	size_t n;
	const char *p = reply_string(r, &n);

	return p != NULL && strcmp(p, s) == 0;
}

/*
 * The scripts answer a bare string ('claimed', 'ok': the common answers,
 * cheapest for Redis to return) or an array whose first element names it.
 */
static int
reply_tag_is(const struct redis_reply *r, const char *tag)
{
	return reply_string_is(r, tag) ||
	    reply_string_is(redis_reply_at(r, 0), tag);
}

/* Decodes {'recorded', 9 fields} into rec. */
static enum idem_status
reply_decode_recorded(const struct redis_reply *r, struct idem_record *rec)
{
	struct idem_field f[RECORD_FIELDS];
	char err[128];
	size_t i;

	if (redis_reply_len(r) != RECORD_FIELDS + 1)
		goto bad;
	for (i = 0; i < RECORD_FIELDS; i++)
		if (reply_field(r, i + 1, &f[i]) != 0)
			goto bad;
	if (idem_record_decode(f, RECORD_FIELDS, rec, err, sizeof(err)) != 0) {
		log_error(NULL, "%s", err);
		return IDEM_ERR_REDIS;
	}
	return IDEM_REPLAY;
bad:
	log_error(NULL, "unexpected 'recorded' reply shape");
	return IDEM_ERR_REDIS;
}

/*
 * The optional second element of {'in_progress'|'fenced', created_ms} and
 * {'mismatch', params}: what is known of the key's holder. Nothing known
 * (nil, absent, malformed) leaves cf zeroed: the answer is still given,
 * only without the detail.
 */
static void
reply_conflict(const struct redis_reply *r, int with_params,
    struct idem_conflict *cf)
{
	struct idem_field f;

	memset(cf, 0, sizeof(*cf));
	if ((f.p = reply_string(redis_reply_at(r, 1), &f.n)) == NULL)
		return;
	if (with_params) {
		if (header_value_safe(&f))
			(void)field_copy(cf->params, sizeof(cf->params), &f);
	} else if ((cf->claim_created_ms = field_number(&f, STORED_MS_MAX)) < 0)
		cf->claim_created_ms = 0;
}

/* One operation in flight: what to decode its reply as, and for whom. */
enum idem_op_kind {
	OP_CLAIM,
	OP_RECORD,
	OP_RELEASE,
	OP_LOOKUP,
	OP_RESUME,
	OP_PENDING,
	OP_DUE,
	OP_OLDEST
};

struct idem_op {
	enum idem_op_kind kind;
	idem_cb *cb;
	void *arg;
};

/* What the tag a claim or record reply starts with means. */
enum tag_detail {
	TAG_PLAIN,    /* nothing follows */
	TAG_HOLDER,   /* the holder's claim time follows */
	TAG_PARAMS,   /* the stored per-parameter digests follow */
	TAG_RECORDED, /* the recorded outcome follows: a replay */
	TAG_RESUMED,  /* the record's created_ms and quiet_ms follow */
};

struct reply_tag {
	const char *tag;
	enum idem_status st;
	enum tag_detail detail;
};

static const struct reply_tag claim_tags[] = {
	{ "claimed", IDEM_CLAIMED, TAG_PLAIN },
	{ "resumed", IDEM_RESUMED, TAG_RESUMED },
	{ "in_progress", IDEM_IN_PROGRESS, TAG_HOLDER },
	{ "mismatch", IDEM_MISMATCH, TAG_PARAMS },
	{ "recorded", IDEM_REPLAY, TAG_RECORDED },
	{ NULL, IDEM_ERR_REDIS, TAG_PLAIN },
};

static const struct reply_tag record_tags[] = {
	{ "ok", IDEM_RECORDED, TAG_PLAIN },
	{ "fenced", IDEM_FENCED, TAG_HOLDER },
	{ "mismatch", IDEM_MISMATCH, TAG_PARAMS },
	{ "recorded", IDEM_REPLAY, TAG_RECORDED },
	{ NULL, IDEM_ERR_REDIS, TAG_PLAIN },
};

/*
 * {'resumed', created_ms, quiet_ms} of claim.lua: the times the settle step
 * reads (0 when absent or not numbers: the step then never searches).
 */
static void
reply_resumed(const struct redis_reply *r, struct idem_resume *rs)
{
	struct idem_field f;
	size_t i;
	long long *to[3] = { &rs->created_ms, &rs->quiet_ms, &rs->probe_lte };

	for (i = 0; i < 3; i++) {
		*to[i] = 0;
		if ((f.p = reply_string(redis_reply_at(r, i + 1), &f.n)) ==
		    NULL)
			continue;
		if ((*to[i] = field_number(&f, STORED_MS_MAX)) < 0)
			*to[i] = 0;
	}
}

/* Decodes a claim's or a record's reply by its tag (rows: a table above). */
static void
tags_decode(const struct redis_reply *r, const struct reply_tag *rows,
    const char *unexpected, struct idem_result *res)
{
	for (; rows->tag != NULL; rows++) {
		if (!reply_tag_is(r, rows->tag))
			continue;
		res->st = rows->st;
		switch (rows->detail) {
		case TAG_PLAIN: break;
		case TAG_HOLDER: reply_conflict(r, 0, &res->cf); break;
		case TAG_PARAMS: reply_conflict(r, 1, &res->cf); break;
		case TAG_RECORDED:
			res->st = reply_decode_recorded(r, &res->rec);
			break;
		case TAG_RESUMED: reply_resumed(r, &res->resume); break;
		}
		return;
	}
	res->errstr = unexpected;
}

/* err (errlen bytes, the caller's) holds a decoding error for res. */
static void
lookup_decode(const struct redis_reply *r, struct idem_result *res, char *err,
    size_t errlen)
{
	struct idem_field f[INFO_FIELDS];
	const struct redis_reply *pttl = redis_reply_at(r, INFO_FIELDS);
	size_t i;

	if (redis_reply_len(r) != INFO_FIELDS + 1 ||
	    redis_reply_type(pttl) != REDIS_R_INTEGER)
		goto bad;
	for (i = 0; i < INFO_FIELDS; i++)
		if (reply_field(r, i, &f[i]) != 0)
			goto bad;
	switch (idem_info_decode(f, INFO_FIELDS, redis_reply_int(pttl),
	    &res->info, err, errlen)) {
	case 1: res->st = IDEM_FOUND; break;
	case 0: res->st = IDEM_ABSENT; break;
	default:
		log_error(NULL, "%s", err);
		res->errstr = err;
		break;
	}
	return;
bad:
	res->errstr = "lookup: unexpected reply";
}

/*
 * The fields of {'resumed', fingerprint, param_digests, request, created_ms,
 * quiet_ms, probe_lte}.
 */
enum resume_field {
	RS_TAG,
	RS_FINGERPRINT,
	RS_PARAMS,
	RS_REQUEST,
	RS_CREATED_MS,
	RS_QUIET_MS,
	RS_PROBE_LTE,
	RESUME_FIELDS
};

static void
resume_decode(const struct redis_reply *r, struct idem_result *res)
{
	struct idem_field f[RESUME_FIELDS];
	size_t i;

	if (reply_tag_is(r, "settled")) {
		res->st = IDEM_SETTLED;
		return;
	}
	if (reply_tag_is(r, "leased")) {
		res->st = IDEM_IN_PROGRESS;
		return;
	}
	if (!reply_tag_is(r, "resumed") || redis_reply_len(r) != RESUME_FIELDS)
		goto bad;
	for (i = 0; i < RESUME_FIELDS; i++)
		if (reply_field(r, i, &f[i]) != 0)
			goto bad;
	if (f[RS_FINGERPRINT].p == NULL || f[RS_REQUEST].p == NULL ||
	    field_copy(res->resume.fingerprint, sizeof(res->resume.fingerprint),
	        &f[RS_FINGERPRINT]) != 0 ||
	    field_copy(res->resume.params, sizeof(res->resume.params),
	        &f[RS_PARAMS]) != 0 ||
	    (res->resume.created_ms =
	            field_number(&f[RS_CREATED_MS], STORED_MS_MAX)) < 1 ||
	    (res->resume.quiet_ms =
	            field_number(&f[RS_QUIET_MS], STORED_MS_MAX)) < 1 ||
	    (res->resume.probe_lte =
	            field_number(&f[RS_PROBE_LTE], STORED_MS_MAX)) < 0 ||
	    (res->resume.request = malloc(f[RS_REQUEST].n + 1)) == NULL)
		goto bad;
	memcpy(res->resume.request, f[RS_REQUEST].p, f[RS_REQUEST].n);
	res->resume.request[f[RS_REQUEST].n] = '\0';
	res->resume.request_len = f[RS_REQUEST].n;
	res->st = IDEM_RESUMED;
	return;
bad:
	res->errstr = "resume: unexpected reply";
}

/* {count, name...} of pending.lua's 'due'. */
static void
due_decode(const struct redis_reply *r, struct idem_result *res)
{
	const struct redis_reply *count = redis_reply_at(r, 0);
	struct idem_field f;
	size_t i;

	if (redis_reply_type(count) != REDIS_R_INTEGER)
		goto bad;
	res->due.count = redis_reply_int(count);
	for (i = 1; i < redis_reply_len(r) && res->due.n < IDEM_DUE_MAX; i++) {
		if (reply_field(r, i, &f) != 0 || f.p == NULL ||
		    memchr(f.p, '\0', f.n) != NULL)
			goto bad;
		if ((res->due.names[res->due.n] = malloc(f.n + 1)) == NULL)
			goto bad;
		memcpy(res->due.names[res->due.n], f.p, f.n);
		res->due.names[res->due.n++][f.n] = '\0';
	}
	res->st = IDEM_DONE;
	return;
bad:
	res->errstr = "pending: unexpected reply";
}

/* {count, first_ms or nil} of pending.lua's 'oldest'. */
static void
oldest_decode(const struct redis_reply *r, struct idem_result *res)
{
	const struct redis_reply *count = redis_reply_at(r, 0);
	struct idem_field f;

	if (redis_reply_len(r) != 2 ||
	    redis_reply_type(count) != REDIS_R_INTEGER ||
	    reply_field(r, 1, &f) != 0)
		goto bad;
	res->due.count = redis_reply_int(count);
	res->due.first_ms = 0;
	if (f.p != NULL &&
	    (res->due.first_ms = field_number(&f, STORED_MS_MAX)) < 0)
		goto bad;
	res->st = IDEM_DONE;
	return;
bad:
	res->errstr = "pending: unexpected reply";
}

static void
result_free(struct idem_result *res)
{
	size_t i;

	idem_record_free(&res->rec);
	free(res->resume.request);
	for (i = 0; i < res->due.n; i++)
		free(res->due.names[i]);
}

/* The script's reply: decoded for the caller, whose callback runs once. */
static void
on_script_reply(const struct redis_result *rr, void *arg)
{
	struct idem_op *op = arg;
	struct idem_result res;
	const struct redis_reply *r = rr->reply;
	char err[128];

	memset(&res, 0, sizeof(res));
	res.st = IDEM_ERR_REDIS;
	res.outcome_unknown = rr->outcome_unknown;
	res.errstr = rr->errstr;
	if (r != NULL) {
		switch (op->kind) {
		case OP_CLAIM:
			tags_decode(r, claim_tags, "claim: unexpected reply",
			    &res);
			break;
		case OP_RECORD:
			tags_decode(r, record_tags, "record: unexpected reply",
			    &res);
			if (res.st == IDEM_RECORDED && !rr->durable)
				res.st = IDEM_NOT_DURABLE;
			break;
		case OP_RELEASE:
			if (redis_reply_type(r) == REDIS_R_INTEGER)
				res.st = redis_reply_int(r) == 1
				    ? IDEM_RELEASED
				    : IDEM_NOT_OWNER;
			else
				res.errstr = "release: unexpected reply";
			break;
		case OP_LOOKUP: lookup_decode(r, &res, err, sizeof(err)); break;
		case OP_RESUME: resume_decode(r, &res); break;
		case OP_PENDING:
			if (redis_reply_type(r) == REDIS_R_INTEGER)
				res.st = IDEM_DONE;
			else
				res.errstr = "pending: unexpected reply";
			break;
		case OP_DUE: due_decode(r, &res); break;
		case OP_OLDEST: oldest_decode(r, &res); break;
		}
	}
	op->cb(&res, op->arg);
	result_free(&res);
	free(op);
}

/* A script's arguments, as every sender builds them. */
#define OP_ARGS_MAX 15 /* record.lua's, the most */
#define OP_NUM_LEN 24  /* a long long as decimal text */

struct op_args {
	const char *v[OP_ARGS_MAX];
	size_t len[OP_ARGS_MAX];
	char num[OP_ARGS_MAX][OP_NUM_LEN]; /* the text of the numbers */
	int n;
};

/* Appends n bytes at p (binary-safe, not copied). */
static void
arg_bytes(struct op_args *args, const char *p, size_t n)
{
	assert(args->n < OP_ARGS_MAX);
	args->v[args->n] = p;
	args->len[args->n++] = n;
}

static void
arg_str(struct op_args *args, const char *s)
{
	arg_bytes(args, s, strlen(s));
}

/* Appends v in decimal. */
static void
arg_num(struct op_args *args, long long v)
{
	char *t;

	assert(args->n < OP_ARGS_MAX);
	t = args->num[args->n];
	(void)util_lltoa(v, t, OP_NUM_LEN);
	arg_str(args, t);
}

/*
 * Sends script with key rkey and the arguments args for cb; 0, or -1 (ENOMEM:
 * cb will not be called).
 */
static int
op_send(struct redis_client *redis, struct lua_script *script,
    enum idem_op_kind kind, const char *rkey, struct op_args *args, int wait,
    idem_cb *cb, void *arg)
{
	struct idem_op *op;

	if ((op = malloc(sizeof(*op))) == NULL)
		return -1;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	if (redis_eval(redis, script, rkey, strlen(rkey), args->n, args->v,
	        args->len, wait, on_script_reply, op) != 0) {
		free(op);
		return -1;
	}
	return 0;
}

int
idem_claim(struct redis_client *redis, const char *rkey,
    const char *fingerprint, const char *params, const char *owner,
    long long now_ms, long long lock_ttl_ms, idem_cb *cb, void *arg)
{
	struct op_args args = { .n = 0 };

	arg_str(&args, fingerprint);
	arg_str(&args, owner);
	arg_num(&args, now_ms);
	arg_num(&args, lock_ttl_ms);
	arg_str(&args, params);
	return op_send(redis, &script_claim, OP_CLAIM, rkey, &args, 0, cb, arg);
}

int
idem_record_send(struct redis_client *redis, const char *rkey,
    const char *owner, const char *fingerprint, const char *params,
    const struct idem_record *out, const char *request, long long ttl_ms,
    long long now_ms, idem_cb *cb, void *arg)
{
	struct op_args args = { .n = 0 };

	arg_str(&args, owner);
	arg_str(&args, fingerprint);
	arg_str(&args, params);
	arg_str(&args, out->state);
	arg_num(&args, out->status);
	arg_str(&args, out->content_type);
	arg_str(&args, out->retry_after);
	arg_num(&args, ttl_ms);
	arg_num(&args, now_ms);
	arg_num(&args, now_ms + ttl_ms); /* expires_ms */
	if (out->body_file[0] != '\0') {
		arg_str(&args, "file");
		arg_str(&args, out->body_file);
		arg_num(&args, (long long)out->body_len);
		arg_str(&args, out->body_sha256);
	} else {
		arg_str(&args, "inline");
		/* binary-safe inline body */
		arg_bytes(&args, out->body != NULL ? out->body : "",
		    out->body_len);
		if (request != NULL) {
			arg_str(&args,
			    request); /* an unknown outcome: to ask again */
			arg_num(&args,
			    out->sent_ms > 0 && out->sent_ms <= now_ms
			        ? out->sent_ms
			        : now_ms);
			arg_num(&args, out->probe_lte > 0 ? out->probe_lte : 0);
		}
	}
	return op_send(redis, &script_record, OP_RECORD, rkey, &args, 1, cb,
	    arg);
}

int
idem_release(struct redis_client *redis, const char *rkey, const char *owner,
    idem_cb *cb, void *arg)
{
	struct op_args args = { .n = 0 };

	arg_str(&args, owner);
	return op_send(redis, &script_release, OP_RELEASE, rkey, &args, 0, cb,
	    arg);
}

int
idem_lookup(struct redis_client *redis, const char *rkey, idem_cb *cb,
    void *arg)
{
	struct op_args args = { .n = 0 };

	return op_send(redis, &script_lookup, OP_LOOKUP, rkey, &args, 0, cb,
	    arg);
}

int
idem_resume(struct redis_client *redis, const char *rkey, const char *owner,
    long long now_ms, long long lease_ms, idem_cb *cb, void *arg)
{
	struct op_args args = { .n = 0 };

	arg_str(&args, owner);
	arg_num(&args, now_ms);
	arg_num(&args, lease_ms);
	return op_send(redis, &script_resume, OP_RESUME, rkey, &args, 0, cb,
	    arg);
}

int
idem_pending_add(struct redis_client *redis, const char *index,
    const char *rkey, long long due_ms, idem_cb *cb, void *arg)
{
	struct op_args args = { .n = 0 };

	arg_str(&args, "add");
	arg_str(&args, rkey);
	arg_num(&args, due_ms);
	return op_send(redis, &script_pending, OP_PENDING, index, &args, 0, cb,
	    arg);
}

int
idem_pending_remove(struct redis_client *redis, const char *index,
    const char *rkey, idem_cb *cb, void *arg)
{
	struct op_args args = { .n = 0 };

	arg_str(&args, "remove");
	arg_str(&args, rkey);
	return op_send(redis, &script_pending, OP_PENDING, index, &args, 0, cb,
	    arg);
}

int
idem_pending_due(struct redis_client *redis, const char *index,
    long long now_ms, int limit, idem_cb *cb, void *arg)
{
	struct op_args args = { .n = 0 };

	arg_str(&args, "due");
	arg_num(&args, now_ms);
	arg_num(&args, limit);
	return op_send(redis, &script_pending, OP_DUE, index, &args, 0, cb,
	    arg);
}

int
idem_pending_oldest(struct redis_client *redis, const char *index, idem_cb *cb,
    void *arg)
{
	struct op_args args = { .n = 0 };

	arg_str(&args, "oldest");
	return op_send(redis, &script_pending, OP_OLDEST, index, &args, 0, cb,
	    arg);
}

int
idem_index_name(char *out, size_t outlen, const char *prefix)
{
	struct util_buf b;

	util_buf_init(&b, out, outlen);
	util_buf_str(&b, prefix);
	util_buf_str(&b, "unknown");
	return (int)util_buf_len(&b);
}

int
idem_key_split(const char *rkey, const char *prefix, char *principal, char *key,
    size_t *keylen)
{
	size_t plen = strlen(prefix), n;
	const char *p, *colon;

	if (strncmp(rkey, prefix, plen) != 0 ||
	    strncmp(rkey + plen, "idem:", 5) != 0)
		return -1;
	p = rkey + plen + 5;
	/* a principal is [A-Za-z0-9_-]: the first ':' ends it */
	if ((colon = strchr(p, ':')) == NULL || colon == p ||
	    (size_t)(colon - p) > PRINCIPAL_MAX)
		return -1;
	memcpy(principal, p, (size_t)(colon - p));
	principal[colon - p] = '\0';
	n = strlen(colon + 1);
	if (n < 1 || n > IDEM_KEY_MAX)
		return -1;
	memcpy(key, colon + 1, n + 1);
	*keylen = n;
	return 0;
}
