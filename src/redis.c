/*
 * redis.c - one hiredis connection per worker. After any connection error a
 * hiredis context is dead: it is freed and the next call reconnects (with
 * AUTH, SELECT and timeouts again: redisReconnect would lose them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "digest.h"
#include "log.h"
#include "redis.h"

#define EVAL_ARGS_MAX 24     /* EVALSHA sha 1 key + at most 20 arguments */

static void
copy_err(char *dst, size_t dstlen, const char *src)
{
	(void)snprintf(dst, dstlen, "%s", src != NULL ? src : "unknown error");
}

int
redis_script_init(struct lua_script *s)
{
	return digest_sha1_hex(s->src, s->len, s->sha);
}

void
redis_conn_init(struct redis_conn *c, const struct redis_target *t,
    int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->target = *t;
	c->timeout_ms = timeout_ms;
}

void
redis_conn_close(struct redis_conn *c)
{
	if (c == NULL)
		return;
	if (c->ctx != NULL)
		redisFree(c->ctx);
	c->ctx = NULL;
}

static void
conn_fail(struct redis_conn *c, const char *what)
{
	(void)snprintf(c->errstr, sizeof(c->errstr), "%s: %s", what,
	    c->ctx != NULL && c->ctx->errstr[0] != '\0' ? c->ctx->errstr :
	    "connection failed");
	redis_conn_close(c);
}

/* Runs a command on a fresh connection; 0 when the reply is not an error. */
static int
conn_setup_command(struct redis_conn *c, const char *what, int argc,
    const char **argv, redisReply **out)
{
	redisReply *r;

	r = redisCommandArgv(c->ctx, argc, argv, NULL);
	if (r == NULL) {
		conn_fail(c, what);
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		(void)snprintf(c->errstr, sizeof(c->errstr), "%s: %.*s", what,
		    (int)r->len, r->str);
		freeReplyObject(r);
		redis_conn_close(c);
		return -1;
	}
	if (out != NULL)
		*out = r;
	else
		freeReplyObject(r);
	return 0;
}

/*
 * Refuses a Redis that may evict records. A Redis that forbids CONFIG
 * (ACL, renamed command) cannot be checked: that is logged, not fatal.
 */
static int
conn_check_eviction(struct redis_conn *c)
{
	const char *argv[] = { "CONFIG", "GET", "maxmemory-policy" };
	redisReply *r;

	r = redisCommandArgv(c->ctx, 3, argv, NULL);
	if (r == NULL) {
		conn_fail(c, "CONFIG GET");
		return -1;
	}
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING) {
		c->evicting = strcmp(r->element[1]->str, "noeviction") != 0;
		if (c->evicting) {
			(void)snprintf(c->errstr, sizeof(c->errstr),
			    "Redis maxmemory-policy is %s; records could be "
			    "evicted: refusing (set noeviction)",
			    r->element[1]->str);
			log_error(NULL, "%s", c->errstr);
			freeReplyObject(r);
			redis_conn_close(c);
			return -1;
		}
	} else {
		log_warn(NULL, "cannot read Redis maxmemory-policy (%s); "
		    "make sure it is noeviction",
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	}
	freeReplyObject(r);
	return 0;
}

static int
conn_connect(struct redis_conn *c)
{
	const struct redis_target *t = &c->target;
	struct timeval tv;
	char db[16];

	c->evicting = 0;
	tv.tv_sec = c->timeout_ms / 1000;
	tv.tv_usec = (c->timeout_ms % 1000) * 1000;
	if (t->is_unix)
		c->ctx = redisConnectUnixWithTimeout(t->path, tv);
	else
		c->ctx = redisConnectWithTimeout(t->host, t->port, tv);
	if (c->ctx == NULL) {
		copy_err(c->errstr, sizeof(c->errstr), "connect: out of memory");
		return -1;
	}
	if (c->ctx->err) {
		conn_fail(c, "connect");
		return -1;
	}
	if (redisSetTimeout(c->ctx, tv) != REDIS_OK) {
		conn_fail(c, "set timeout");
		return -1;
	}
	/* keepalive on a unix socket fails and poisons the context */
	if (!t->is_unix && redisEnableKeepAlive(c->ctx) != REDIS_OK) {
		conn_fail(c, "keepalive");
		return -1;
	}
	if (t->password[0] != '\0') {
		const char *a2[] = { "AUTH", t->password };
		const char *a3[] = { "AUTH", t->user, t->password };

		if (conn_setup_command(c, "AUTH", t->user[0] ? 3 : 2,
		    t->user[0] ? a3 : a2, NULL) != 0)
			return -1;
	}
	if (t->db != 0) {
		const char *sel[] = { "SELECT", db };

		(void)snprintf(db, sizeof(db), "%d", t->db);
		if (conn_setup_command(c, "SELECT", 2, sel, NULL) != 0)
			return -1;
	}
	return conn_check_eviction(c);
}

/* A dead connection found on first use: worth one reconnect. */
static int
reply_error_retryable(int err, int saved_errno)
{
	if (err == REDIS_ERR_EOF)
		return 1;
	return err == REDIS_ERR_IO &&
	    (saved_errno == EPIPE || saved_errno == ECONNRESET);
}

/* Writes v in decimal at p; returns the number of digits. */
static size_t
put_uint(char *p, size_t v)
{
	char tmp[24];
	size_t n = 0, i;

	do
		tmp[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	for (i = 0; i < n; i++)
		p[i] = tmp[n - 1 - i];
	return n;
}

/*
 * RESP framing of one command: "*<argc>\r\n" then "$<len>\r\n<bytes>\r\n"
 * per argument, into buf when it fits, else into a malloc'd buffer (*heap,
 * caller frees). Written here because hiredis 0.14 formats each argument
 * with sdscatfmt: that cost more instructions than the rest of a replay.
 */
static char *
resp_format(int argc, const char **argv, const size_t *argvlen, char *buf,
    size_t bufsize, char **heap, size_t *outlen)
{
	size_t need = 16, len, i;
	char *p, *out;

	*heap = NULL;
	for (i = 0; i < (size_t)argc; i++)
		need += 1 + 20 + 2 + argvlen[i] + 2;
	if (need <= bufsize)
		out = buf;
	else if ((out = *heap = malloc(need)) == NULL)
		return NULL;
	p = out;
	*p++ = '*';
	p += put_uint(p, (size_t)argc);
	*p++ = '\r'; *p++ = '\n';
	for (i = 0; i < (size_t)argc; i++) {
		len = argvlen[i];
		*p++ = '$';
		p += put_uint(p, len);
		*p++ = '\r'; *p++ = '\n';
		memcpy(p, argv[i], len);
		p += len;
		*p++ = '\r'; *p++ = '\n';
	}
	*outlen = (size_t)(p - out);
	return out;
}

#define RESP_STACK_BUF 4096     /* bytes; claims and small records fit */

/* Sends one command and reads its reply; NULL with c->errstr on failure. */
static redisReply *
conn_roundtrip(struct redis_conn *c, const char *cmd, size_t len)
{
	void *reply = NULL;

	if (redisAppendFormattedCommand(c->ctx, cmd, len) != REDIS_OK ||
	    redisGetReply(c->ctx, &reply) != REDIS_OK)
		return NULL;
	return reply;
}

static redisReply *
conn_command(struct redis_conn *c, int argc, const char **argv,
    const size_t *argvlen)
{
	char buf[RESP_STACK_BUF], *heap = NULL, *cmd;
	size_t lens[EVAL_ARGS_MAX], len = 0;
	redisReply *r = NULL;
	int attempt, reused, err, saved, i;

	if (argvlen == NULL) {
		if (argc > EVAL_ARGS_MAX)
			return NULL;
		for (i = 0; i < argc; i++)
			lens[i] = strlen(argv[i]);
		argvlen = lens;
	}
	if ((cmd = resp_format(argc, argv, argvlen, buf, sizeof(buf), &heap,
	    &len)) == NULL) {
		copy_err(c->errstr, sizeof(c->errstr), "out of memory");
		return NULL;
	}
	c->outcome_unknown = 0;
	for (attempt = 0; attempt < 2; attempt++) {
		reused = c->ctx != NULL;
		if (c->ctx == NULL && conn_connect(c) != 0)
			break;
		if ((r = conn_roundtrip(c, cmd, len)) != NULL)
			break;
		c->outcome_unknown = 1;
		saved = errno;
		err = c->ctx->err;
		conn_fail(c, argv[0]);
		if (!(reused && reply_error_retryable(err, saved)))
			break;
	}
	free(heap);
	return r;
}

redisReply *
redis_eval(struct redis_conn *c, struct lua_script *s, const char *key,
    size_t keylen, int argc, const char **argv, const size_t *argvlen)
{
	const char *av[EVAL_ARGS_MAX];
	size_t al[EVAL_ARGS_MAX];
	redisReply *r;
	int i, n = 4;

	if (argc < 0 || argc + 4 > EVAL_ARGS_MAX) {
		copy_err(c->errstr, sizeof(c->errstr), "too many arguments");
		return NULL;
	}
	av[0] = "EVALSHA"; al[0] = 7;
	av[1] = s->sha; al[1] = 40;
	av[2] = "1"; al[2] = 1;
	av[3] = key; al[3] = keylen;
	for (i = 0; i < argc; i++, n++) {
		av[n] = argv[i];
		al[n] = argvlen[i];
	}
	r = conn_command(c, n, av, al);
	if (r != NULL && r->type == REDIS_REPLY_ERROR &&
	    strncmp(r->str, "NOSCRIPT", 8) == 0) {
		/* script cache lost (restart, SCRIPT FLUSH): EVAL caches it again */
		freeReplyObject(r);
		log_info(NULL, "NOSCRIPT for %s: loading it again", s->name);
		av[0] = "EVAL"; al[0] = 4;
		av[1] = s->src; al[1] = s->len;
		r = conn_command(c, n, av, al);
	}
	if (r != NULL && r->type == REDIS_REPLY_ERROR) {
		(void)snprintf(c->errstr, sizeof(c->errstr), "%s: %.*s",
		    s->name, (int)r->len, r->str);
		freeReplyObject(r);
		return NULL;
	}
	return r;
}

int
redis_ping(struct redis_conn *c)
{
	const char *argv[] = { "PING" };
	redisReply *r;
	int ok;

	if ((r = conn_command(c, 1, argv, NULL)) == NULL)
		return -1;
	ok = r->type == REDIS_REPLY_STATUS && strcasecmp(r->str, "PONG") == 0;
	if (!ok)
		(void)snprintf(c->errstr, sizeof(c->errstr), "PING: %.*s",
		    (int)r->len, r->str != NULL ? r->str : "");
	freeReplyObject(r);
	return ok ? 0 : -1;
}
