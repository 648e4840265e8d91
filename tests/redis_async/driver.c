/*
 * driver.c - runs the Redis client (redis.h) on a libuv loop from the
 * command line, for tests/redis_async/run.sh. One line per command's callback:
 *
 *   <round> <index> ok|err ms=<call to callback> unknown=<0|1>
 *       durable=<0|1> reply=<i:N|s:TEXT|a:N|nil|-> err=<errstr>
 *
 * then "summary ok=N err=N unknown=N nondurable=N maxms=N".
 *
 *   redis_async_driver [-t timeout_ms] [-m min_replicas]
 *       [-r replica_timeout_ms] [-w] [-n per_round] [-c rounds]
 *       [-i interval_ms] [-k key_prefix] [-S] [-p] [-x] [-F] URL
 *
 * -F: redis_client_free() inside the first callback (as a loop that stops
 * when its last request ends does); the others still pending get theirs
 * after it ("after-free" counts them), the loop then runs until its
 * handles closed.
 * -q MS: redis_client_free() MS ms after the start, commands pending
 * (their callbacks must come before it returns: "closed-before" counts
 * the ones that did not). -w: commands with WAIT; -S: one command at a time (the next one after
 * the previous callback; unpipelined, a test's negative control); -p: PING
 * instead of the script; -x: redis_startup_check() only (prints its
 * return value and errstr). The script is INCR KEYS[1] and returns the new
 * value; a key per command unless -k ends with '=' (then one key).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "clock.h"
#include "log.h"
#include "redis.h"
#include "redis_url.h"

/*
 * A rediss URL's TLS settings, which the configuration gives the
 * responder: from REDIS_TLS_CA, REDIS_TLS_CERT, REDIS_TLS_KEY,
 * REDIS_TLS_NAME and REDIS_TLS_VERIFY (default 1).
 */
static void
drv_tls_env(struct redis_target *t)
{
	const char *v;

	if ((v = getenv("REDIS_TLS_CA")) != NULL)
		(void)snprintf(t->tls.ca_file, sizeof(t->tls.ca_file), "%s", v);
	if ((v = getenv("REDIS_TLS_CERT")) != NULL)
		(void)snprintf(t->tls.cert_file, sizeof(t->tls.cert_file), "%s",
		    v);
	if ((v = getenv("REDIS_TLS_KEY")) != NULL)
		(void)snprintf(t->tls.key_file, sizeof(t->tls.key_file), "%s",
		    v);
	if ((v = getenv("REDIS_TLS_NAME")) != NULL)
		(void)snprintf(t->tls.server_name, sizeof(t->tls.server_name),
		    "%s", v);
	v = getenv("REDIS_TLS_VERIFY");
	t->tls.verify = v == NULL || strcmp(v, "0") != 0;
}

static const char script_src[] =
    "-- redis_async driver\nreturn redis.call('INCR', KEYS[1])\n";

struct drv {
	uv_loop_t *loop;
	struct redis_client *c;
	struct lua_script s;
	uv_timer_t round_timer, quit_timer;
	int quit_ms, freeing, free_in_cb;
	long after_free; /* callbacks after redis_client_free() returned */
	int per_round, rounds, interval_ms, wait, serial, ping;
	int round, issued, outstanding;
	const char *prefix;
	long ok, err, unknown, nondurable, maxms;
	int fail; /* redis_eval returned -1 */
};

struct call {
	struct drv *d;
	int round, index;
	long long t0_us;
	char key[128];
};

static void issue(struct drv *d, int index);

static void
print_reply(const struct redis_reply *r)
{
	const char *s;
	size_t len = 0;

	if (r == NULL) {
		fputs("-", stdout);
		return;
	}
	switch (redis_reply_type(r)) {
	case REDIS_R_INTEGER: printf("i:%lld", redis_reply_int(r)); break;
	case REDIS_R_STRING:
	case REDIS_R_STATUS:
		s = redis_reply_str(r, &len);
		printf("s:%.*s", (int)len, s);
		break;
	case REDIS_R_ARRAY: printf("a:%zu", redis_reply_len(r)); break;
	case REDIS_R_NIL: fputs("nil", stdout); break;
	default: fputs("?", stdout);
	}
}

static void
on_result(const struct redis_result *res, void *arg)
{
	struct call *k = arg;
	struct drv *d = k->d;
	long ms = (long)((now_mono_us() - k->t0_us) / 1000);

	printf("%d %d %s ms=%ld unknown=%d durable=%d reply=", k->round,
	    k->index, res->reply != NULL ? "ok" : "err", ms,
	    res->outcome_unknown, res->durable);
	print_reply(res->reply);
	printf(" err=%s\n", res->errstr);
	if (res->reply != NULL)
		d->ok++;
	else
		d->err++;
	d->unknown += res->outcome_unknown;
	d->nondurable += res->reply != NULL && !res->durable;
	if (ms > d->maxms)
		d->maxms = ms;
	d->outstanding--;
	if (d->c == NULL)
		d->after_free++;
	if (d->serial && k->index + 1 < d->per_round)
		issue(d, k->index + 1);
	free(k);
	if (d->free_in_cb && d->c != NULL) {
		redis_client_free(d->c);
		d->c = NULL;
		printf("freed-in-callback outstanding=%d\n", d->outstanding);
		return;
	}
	if (d->outstanding == 0 && d->c != NULL && d->round + 1 >= d->rounds &&
	    (!d->serial || d->issued >= d->per_round * d->rounds))
		uv_stop(d->loop);
}

static void
issue(struct drv *d, int index)
{
	struct call *k = calloc(1, sizeof(*k));
	const char *argv[1] = { "x" };
	size_t argvlen[1] = { 1 };
	size_t plen = strlen(d->prefix);
	int rc;

	if (k == NULL) {
		d->fail = 1;
		return;
	}
	k->d = d;
	k->round = d->round;
	k->index = index;
	k->t0_us = now_mono_us();
	if (plen > 0 && d->prefix[plen - 1] == '=')
		(void)snprintf(k->key, sizeof(k->key), "%.*s", (int)plen - 1,
		    d->prefix);
	else
		(void)snprintf(k->key, sizeof(k->key), "%s%d:%d", d->prefix,
		    d->round, index);
	d->outstanding++;
	d->issued++;
	if (d->ping)
		rc = redis_ping(d->c, on_result, k);
	else
		rc = redis_eval(d->c, &d->s, k->key, strlen(k->key), 1, argv,
		    argvlen, d->wait, on_result, k);
	if (rc != 0) {
		printf("%d %d queue-failed\n", d->round, index);
		d->outstanding--;
		d->fail = 1;
		free(k);
	}
}

static void
on_quit_timer(uv_timer_t *t)
{
	struct drv *d = t->data;

	redis_client_free(d->c);
	d->c = NULL;
	printf("freed outstanding=%d\n", d->outstanding);
	uv_stop(d->loop);
}

static void
start_round(struct drv *d)
{
	int i;

	if (d->serial) {
		issue(d, 0);
		return;
	}
	/* all of them in this one loop turn: they leave in one write */
	for (i = 0; i < d->per_round; i++)
		issue(d, i);
}

static void
on_round_timer(uv_timer_t *t)
{
	struct drv *d = t->data;

	if (d->round + 1 >= d->rounds) {
		uv_timer_stop(t);
		return;
	}
	d->round++;
	start_round(d);
}

int
main(int argc, char **argv)
{
	struct redis_target t;
	struct drv d;
	uv_loop_t loop;
	char err[256];
	int timeout_ms = 1000, min_replicas = 0, replica_ms = 100;
	int check = 0, i, rc;

	memset(&d, 0, sizeof(d));
	d.per_round = 1;
	d.rounds = 1;
	d.prefix = "drv:";
	for (i = 1; i < argc - 1; i++) {
		if (strcmp(argv[i], "-t") == 0)
			timeout_ms = atoi(argv[++i]);
		else if (strcmp(argv[i], "-m") == 0)
			min_replicas = atoi(argv[++i]);
		else if (strcmp(argv[i], "-r") == 0)
			replica_ms = atoi(argv[++i]);
		else if (strcmp(argv[i], "-n") == 0)
			d.per_round = atoi(argv[++i]);
		else if (strcmp(argv[i], "-c") == 0)
			d.rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "-i") == 0)
			d.interval_ms = atoi(argv[++i]);
		else if (strcmp(argv[i], "-k") == 0)
			d.prefix = argv[++i];
		else if (strcmp(argv[i], "-q") == 0)
			d.quit_ms = atoi(argv[++i]);
		else if (strcmp(argv[i], "-w") == 0)
			d.wait = 1;
		else if (strcmp(argv[i], "-S") == 0)
			d.serial = 1;
		else if (strcmp(argv[i], "-p") == 0)
			d.ping = 1;
		else if (strcmp(argv[i], "-x") == 0)
			check = 1;
		else if (strcmp(argv[i], "-F") == 0)
			d.free_in_cb = 1;
		else
			break;
	}
	if (i != argc - 1 || d.per_round < 1 || d.rounds < 1) {
		fprintf(stderr, "usage: see tests/redis_async/driver.c\n");
		return 2;
	}
	if (getenv("DRIVER_LOG_DEBUG") != NULL)
		log_set_level(LL_DEBUG);
	else
		log_set_level(LL_INFO);
	if (redis_url_parse(argv[i], &t, err, sizeof(err)) != 0) {
		fprintf(stderr, "driver: %s\n", err);
		return 2;
	}
	if (t.tls.on)
		drv_tls_env(&t);
	if (check) {
		rc = redis_startup_check(&t, timeout_ms, err, sizeof(err));
		printf("startup_check %d %s\n", rc, rc != 0 ? err : "");
		return 0;
	}
	d.s.name = "incr";
	d.s.src = script_src;
	d.s.len = sizeof(script_src) - 1;
	if (redis_script_init(&d.s) != 0 || uv_loop_init(&loop) != 0)
		return 1;
	d.loop = &loop;
	d.c = redis_client_new(&loop, &t, timeout_ms, min_replicas, replica_ms);
	if (d.c == NULL)
		return 1;
	if (uv_timer_init(&loop, &d.round_timer) != 0)
		return 1;
	d.round_timer.data = &d;
	if (uv_timer_init(&loop, &d.quit_timer) != 0)
		return 1;
	d.quit_timer.data = &d;
	if (d.quit_ms > 0)
		(void)uv_timer_start(&d.quit_timer, on_quit_timer,
		    (uint64_t)d.quit_ms, 0);
	if (d.rounds > 1)
		(void)uv_timer_start(&d.round_timer, on_round_timer,
		    (uint64_t)d.interval_ms, (uint64_t)d.interval_ms);
	start_round(&d);
	if (!d.fail || d.outstanding > 0)
		(void)uv_run(&loop, UV_RUN_DEFAULT);
	rc = d.outstanding;
	redis_client_free(d.c);
	uv_close((uv_handle_t *)&d.round_timer, NULL);
	uv_close((uv_handle_t *)&d.quit_timer, NULL);
	(void)uv_run(&loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&loop) != 0) {
		printf("loop-not-closed\n");
		return 1;
	}
	printf("summary ok=%ld err=%ld unknown=%ld nondurable=%ld maxms=%ld "
	       "pending=%d after-free=%ld\n",
	    d.ok, d.err, d.unknown, d.nondurable, d.maxms, rc, d.after_free);
	return d.fail ? 1 : 0;
}
