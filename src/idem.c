/*
 * idem.c - the idempotency store. Each operation is one EVALSHA of a script
 * in lua/ touching exactly one key, so a fresh charge costs two round trips
 * (claim, record), a replay one (claim returns the record) and a lookup one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem.h"
#include "log.h"
#include "lua_scripts.h"
#include "util.h"

/* state status content_type retry_after body body_file body_len body_sha256 expires_ms */
#define RECORD_FIELDS 9
/* state created_ms updated_ms expires_ms status (then the PTTL) */
#define INFO_FIELDS 5
/* Unix milliseconds the scripts accept (below 1e14: year 5138) */
#define STORED_MS_MAX 99999999999999LL

static struct lua_script script_claim = { "claim", lua_claim, 0, "" };
static struct lua_script script_record = { "record", lua_record, 0, "" };
static struct lua_script script_release = { "release", lua_release, 0, "" };
static struct lua_script script_lookup = { "lookup", lua_lookup, 0, "" };

int
idem_init(void)
{
	script_claim.len = lua_claim_len;
	script_record.len = lua_record_len;
	script_release.len = lua_release_len;
	script_lookup.len = lua_lookup_len;
	if (redis_script_init(&script_claim) != 0 ||
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
	if (field_copy(rec->state, sizeof(rec->state), &f[0]) != 0 ||
	    (strcmp(rec->state, "completed") != 0 &&
	        strcmp(rec->state, "failed") != 0)) {
		why = "bad state";
		goto fail;
	}
	if ((v = field_number(&f[1], 599)) < 100) {
		why = "bad status";
		goto fail;
	}
	rec->status = (int)v;
	if (f[2].p == NULL || f[2].n == 0 || !header_value_safe(&f[2]) ||
	    field_copy(rec->content_type, sizeof(rec->content_type), &f[2]) !=
	        0) {
		why = "bad content_type";
		goto fail;
	}
	if (field_copy(rec->retry_after, sizeof(rec->retry_after), &f[3]) !=
	        0 ||
	    (f[3].p != NULL && field_number(&f[3], 1000000000LL) < 0)) {
		why = "bad retry_after";
		goto fail;
	}
	if (f[8].p == NULL)
		rec->expires_ms = 0; /* written before records carried it */
	else if ((rec->expires_ms = field_number(&f[8], STORED_MS_MAX)) < 1) {
		why = "bad expires_ms";
		goto fail;
	}
	if (f[4].p != NULL) {
		if (f[5].p != NULL) {
			why = "both body and body_file";
			goto fail;
		}
		if ((rec->body = malloc(f[4].n + 1)) == NULL) {
			why = "out of memory";
			goto fail;
		}
		memcpy(rec->body, f[4].p, f[4].n);
		rec->body[f[4].n] = '\0';
		rec->body_len = f[4].n;
		return 0;
	}
	if (f[5].p == NULL) {
		why = "neither body nor body_file";
		goto fail;
	}
	if (field_copy(rec->body_file, sizeof(rec->body_file), &f[5]) != 0 ||
	    rec->body_file[0] == '\0') {
		why = "bad body_file";
		goto fail;
	}
	if ((v = field_number(&f[6], (long long)MAX_REQUEST_BYTES_MAX * 64)) <
	    0) {
		why = "bad body_len";
		goto fail;
	}
	rec->body_len = (size_t)v;
	if (field_copy(rec->body_sha256, sizeof(rec->body_sha256), &f[7]) !=
	        0 ||
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
	if (f[0].p == NULL)
		return 0;
	if (field_copy(info->state, sizeof(info->state), &f[0]) != 0 ||
	    (strcmp(info->state, "in_progress") != 0 &&
	        strcmp(info->state, "completed") != 0 &&
	        strcmp(info->state, "failed") != 0)) {
		why = "bad state";
		goto fail;
	}
	if ((info->created_ms = field_number(&f[1], STORED_MS_MAX)) < 1) {
		why = "bad created_ms";
		goto fail;
	}
	if (strcmp(info->state, "in_progress") == 0) {
		info->updated_ms = info->expires_ms = 0;
		info->status = 0;
	} else {
		if ((info->updated_ms = field_number(&f[2], STORED_MS_MAX)) <
		    1) {
			why = "bad updated_ms";
			goto fail;
		}
		if (f[3].p == NULL)
			info->expires_ms = 0; /* predates the field */
		else if ((info->expires_ms =
		                 field_number(&f[3], STORED_MS_MAX)) < 1) {
			why = "bad expires_ms";
			goto fail;
		}
		if ((v = field_number(&f[4], 599)) < 100) {
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

/*
 * The scripts answer a bare string ('claimed', 'ok': the common answers,
 * cheapest for Redis to return) or an array whose first element names it.
 */
static int
reply_tag_is(const redisReply *r, const char *tag)
{
	if (r->type == REDIS_REPLY_STRING)
		return strcmp(r->str, tag) == 0;
	return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, tag) == 0;
}

/* Decodes {'recorded', 9 fields} into rec. */
static enum idem_status
reply_decode_recorded(const redisReply *r, struct idem_record *rec)
{
	struct idem_field f[RECORD_FIELDS];
	char err[128];
	size_t i;

	if (r->elements != RECORD_FIELDS + 1)
		goto bad;
	for (i = 0; i < RECORD_FIELDS; i++) {
		const redisReply *e = r->element[i + 1];

		if (e->type == REDIS_REPLY_NIL) {
			f[i].p = NULL;
			f[i].n = 0;
		} else if (e->type == REDIS_REPLY_STRING) {
			f[i].p = e->str;
			f[i].n = e->len;
		} else
			goto bad;
	}
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
reply_conflict(const redisReply *r, int with_params, struct idem_conflict *cf)
{
	const redisReply *e;
	struct idem_field f;

	memset(cf, 0, sizeof(*cf));
	if (r->elements < 2 || (e = r->element[1])->type != REDIS_REPLY_STRING)
		return;
	f.p = e->str;
	f.n = e->len;
	if (with_params) {
		if (header_value_safe(&f))
			(void)field_copy(cf->params, sizeof(cf->params), &f);
	} else if ((cf->claim_created_ms = field_number(&f, STORED_MS_MAX)) < 0)
		cf->claim_created_ms = 0;
}

/* One operation in flight: what to decode its reply as, and for whom. */
enum idem_op_kind { OP_CLAIM, OP_RECORD, OP_RELEASE, OP_LOOKUP };

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
};

struct reply_tag {
	const char *tag;
	enum idem_status st;
	enum tag_detail detail;
};

static const struct reply_tag claim_tags[] = {
	{ "claimed", IDEM_CLAIMED, TAG_PLAIN },
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

/* Decodes a claim's or a record's reply by its tag (rows: a table above). */
static void
tags_decode(const redisReply *r, const struct reply_tag *rows,
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
		}
		return;
	}
	res->errstr = unexpected;
}

/* err (errlen bytes, the caller's) holds a decoding error for res. */
static void
lookup_decode(const redisReply *r, struct idem_result *res, char *err,
    size_t errlen)
{
	struct idem_field f[INFO_FIELDS];
	size_t i;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != INFO_FIELDS + 1 ||
	    r->element[INFO_FIELDS]->type != REDIS_REPLY_INTEGER)
		goto bad;
	for (i = 0; i < INFO_FIELDS; i++) {
		const redisReply *e = r->element[i];

		if (e->type == REDIS_REPLY_NIL) {
			f[i].p = NULL;
			f[i].n = 0;
		} else if (e->type == REDIS_REPLY_STRING) {
			f[i].p = e->str;
			f[i].n = e->len;
		} else
			goto bad;
	}
	switch (idem_info_decode(f, INFO_FIELDS,
	    r->element[INFO_FIELDS]->integer, &res->info, err, errlen)) {
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

/* The script's reply: decoded for the caller, whose callback runs once. */
static void
on_script_reply(const struct redis_result *rr, void *arg)
{
	struct idem_op *op = arg;
	struct idem_result res;
	const redisReply *r = rr->reply;
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
			if (r->type == REDIS_REPLY_INTEGER)
				res.st = r->integer == 1 ? IDEM_RELEASED
				                         : IDEM_NOT_OWNER;
			else
				res.errstr = "release: unexpected reply";
			break;
		case OP_LOOKUP: lookup_decode(r, &res, err, sizeof(err)); break;
		}
	}
	op->cb(&res, op->arg);
	idem_record_free(&res.rec);
	free(op);
}

/* Sends script s for cb; 0, or -1 (ENOMEM: cb will not be called). */
static int
op_send(struct redis_client *c, struct lua_script *s, enum idem_op_kind kind,
    const char *rkey, int argc, const char **argv, const size_t *argvlen,
    int wait, idem_cb *cb, void *arg)
{
	struct idem_op *op;

	if ((op = malloc(sizeof(*op))) == NULL)
		return -1;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	if (redis_eval(c, s, rkey, strlen(rkey), argc, argv, argvlen, wait,
	        on_script_reply, op) != 0) {
		free(op);
		return -1;
	}
	return 0;
}

int
idem_claim(struct redis_client *c, const char *rkey, const char *fingerprint,
    const char *params, const char *owner, long long now_ms,
    long long lock_ttl_ms, idem_cb *cb, void *arg)
{
	char now[24], ttl[24];
	const char *argv[5];
	size_t argvlen[5];
	int i;

	(void)util_lltoa(now_ms, now, sizeof(now));
	(void)util_lltoa(lock_ttl_ms, ttl, sizeof(ttl));
	argv[0] = fingerprint;
	argv[1] = owner;
	argv[2] = now;
	argv[3] = ttl;
	argv[4] = params;
	for (i = 0; i < 5; i++)
		argvlen[i] = strlen(argv[i]);
	return op_send(c, &script_claim, OP_CLAIM, rkey, 5, argv, argvlen, 0,
	    cb, arg);
}

int
idem_record(struct redis_client *c, const char *rkey, const char *owner,
    const char *fingerprint, const char *params, const struct idem_record *out,
    long long ttl_ms, long long now_ms, idem_cb *cb, void *arg)
{
	char status[8], ttl[24], now[24], expires[24], blen[24] = "";
	const char *argv[14];
	size_t argvlen[14];
	int file = out->body_file[0] != '\0', i, n;

	(void)util_lltoa(out->status, status, sizeof(status));
	(void)util_lltoa(ttl_ms, ttl, sizeof(ttl));
	(void)util_lltoa(now_ms, now, sizeof(now));
	(void)util_lltoa(now_ms + ttl_ms, expires, sizeof(expires));
	if (file)
		(void)util_lltoa((long long)out->body_len, blen, sizeof(blen));
	argv[0] = owner;
	argv[1] = fingerprint;
	argv[2] = params;
	argv[3] = out->state;
	argv[4] = status;
	argv[5] = out->content_type;
	argv[6] = out->retry_after;
	argv[7] = ttl;
	argv[8] = now;
	argv[9] = expires;
	argv[10] = file ? "file" : "inline";
	argv[11] = file ? out->body_file : (out->body != NULL ? out->body : "");
	argv[12] = blen; /* file only: an inline record sends 12 arguments */
	argv[13] = out->body_sha256;
	n = file ? 14 : 12;
	for (i = 0; i < n; i++)
		argvlen[i] = strlen(argv[i]);
	if (!file)
		argvlen[11] = out->body_len; /* binary-safe inline body */
	return op_send(c, &script_record, OP_RECORD, rkey, n, argv, argvlen, 1,
	    cb, arg);
}

int
idem_release(struct redis_client *c, const char *rkey, const char *owner,
    idem_cb *cb, void *arg)
{
	const char *argv[1] = { owner };
	size_t argvlen[1] = { strlen(owner) };

	return op_send(c, &script_release, OP_RELEASE, rkey, 1, argv, argvlen,
	    0, cb, arg);
}

int
idem_lookup(struct redis_client *c, const char *rkey, idem_cb *cb, void *arg)
{
	return op_send(c, &script_lookup, OP_LOOKUP, rkey, 0, NULL, NULL, 0, cb,
	    arg);
}
