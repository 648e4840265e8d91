/*
 * buf.h - growable byte buffers and the few leaf helpers every file of the
 * simulator uses. Allocation failure ends the process (sim_fatal): the
 * simulator is a test peer, and a half-built answer would be worse.
 */
#ifndef SIM_BUF_H
#define SIM_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct sim_buf {
	char *p;
	size_t len;
	size_t cap;
};

/* Prints "charge-provider-sim: MSG" to stderr and exits 1. */
void sim_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)))
__attribute__((noreturn));

/* malloc/realloc/strndup that never return NULL (sim_fatal on ENOMEM). */
void *sim_xmalloc(size_t n);
void *sim_xrealloc(void *p, size_t n);
char *sim_xmemdup(const void *p, size_t n);

/* Makes room for extra more bytes (keeps a spare NUL byte at p[len]). */
void sim_buf_reserve(struct sim_buf *b, size_t extra);
void sim_buf_add(struct sim_buf *b, const void *p, size_t n);
void sim_buf_adds(struct sim_buf *b, const char *s);
void sim_buf_addf(struct sim_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sim_buf_free(struct sim_buf *b);
/* Appends v in decimal (the hot paths' printf-free integers). */
void sim_buf_addi(struct sim_buf *b, int64_t v);
/* Appends p[0..n) as 2n lowercase hex digits. */
void sim_buf_addhex(struct sim_buf *b, const unsigned char *p, size_t n);

/* A splitmix64 generator: deterministic from its seed. */
struct sim_rng {
	uint64_t s;
};
uint64_t sim_rng_next(struct sim_rng *r);
/* A uniform double in [0, 1). */
double sim_rng_unit(struct sim_rng *r);
/* Writes n lowercase hex digits (no NUL) drawn from r into out. */
void sim_rng_hex(struct sim_rng *r, char *out, size_t n);

/* FNV-1a, 64 bits. */
uint64_t sim_hash(const void *p, size_t n);

#endif
