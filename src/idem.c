/*
 * idem.c - the idempotency store. Each operation is one EVALSHA of a script
 * in lua/ touching exactly one key, so a fresh charge costs two round trips
 * (claim, record) and a replay one (claim returns the record).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem.h"
#include "log.h"
#include "lua_scripts.h"
#include "util.h"

#define RECORD_FIELDS 8   /* state status content_type retry_after body body_file body_len body_sha256 */

static struct lua_script script_claim = { "claim", lua_claim, 0, "" };
static struct lua_script script_record = { "record", lua_record, 0, "" };
static struct lua_script script_release = { "release", lua_release, 0, "" };

int
idem_init(void)
{
	script_claim.len = lua_claim_len;
	script_record.len = lua_record_len;
	script_release.len = lua_release_len;
	if (redis_script_init(&script_claim) != 0 ||
	    redis_script_init(&script_record) != 0 ||
	    redis_script_init(&script_release) != 0)
		return -1;
	return 0;
}

int
idem_key_name(char *out, size_t outlen, const char *prefix,
    const char *principal, const char *key, size_t keylen)
{
	int n;

	if (keylen > IDEM_KEY_MAX)
		return -1;
	n = snprintf(out, outlen, "%sidem:%s:%.*s", prefix, principal,
	    (int)keylen, key);
	if (n < 0 || (size_t)n >= outlen)
		return -1;
	return n;
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
		if ((unsigned char)f->p[i] < 0x20 || (unsigned char)f->p[i] > 0x7e)
			return 0;
	return 1;
}

/* Decimal without sign in [0, max]; -1 otherwise. */
static long long
field_number(const struct idem_field *f, long long max)
{
	unsigned long long v;

	if (f->p == NULL || util_decimal(f->p, f->n, (unsigned long long)max,
	    &v) != UTIL_DEC_OK)
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
	    field_copy(rec->content_type, sizeof(rec->content_type), &f[2]) != 0) {
		why = "bad content_type";
		goto fail;
	}
	if (field_copy(rec->retry_after, sizeof(rec->retry_after), &f[3]) != 0 ||
	    (f[3].p != NULL && field_number(&f[3], 1000000000LL) < 0)) {
		why = "bad retry_after";
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
	if ((v = field_number(&f[6], (long long)MAX_REQUEST_BYTES_MAX * 64)) < 0) {
		why = "bad body_len";
		goto fail;
	}
	rec->body_len = (size_t)v;
	if (field_copy(rec->body_sha256, sizeof(rec->body_sha256), &f[7]) != 0 ||
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

void
idem_record_free(struct idem_record *rec)
{
	if (rec == NULL)
		return;
	free(rec->body);
	rec->body = NULL;
}

static int
reply_tag_is(const redisReply *r, const char *tag)
{
	return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(r->element[0]->str, tag) == 0;
}

/* Decodes {'recorded', 8 fields} into rec. */
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

enum idem_status
idem_claim(struct redis_conn *c, const char *rkey, const char *fingerprint,
    const char *owner, long long now_ms, long long lock_ttl_ms,
    struct idem_record *rec)
{
	char now[24], ttl[24];
	const char *argv[4];
	size_t argvlen[4];
	redisReply *r;
	enum idem_status st = IDEM_ERR_REDIS;

	(void)snprintf(now, sizeof(now), "%lld", now_ms);
	(void)snprintf(ttl, sizeof(ttl), "%lld", lock_ttl_ms);
	argv[0] = fingerprint; argvlen[0] = strlen(fingerprint);
	argv[1] = owner; argvlen[1] = strlen(owner);
	argv[2] = now; argvlen[2] = strlen(now);
	argv[3] = ttl; argvlen[3] = strlen(ttl);
	r = redis_eval(c, &script_claim, rkey, strlen(rkey), 4, argv, argvlen);
	if (r == NULL)
		return IDEM_ERR_REDIS;
	if (reply_tag_is(r, "claimed"))
		st = IDEM_CLAIMED;
	else if (reply_tag_is(r, "in_progress"))
		st = IDEM_IN_PROGRESS;
	else if (reply_tag_is(r, "mismatch"))
		st = IDEM_MISMATCH;
	else if (reply_tag_is(r, "recorded"))
		st = reply_decode_recorded(r, rec);
	else
		(void)snprintf(c->errstr, sizeof(c->errstr),
		    "claim: unexpected reply");
	freeReplyObject(r);
	return st;
}

enum idem_status
idem_record(struct redis_conn *c, const char *rkey, const char *owner,
    const char *fingerprint, const struct idem_record *out, long long ttl_ms,
    long long now_ms, struct idem_record *existing)
{
	char status[8], ttl[24], now[24], blen[24];
	const char *argv[12];
	size_t argvlen[12];
	redisReply *r;
	enum idem_status st = IDEM_ERR_REDIS;
	int file = out->body_file[0] != '\0', i, durable = 1;

	(void)snprintf(status, sizeof(status), "%d", out->status);
	(void)snprintf(ttl, sizeof(ttl), "%lld", ttl_ms);
	(void)snprintf(now, sizeof(now), "%lld", now_ms);
	(void)snprintf(blen, sizeof(blen), "%zu", out->body_len);
	argv[0] = owner;
	argv[1] = fingerprint;
	argv[2] = out->state;
	argv[3] = status;
	argv[4] = out->content_type;
	argv[5] = out->retry_after;
	argv[6] = ttl;
	argv[7] = now;
	argv[8] = file ? "file" : "inline";
	argv[9] = file ? out->body_file : (out->body != NULL ? out->body : "");
	argv[10] = file ? blen : "";
	argv[11] = file ? out->body_sha256 : "";
	for (i = 0; i < 12; i++)
		argvlen[i] = strlen(argv[i]);
	if (!file)
		argvlen[9] = out->body_len;     /* binary-safe inline body */
	r = redis_eval_durable(c, &script_record, rkey, strlen(rkey), 12, argv,
	    argvlen, &durable);
	if (r == NULL)
		return IDEM_ERR_REDIS;
	if (reply_tag_is(r, "ok"))
		st = durable ? IDEM_RECORDED : IDEM_NOT_DURABLE;
	else if (reply_tag_is(r, "mismatch"))
		st = IDEM_MISMATCH;
	else if (reply_tag_is(r, "fenced"))
		st = IDEM_FENCED;
	else if (reply_tag_is(r, "recorded"))
		st = reply_decode_recorded(r, existing);
	else
		(void)snprintf(c->errstr, sizeof(c->errstr),
		    "record: unexpected reply");
	freeReplyObject(r);
	return st;
}

enum idem_status
idem_release(struct redis_conn *c, const char *rkey, const char *owner)
{
	const char *argv[1] = { owner };
	size_t argvlen[1] = { strlen(owner) };
	redisReply *r;
	enum idem_status st = IDEM_ERR_REDIS;

	r = redis_eval(c, &script_release, rkey, strlen(rkey), 1, argv, argvlen);
	if (r == NULL)
		return IDEM_ERR_REDIS;
	if (r->type == REDIS_REPLY_INTEGER)
		st = r->integer == 1 ? IDEM_RELEASED : IDEM_NOT_OWNER;
	freeReplyObject(r);
	return st;
}
