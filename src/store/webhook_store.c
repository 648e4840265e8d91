/*
 * webhook_store.c - lua/webhook.lua from C: one EVALSHA per operation,
 * its reply decoded for the caller's callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lua_scripts.h"
#include "util.h"
#include "webhook_store.h"

static struct lua_script script_webhook = { "webhook", lua_webhook, 0, "" };

/* The fields of 'peek': a settled record's, then these two. */
enum peek_field { PK_FINGERPRINT = RECORD_FIELDS, PK_REQUEST, PEEK_FIELDS };

enum wstore_op_kind { WOP_PEEK, WOP_BEGIN, WOP_PLAIN };

struct wstore_op {
	enum wstore_op_kind kind;
	wstore_cb *cb;
	void *arg;
};

int
wstore_init(void)
{
	script_webhook.len = lua_webhook_len;
	return redis_script_init(&script_webhook);
}

int
wstore_event_name(char *out, size_t outlen, const char *prefix, const char *id)
{
	struct util_buf b;

	util_buf_init(&b, out, outlen);
	util_buf_str(&b, prefix);
	util_buf_str(&b, "event:");
	util_buf_str(&b, id);
	return (int)util_buf_len(&b);
}

/* A string element i of r (nil: p NULL); -1 when r has no such element. */
static int
element(const struct redis_reply *r, size_t i, struct idem_field *f)
{
	const struct redis_reply *e = redis_reply_at(r, i);

	if (e == NULL)
		return -1;
	f->p = NULL;
	f->n = 0;
	if (redis_reply_type(e) == REDIS_R_NIL)
		return 0;
	if (redis_reply_type(e) != REDIS_R_STRING)
		return -1;
	f->p = redis_reply_str(e, &f->n);
	return 0;
}

static int
field_copy(char *dst, size_t dstlen, const struct idem_field *f)
{
	if (f->p == NULL || f->n >= dstlen || memchr(f->p, '\0', f->n) != NULL)
		return -1;
	memcpy(dst, f->p, f->n);
	dst[f->n] = '\0';
	return 0;
}

/*
 * A settled record is decoded as a replay would decode it; an open one
 * (in_progress, unknown) gives its state, fingerprint and kept request.
 */
static void
peek_decode(const struct redis_reply *r, struct wstore_result *res, char *err,
    size_t errlen)
{
	struct idem_field f[PEEK_FIELDS];
	size_t i;

	if (redis_reply_len(r) != PEEK_FIELDS)
		goto bad;
	for (i = 0; i < PEEK_FIELDS; i++)
		if (element(r, i, &f[i]) != 0)
			goto bad;
	if (f[RF_STATE].p == NULL) {
		res->st = WSTORE_ABSENT;
		return;
	}
	if (field_copy(res->fingerprint, sizeof(res->fingerprint),
	        &f[PK_FINGERPRINT]) != 0 ||
	    field_copy(res->rec.state, sizeof(res->rec.state), &f[RF_STATE]) !=
	        0)
		goto bad;
	if (strcmp(res->rec.state, "completed") == 0 ||
	    strcmp(res->rec.state, "failed") == 0) {
		if (idem_record_decode(f, RECORD_FIELDS, &res->rec, err,
		        errlen) != 0) {
			log_error(NULL, "%s", err);
			res->errstr = err;
			return;
		}
	} else if (strcmp(res->rec.state, "unknown") == 0) {
		if (f[PK_REQUEST].p == NULL ||
		    (res->request = malloc(f[PK_REQUEST].n + 1)) == NULL)
			goto bad;
		memcpy(res->request, f[PK_REQUEST].p, f[PK_REQUEST].n);
		res->request[f[PK_REQUEST].n] = '\0';
		res->request_len = f[PK_REQUEST].n;
	} else if (strcmp(res->rec.state, "in_progress") != 0)
		goto bad;
	res->st = WSTORE_FOUND;
	return;
bad:
	res->errstr = "webhook: unexpected peek reply";
}

static void
begin_decode(const struct redis_reply *r, struct wstore_result *res)
{
	struct idem_field f;
	const char *s;
	size_t n;

	if (redis_reply_type(r) == REDIS_R_STRING &&
	    (s = redis_reply_str(r, &n)) != NULL && strcmp(s, "new") == 0) {
		res->st = WSTORE_NEW;
		return;
	}
	if (redis_reply_len(r) != 2 || element(r, 0, &f) != 0 || f.p == NULL ||
	    f.n != 4 || memcmp(f.p, "seen", 4) != 0 || element(r, 1, &f) != 0)
		goto bad;
	if (f.p == NULL) {
		/* expired between the SET and the GET: ours to try again */
		res->st = WSTORE_BUSY;
		return;
	}
	if (field_copy(res->seen, sizeof(res->seen), &f) != 0)
		goto bad;
	res->st =
	    strcmp(res->seen, "processing") == 0 ? WSTORE_BUSY : WSTORE_SEEN;
	return;
bad:
	res->errstr = "webhook: unexpected begin reply";
}

static void
on_reply(const struct redis_result *rr, void *arg)
{
	struct wstore_op *op = arg;
	struct wstore_result res;
	const struct redis_reply *r = rr->reply;
	char err[128];

	memset(&res, 0, sizeof(res));
	res.st = WSTORE_ERR_REDIS;
	res.errstr = rr->errstr;
	if (r != NULL) {
		switch (op->kind) {
		case WOP_PEEK: peek_decode(r, &res, err, sizeof(err)); break;
		case WOP_BEGIN: begin_decode(r, &res); break;
		case WOP_PLAIN:
			if (redis_reply_type(r) == REDIS_R_INTEGER)
				res.st = WSTORE_DONE;
			else
				res.errstr = "webhook: unexpected reply";
			break;
		}
	}
	op->cb(&res, op->arg);
	idem_record_free(&res.rec);
	free(res.request);
	free(op);
}

static int
op_send(struct redis_client *c, enum wstore_op_kind kind, const char *key,
    int argc, const char **argv, wstore_cb *cb, void *arg)
{
	struct wstore_op *op;
	size_t argvlen[3];
	int i;

	if ((op = malloc(sizeof(*op))) == NULL)
		return -1;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	for (i = 0; i < argc; i++)
		argvlen[i] = strlen(argv[i]);
	if (redis_eval(c, &script_webhook, key, strlen(key), argc, argv,
	        argvlen, 0, on_reply, op) != 0) {
		free(op);
		return -1;
	}
	return 0;
}

int
wstore_peek(struct redis_client *c, const char *rkey, wstore_cb *cb, void *arg)
{
	const char *argv[1] = { "peek" };

	return op_send(c, WOP_PEEK, rkey, 1, argv, cb, arg);
}

int
wstore_event_begin(struct redis_client *c, const char *ekey, long long lease_ms,
    wstore_cb *cb, void *arg)
{
	char lease[24];
	const char *argv[2] = { "begin", lease };

	(void)util_lltoa(lease_ms, lease, sizeof(lease));
	return op_send(c, WOP_BEGIN, ekey, 2, argv, cb, arg);
}

int
wstore_event_done(struct redis_client *c, const char *ekey, const char *result,
    long long ttl_ms, wstore_cb *cb, void *arg)
{
	char ttl[24];
	const char *argv[3] = { "done", result, ttl };

	(void)util_lltoa(ttl_ms, ttl, sizeof(ttl));
	return op_send(c, WOP_PLAIN, ekey, 3, argv, cb, arg);
}

int
wstore_event_forget(struct redis_client *c, const char *ekey, wstore_cb *cb,
    void *arg)
{
	const char *argv[1] = { "forget" };

	return op_send(c, WOP_PLAIN, ekey, 1, argv, cb, arg);
}
