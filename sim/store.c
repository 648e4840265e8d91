/*
 * store.c - keys and charges in memory, one append-only file on disk.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "form.h"

#define STORE_MAX_FIELDS 10
/* compaction at start: at least this many lines, over twice the records */
#define STORE_COMPACT_MIN_LINES 64
#define STORE_COMPACT_FLUSH_BYTES (1 << 20)

static const char *
key_of_key(const void *item, size_t *n)
{
	const struct sim_key *k = item;

	*n = k->klen;
	return k->k;
}

static const char *
key_of_charge(const void *item, size_t *n)
{
	const struct sim_charge *c = item;

	*n = SIM_CHARGE_ID_LEN;
	return c->id;
}

uint64_t
sim_store_scope(const char *secret, size_t n)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	uint64_t v = 0;
	int i;

	if (EVP_Digest(secret, n, md, &mdlen, EVP_sha256(), NULL) != 1)
		sim_fatal("SHA-256 failed");
	for (i = 0; i < 8; i++)
		v = v << 8 | md[i];
	return v;
}

static size_t
key_bytes(uint64_t scope, const char *k, size_t n, char *out)
{
	int i;

	for (i = 0; i < 8; i++)
		out[i] = (char)(scope >> (56 - 8 * i));
	memcpy(out + 8, k, n);
	return n + 8;
}

struct sim_key *
sim_store_key_find(struct sim_store *st, uint64_t scope, const char *k,
    size_t n)
{
	char kb[8 + 1024];

	if (n > sizeof(kb) - 8)
		return NULL;
	return sim_table_get(&st->keys, kb, key_bytes(scope, k, n, kb));
}

static struct sim_key *
key_new(struct sim_store *st, uint64_t scope, const char *k, size_t n,
    int64_t now)
{
	struct sim_key *key = sim_xmalloc(sizeof(*key) + n + 8);

	memset(key, 0, sizeof(*key));
	key->scope = scope;
	key->last_seen = now;
	key->klen = key_bytes(scope, k, n, key->k);
	sim_table_put(&st->keys, key);
	TAILQ_INSERT_TAIL(&st->key_list, key, entry);
	return key;
}

struct sim_key *
sim_store_key_add(struct sim_store *st, uint64_t scope, const char *k, size_t n,
    int64_t now)
{
	if (st->keys.n >= st->max_keys || n > 1024)
		return NULL;
	return key_new(st, scope, k, n, now);
}

static void
touch(struct sim_store *st, struct sim_key *key, int64_t now)
{
	if (now > key->last_seen)
		key->last_seen = now;
	TAILQ_REMOVE(&st->key_list, key, entry);
	TAILQ_INSERT_TAIL(&st->key_list, key, entry);
}

static void
count_delivery(struct sim_store *st, struct sim_key *key, int64_t now,
    const char *meta, size_t meta_len)
{
	key->deliveries++;
	st->deliveries++;
	touch(st, key, now);
	if (key->meta == NULL && meta_len > 0) {
		key->meta = sim_xmemdup(meta, meta_len);
		key->meta_len = meta_len;
	}
}

/* The key's own bytes (without the scope), percent-encoded. */
static void
add_record_head(struct sim_buf *b, char type, int64_t now, uint64_t scope,
    const struct sim_key *key)
{
	unsigned char sc[8];
	int i;

	for (i = 0; i < 8; i++)
		sc[i] = (unsigned char)(scope >> (56 - 8 * i));
	sim_buf_add(b, &type, 1);
	sim_buf_add(b, "\t", 1);
	sim_buf_addi(b, now);
	sim_buf_add(b, "\t", 1);
	sim_buf_addhex(b, sc, 8);
	sim_buf_add(b, "\t", 1);
	if (key != NULL)
		sim_pct_encode(b, key->k + 8, key->klen - 8);
	sim_buf_add(b, "\t", 1);
}

static void
appended(struct sim_store *st)
{
	if (st->fsync == SIM_FSYNC_ALWAYS)
		sim_store_commit(st);
}

void
sim_store_delivery(struct sim_store *st, struct sim_key *key, int64_t now,
    const char *meta, size_t meta_len)
{
	bool first_meta = key->meta == NULL && meta_len > 0;

	count_delivery(st, key, now, meta, meta_len);
	add_record_head(&st->wbuf, 'D', now, key->scope, key);
	if (first_meta)
		sim_buf_add(&st->wbuf, meta, meta_len);
	sim_buf_add(&st->wbuf, "\n", 1);
	appended(st);
}

static struct sim_scope_index *
scope_index(struct sim_store *st, uint64_t scope, bool add)
{
	size_t i;

	for (i = 0; i < st->n_scopes; i++)
		if (st->scopes[i].scope == scope)
			return &st->scopes[i];
	if (!add)
		return NULL;
	st->scopes = sim_xrealloc(st->scopes,
	    (st->n_scopes + 1) * sizeof(st->scopes[0]));
	memset(&st->scopes[st->n_scopes], 0, sizeof(st->scopes[0]));
	st->scopes[st->n_scopes].scope = scope;
	return &st->scopes[st->n_scopes++];
}

size_t
sim_store_lower_bound(struct sim_charge *const *v, size_t n, int64_t created,
    uint64_t seq)
{
	size_t lo = 0, hi = n, mid;

	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (v[mid]->created < created ||
		    (v[mid]->created == created && v[mid]->seq < seq))
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

size_t
sim_store_index_of(struct sim_charge *const *v, size_t n,
    const struct sim_charge *c)
{
	size_t i = sim_store_lower_bound(v, n, c->created, c->seq);

	return i < n && v[i] == c ? i : n;
}

/* Adds c to its scope's index, in (created, seq) order. */
static void
index_add(struct sim_store *st, struct sim_charge *c)
{
	struct sim_scope_index *ix = scope_index(st, c->scope, true);
	size_t i;

	if (ix->n == ix->cap) {
		ix->cap = ix->cap ? 2 * ix->cap : 64;
		ix->v = sim_xrealloc(ix->v, ix->cap * sizeof(ix->v[0]));
	}
	i = sim_store_lower_bound(ix->v, ix->n, c->created, c->seq);
	memmove(ix->v + i + 1, ix->v + i, (ix->n - i) * sizeof(ix->v[0]));
	ix->v[i] = c;
	ix->n++;
}

/* Rebuilds every scope's index from the charge list (after a prune). */
static void
index_rebuild(struct sim_store *st)
{
	struct sim_charge *c;
	size_t i;

	for (i = 0; i < st->n_scopes; i++)
		st->scopes[i].n = 0;
	TAILQ_FOREACH(c, &st->charge_list, entry)
	index_add(st, c);
}

struct sim_charge *const *
sim_store_charges_of(const struct sim_store *st, uint64_t scope, size_t *n)
{
	size_t i;

	for (i = 0; i < st->n_scopes; i++) {
		if (st->scopes[i].scope == scope) {
			*n = st->scopes[i].n;
			return st->scopes[i].v;
		}
	}
	*n = 0;
	return NULL;
}

/* Inserts c into the charge list after every charge created no later
 * (the tail, unless the clock went back). */
static void
list_insert(struct sim_store *st, struct sim_charge *c)
{
	struct sim_charge *p = TAILQ_LAST(&st->charge_list, sim_charge_list);

	while (p != NULL && p->created > c->created)
		p = TAILQ_PREV(p, sim_charge_list, entry);
	if (p == NULL)
		TAILQ_INSERT_HEAD(&st->charge_list, c, entry);
	else
		TAILQ_INSERT_AFTER(&st->charge_list, p, c, entry);
}

static struct sim_charge *
charge_new(struct sim_store *st, struct sim_key *key, uint64_t scope,
    int64_t now, int status, const char *id, const char *json, size_t json_len,
    const char *meta, size_t meta_len)
{
	struct sim_charge *c = sim_xmalloc(sizeof(*c));

	memset(c, 0, sizeof(*c));
	c->status = status;
	c->key = key;
	c->scope = scope;
	c->created = now;
	c->seq = ++st->next_seq;
	memcpy(c->id, id, SIM_CHARGE_ID_LEN);
	c->id[SIM_CHARGE_ID_LEN] = '\0';
	c->json = sim_xmemdup(json, json_len);
	c->json_len = json_len;
	c->meta = sim_xmemdup(meta, meta_len);
	c->meta_len = meta_len;
	sim_table_put(&st->charges, c);
	list_insert(st, c);
	index_add(st, c);
	st->charge_count++;
	if (key != NULL) {
		key->charge = c;
		key->charges++;
	} else {
		st->free_charges++;
	}
	return c;
}

static void
key_store_answer(struct sim_key *key, int status, const unsigned char *fp,
    const char *answer, size_t answer_len)
{
	key->status = status;
	memcpy(key->fp, fp, SIM_FP_LEN);
	free(key->answer);
	key->answer = answer ? sim_xmemdup(answer, answer_len) : NULL;
	key->answer_len = answer ? answer_len : 0;
}

void
sim_store_answer_save(struct sim_key *key, int status, const unsigned char *fp,
    const char *answer, size_t answer_len)
{
	key_store_answer(key, status, fp, answer, answer_len);
}

/* The C record of c (with its key's stored answer). */
static void
add_charge_record(struct sim_buf *b, const struct sim_charge *c)
{
	const struct sim_key *key = c->key;

	add_record_head(b, 'C', c->created, c->scope, key);
	sim_buf_addi(b, key ? key->status : c->status);
	sim_buf_add(b, "\t", 1);
	if (key != NULL)
		sim_buf_addhex(b, key->fp, SIM_FP_LEN);
	sim_buf_add(b, "\t", 1);
	sim_buf_add(b, c->id, SIM_CHARGE_ID_LEN);
	sim_buf_add(b, "\t", 1);
	sim_buf_add(b, c->meta, c->meta_len);
	sim_buf_add(b, "\t", 1);
	sim_buf_add(b, c->json, c->json_len);
	sim_buf_add(b, "\t", 1);
	if (key != NULL && key->answer != NULL)
		sim_buf_add(b, key->answer, key->answer_len);
	sim_buf_add(b, "\n", 1);
}

struct sim_charge *
sim_store_charge_add(struct sim_store *st, struct sim_key *key, uint64_t scope,
    int64_t now, const char *id, const char *json, size_t json_len,
    const char *meta, size_t meta_len, int status, const unsigned char *fp,
    const char *answer, size_t answer_len)
{
	struct sim_charge *c;

	if (key == NULL && st->free_charges >= st->max_keys)
		return NULL;
	c = charge_new(st, key, scope, now, status, id, json, json_len, meta,
	    meta_len);
	if (key != NULL)
		key_store_answer(key, status, fp, answer, answer_len);
	add_charge_record(&st->wbuf, c);
	appended(st);
	return c;
}

struct sim_charge *
sim_store_charge_find(struct sim_store *st, const char *id, size_t n)
{
	if (n != SIM_CHARGE_ID_LEN)
		return NULL;
	return sim_table_get(&st->charges, id, n);
}

bool
sim_store_dirty(const struct sim_store *st)
{
	return st->wbuf.len > 0;
}

void
sim_store_commit(struct sim_store *st)
{
	size_t off = 0;
	ssize_t w;

	while (off < st->wbuf.len) {
		w = write(st->fd, st->wbuf.p + off, st->wbuf.len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			sim_fatal("writing the data file: %s", strerror(errno));
		off += (size_t)w;
	}
	if (st->wbuf.len > 0 && st->fsync != SIM_FSYNC_NEVER &&
	    fdatasync(st->fd) != 0)
		sim_fatal("fdatasync of the data file: %s", strerror(errno));
	st->wbuf.len = 0;
}

/* Frees c; its scope's index still names it until index_rebuild. */
static void
charge_free(struct sim_store *st, struct sim_charge *c)
{
	sim_table_del(&st->charges, c);
	TAILQ_REMOVE(&st->charge_list, c, entry);
	if (c->key == NULL)
		st->free_charges--;
	free(c->json);
	free(c->meta);
	free(c);
}

static void
key_free(struct sim_store *st, struct sim_key *key)
{
	if (key->charge != NULL)
		charge_free(st, key->charge);
	sim_table_del(&st->keys, key);
	TAILQ_REMOVE(&st->key_list, key, entry);
	free(key->answer);
	free(key->meta);
	free(key);
}

size_t
sim_store_prune(struct sim_store *st, int64_t now)
{
	int64_t cutoff = now - st->retention_s;
	struct sim_key *key, *knext;
	struct sim_charge *c, *cnext;
	size_t n = 0, freed = 0;

	for (key = TAILQ_FIRST(&st->key_list); key != NULL; key = knext) {
		knext = TAILQ_NEXT(key, entry);
		if (key->last_seen >= cutoff)
			break;
		if (key->in_flight)
			continue;
		key_free(st, key);
		n++;
	}
	for (c = TAILQ_FIRST(&st->charge_list); c != NULL; c = cnext) {
		cnext = TAILQ_NEXT(c, entry);
		if (c->created >= cutoff)
			break;
		if (c->key == NULL) {
			charge_free(st, c);
			freed++;
		}
	}
	if (n > 0 || freed > 0)
		index_rebuild(st);
	return n;
}

/* --- replay --------------------------------------------------------- */

static int
hexnib(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static int
parse_hex(const char *s, size_t n, unsigned char *out, size_t outlen)
{
	size_t i;

	if (n != 2 * outlen)
		return -1;
	for (i = 0; i < outlen; i++) {
		int hi = hexnib(s[2 * i]), lo = hexnib(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

/* Applies one complete line (without its newline); 0 or -1. */
static int
replay_line(struct sim_store *st, char *line, size_t len)
{
	char *f[STORE_MAX_FIELDS];
	size_t fl[STORE_MAX_FIELDS], nf = 0, i, start = 0, klen;
	unsigned char sc[8], fp[SIM_FP_LEN];
	char *kdec = NULL;
	uint64_t scope = 0;
	int64_t ts;
	struct sim_key *key = NULL;
	struct sim_form form;
	int status, rc = -1;

	for (i = 0; i <= len && nf < STORE_MAX_FIELDS; i++) {
		if (i == len || line[i] == '\t') {
			f[nf] = line + start;
			fl[nf++] = i - start;
			start = i + 1;
		}
	}
	if (nf < 5 || fl[0] != 1 || parse_hex(f[2], fl[2], sc, 8) != 0)
		goto done;
	for (i = 0; i < 8; i++)
		scope = scope << 8 | sc[i];
	ts = strtoll(f[1], NULL, 10);
	kdec = sim_xmalloc(fl[3] + 1);
	/* a key is one form component: decode "k" as the name of one pair */
	if (sim_form_decode(f[3], fl[3], kdec, &form) != SIM_FORM_OK ||
	    form.n > 1)
		goto done;
	klen = form.n ? form.pairs[0].name_len : 0;
	if (klen > 0) {
		key = sim_store_key_find(st, scope, kdec, klen);
		if (key == NULL)
			key = key_new(st, scope, kdec, klen, ts);
	}
	if (f[0][0] == 'D' && nf == 5 && key != NULL) {
		count_delivery(st, key, ts, f[4], fl[4]);
		rc = 0;
	} else if (f[0][0] == 'N' && nf == 6 && key != NULL) {
		char *end;
		unsigned long d = strtoul(f[4], &end, 10);

		if (end != f[4] + fl[4] || d == 0)
			goto done;
		count_delivery(st, key, ts, f[5], fl[5]);
		key->deliveries += d - 1;
		st->deliveries += d - 1;
		rc = 0;
	} else if (f[0][0] == 'C' && nf == 10) {
		status = atoi(f[4]);
		if (fl[6] != SIM_CHARGE_ID_LEN ||
		    sim_store_charge_find(st, f[6], fl[6]) != NULL)
			goto done;
		if (key != NULL &&
		    (parse_hex(f[5], fl[5], fp, SIM_FP_LEN) != 0 ||
		        key->charge != NULL))
			goto done;
		charge_new(st, key, scope, ts, status, f[6], f[8], fl[8], f[7],
		    fl[7]);
		if (key != NULL) {
			if (ts > key->last_seen)
				touch(st, key, ts);
			key_store_answer(key, status, fp, fl[9] ? f[9] : NULL,
			    fl[9]);
		}
		rc = 0;
	}
done:
	free(kdec);
	return rc;
}

static int
replay(struct sim_store *st, const char *path, char *err, size_t errlen)
{
	FILE *fp = NULL;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	off_t good = 0;
	unsigned long lineno = 0;
	int rc = -1, fd;

	fd = dup(st->fd);
	if (fd < 0 || (fp = fdopen(fd, "r")) == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		goto done;
	}
	while ((n = getline(&line, &cap, fp)) > 0) {
		lineno++;
		if (line[n - 1] != '\n')
			break; /* torn: cut below */
		if (replay_line(st, line, (size_t)n - 1) != 0) {
			snprintf(err, errlen, "%s:%lu: not a record", path,
			    lineno);
			goto done;
		}
		good += n;
		st->replayed_lines++;
	}
	if (ferror(fp)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		goto done;
	}
	if (ftruncate(st->fd, good) != 0 ||
	    lseek(st->fd, 0, SEEK_END) != good) {
		snprintf(err, errlen, "%s: truncating a torn line: %s", path,
		    strerror(errno));
		goto done;
	}
	rc = 0;
done:
	free(line);
	if (fp != NULL)
		fclose(fp);
	return rc;
}

static int
flush_to(int fd, struct sim_buf *b)
{
	size_t off = 0;
	ssize_t w;

	while (off < b->len) {
		w = write(fd, b->p + off, b->len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		off += (size_t)w;
	}
	b->len = 0;
	return 0;
}

/*
 * Rewrites path from memory (N lines, then C lines) into path.compact,
 * fsyncs it, renames it over path and its directory, and appends to it
 * from then on. 0, or -1 with err (the old file is then kept).
 */
static int
compact(struct sim_store *st, const char *path, char *err, size_t errlen)
{
	struct sim_buf b = { 0 }, tmp = { 0 };
	struct sim_key *key;
	struct sim_charge *c;
	char *dir = NULL, *slash;
	int fd = -1, dfd = -1, nfd = -1, rc = -1;

	sim_buf_adds(&tmp, path);
	sim_buf_adds(&tmp, ".compact");
	fd = open(tmp.p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || fchmod(fd, 0600) != 0) /* a stale one kept its mode */
		goto fail;
	TAILQ_FOREACH(key, &st->key_list, entry)
	{
		if (key->deliveries == 0)
			continue; /* its C line makes it */
		add_record_head(&b, 'N', key->last_seen, key->scope, key);
		sim_buf_addi(&b, (int64_t)key->deliveries);
		sim_buf_add(&b, "\t", 1);
		if (key->meta != NULL)
			sim_buf_add(&b, key->meta, key->meta_len);
		sim_buf_add(&b, "\n", 1);
		if (b.len > STORE_COMPACT_FLUSH_BYTES && flush_to(fd, &b) != 0)
			goto fail;
	}
	TAILQ_FOREACH(c, &st->charge_list, entry)
	{
		add_charge_record(&b, c);
		if (b.len > STORE_COMPACT_FLUSH_BYTES && flush_to(fd, &b) != 0)
			goto fail;
	}
	if (flush_to(fd, &b) != 0 || fdatasync(fd) != 0 ||
	    rename(tmp.p, path) != 0)
		goto fail;
	dir = sim_xmemdup(path, strlen(path));
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0';
	else if (slash != NULL)
		*slash = '\0';
	dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) != 0)
		goto fail;
	nfd = open(path, O_RDWR | O_APPEND | O_CLOEXEC);
	if (nfd < 0)
		goto fail;
	close(st->fd);
	st->fd = nfd;
	st->compacted = true;
	rc = 0;
	goto done;
fail:
	snprintf(err, errlen, "%s: compacting: %s", path, strerror(errno));
	(void)unlink(tmp.p);
done:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	free(dir);
	sim_buf_free(&b);
	sim_buf_free(&tmp);
	return rc;
}

int
sim_store_open(struct sim_store *st, const char *path, enum sim_fsync mode,
    int64_t retention_s, size_t max_keys, int64_t now, char *err, size_t errlen)
{
	memset(st, 0, sizeof(*st));
	sim_table_init(&st->keys, key_of_key);
	sim_table_init(&st->charges, key_of_charge);
	TAILQ_INIT(&st->key_list);
	TAILQ_INIT(&st->charge_list);
	st->fsync = mode;
	st->retention_s = retention_s;
	st->max_keys = max_keys;
	st->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (st->fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (replay(st, path, err, errlen) != 0)
		return -1;
	sim_store_prune(st, now);
	if (st->replayed_lines >= STORE_COMPACT_MIN_LINES &&
	    st->replayed_lines > 2 * (st->keys.n + st->charges.n) &&
	    compact(st, path, err, errlen) != 0)
		return -1;
	return 0;
}

void
sim_store_close(struct sim_store *st)
{
	struct sim_key *key;
	struct sim_charge *c;
	size_t i;

	if (st->fd >= 0) {
		sim_store_commit(st);
		close(st->fd);
		st->fd = -1;
	}
	while ((key = TAILQ_FIRST(&st->key_list)) != NULL)
		key_free(st, key);
	while ((c = TAILQ_FIRST(&st->charge_list)) != NULL)
		charge_free(st, c);
	sim_table_free(&st->keys);
	sim_table_free(&st->charges);
	sim_buf_free(&st->wbuf);
	for (i = 0; i < st->n_scopes; i++)
		free(st->scopes[i].v);
	free(st->scopes);
	st->scopes = NULL;
	st->n_scopes = 0;
}
