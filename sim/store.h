/*
 * store.h - the simulator's state: idempotency keys (with their delivery
 * counts and stored answers) and charges, in memory, with every change
 * appended to one file that is replayed at start.
 *
 * File format, one record a line, tab-separated (fields never hold a tab or
 * newline: keys and metadata are percent-encoded, JSON escapes controls):
 *   D <unix s> <scope> <key> <metadata>        a delivery under key
 *   N <unix s> <scope> <key> <deliveries> <metadata>   a key, compacted
 *   C <unix s> <scope> <key|""> <status> <fingerprint|""> <charge id>
 *     <metadata> <charge JSON> <answer JSON|"" = the charge JSON>
 * scope = 16 hex digits naming the secret key, metadata = the sorted pairs
 * as a form (name=value&...). A torn last line is truncated at start. When
 * most lines at start are history (expired, or deliveries that an N line
 * can sum up), the file is rewritten: N lines, then C lines.
 */
#ifndef SIM_STORE_H
#define SIM_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "buf.h"
#include "table.h"

enum sim_fsync {
	SIM_FSYNC_ALWAYS, /* fdatasync after every record */
	SIM_FSYNC_BATCH,  /* one fdatasync per commit (per loop turn) */
	SIM_FSYNC_NEVER,  /* write(2) per commit, the kernel decides */
};

#define SIM_FP_LEN 32        /* SHA-256 of the sorted parameters */
#define SIM_CHARGE_ID_LEN 27 /* "ch_" + 24 hex */

struct sim_key;

struct sim_charge {
	/* store's charges by (created, seq), oldest first */
	TAILQ_ENTRY(sim_charge) entry;
	struct sim_key *key; /* the key that owns it, or NULL */
	uint64_t scope;
	int64_t created;
	uint64_t seq;     /* creation order in this process: ties of created */
	int status;       /* 200 or 402 (500: a saved 500) */
	uint64_t born_ms; /* real time of creation; 0: replayed from the file */
	char id[SIM_CHARGE_ID_LEN + 1];
	char *json; /* the charge object, as created */
	size_t json_len;
	char *meta; /* metadata as a form, sorted */
	size_t meta_len;
};

struct sim_key {
	TAILQ_ENTRY(sim_key)
	entry; /* store's keys, least recently seen first */
	uint64_t scope;
	int64_t last_seen;
	unsigned long deliveries;
	unsigned long charges; /* <= 1 by construction */
	int status;            /* stored answer: 0 (none), 200 or 402 */
	unsigned char fp[SIM_FP_LEN];
	char *answer; /* stored body; NULL for 200 (the charge's JSON) */
	size_t answer_len;
	struct sim_charge *charge;
	char *meta; /* metadata of its first valid delivery, a form */
	size_t meta_len;
	bool in_flight; /* a delivery is being processed */
	size_t klen;    /* 8 bytes of scope + the key */
	char k[];
};

/*
 * One account's charges by (created, seq), oldest first: the list API's
 * index (a binary search finds a created bound or a cursor). Rebuilt from
 * the charge list after a prune.
 */
struct sim_scope_index {
	uint64_t scope;
	struct sim_charge **v;
	size_t n;
	size_t cap;
};

struct sim_store {
	struct sim_table keys;
	struct sim_table charges;
	TAILQ_HEAD(sim_key_list, sim_key) key_list;
	TAILQ_HEAD(sim_charge_list, sim_charge) charge_list;
	int fd;
	enum sim_fsync fsync;
	struct sim_buf wbuf; /* records not yet written */
	int64_t retention_s;
	size_t max_keys;     /* keys and key-less charges, each */
	size_t free_charges; /* key-less charges in memory */
	unsigned long deliveries;
	unsigned long charge_count;
	unsigned long replayed_lines;
	bool compacted; /* the file was rewritten at start */
	uint64_t next_seq;
	struct sim_scope_index *scopes; /* one per account seen */
	size_t n_scopes;
};

/*
 * Opens (creates) path and replays it: records older than retention_s are
 * skipped, a torn last line is truncated. 0, or -1 with err.
 */
int sim_store_open(struct sim_store *st, const char *path, enum sim_fsync mode,
    int64_t retention_s, size_t max_keys, int64_t now, char *err,
    size_t errlen);

/* The key (scope, k[0..n)), or NULL. */
struct sim_key *sim_store_key_find(struct sim_store *st, uint64_t scope,
    const char *k, size_t n);

/* A new key; NULL when max_keys are in memory. */
struct sim_key *sim_store_key_add(struct sim_store *st, uint64_t scope,
    const char *k, size_t n, int64_t now);

/*
 * Counts one delivery under key (appends a D record); meta, when the key
 * has none yet and meta_len > 0, becomes its metadata.
 */
void sim_store_delivery(struct sim_store *st, struct sim_key *key, int64_t now,
    const char *meta, size_t meta_len);

/*
 * Creates a charge (appends a C record): owned by key when key is not NULL,
 * which then stores status and answer (answer NULL: the charge JSON) under
 * fingerprint fp. The strings are copied. NULL when the store is full.
 */
struct sim_charge *sim_store_charge_add(struct sim_store *st,
    struct sim_key *key, uint64_t scope, int64_t now, const char *id,
    const char *json, size_t json_len, const char *meta, size_t meta_len,
    int status, const unsigned char *fp, const char *answer, size_t answer_len);

/* Saves status and answer under key without a charge (a 500 saved once
 * execution began); in memory only. */
void sim_store_answer_save(struct sim_key *key, int status,
    const unsigned char *fp, const char *answer, size_t answer_len);

struct sim_charge *sim_store_charge_find(struct sim_store *st, const char *id,
    size_t n);

/*
 * The charges of scope by (created, seq), oldest first (*n of them, NULL
 * when none). Valid until the store next changes.
 */
struct sim_charge *const *sim_store_charges_of(const struct sim_store *st,
    uint64_t scope, size_t *n);

/* The first index of v[0..n) whose (created, seq) is >= (created, seq). */
size_t sim_store_lower_bound(struct sim_charge *const *v, size_t n,
    int64_t created, uint64_t seq);

/* The index of c among the charges of its scope (v, n), or n. */
size_t sim_store_index_of(struct sim_charge *const *v, size_t n,
    const struct sim_charge *c);

/* True when records are waiting for sim_store_commit. */
bool sim_store_dirty(const struct sim_store *st);

/*
 * Writes the waiting records and, unless fsync is never, fdatasyncs. A
 * failed write or fsync ends the process: no answer may report a record
 * that is not on disk.
 */
void sim_store_commit(struct sim_store *st);

/* Forgets keys (with their charges) and key-less charges older than
 * retention; keys in flight stay. Returns how many keys were pruned. */
size_t sim_store_prune(struct sim_store *st, int64_t now);

/* Commits, closes the file, frees everything. */
void sim_store_close(struct sim_store *st);

/* The 8 scope bytes of a secret key (SHA-256 prefix). */
uint64_t sim_store_scope(const char *secret, size_t n);

#endif
