/*
 * buf.c - growable buffers, allocation that cannot fail, the generator.
 */
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
sim_fatal(const char *fmt, ...)
{
	va_list ap;

	fputs("charge-provider-sim: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void *
sim_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		sim_fatal("out of memory (%zu bytes)", n);
	return p;
}

void *
sim_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (q == NULL)
		sim_fatal("out of memory (%zu bytes)", n);
	return q;
}

char *
sim_xmemdup(const void *p, size_t n)
{
	char *q = sim_xmalloc(n + 1);

	memcpy(q, p, n);
	q[n] = '\0';
	return q;
}

void
sim_buf_reserve(struct sim_buf *b, size_t extra)
{
	size_t need = b->len + extra + 1, cap = b->cap ? b->cap : 256;

	if (need <= b->cap)
		return;
	while (cap < need)
		cap *= 2;
	b->p = sim_xrealloc(b->p, cap);
	b->cap = cap;
}

void
sim_buf_add(struct sim_buf *b, const void *p, size_t n)
{
	sim_buf_reserve(b, n);
	memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void
sim_buf_adds(struct sim_buf *b, const char *s)
{
	sim_buf_add(b, s, strlen(s));
}

void
sim_buf_addf(struct sim_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	sim_buf_reserve(b, 64);
	va_start(ap, fmt);
	n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		sim_fatal("vsnprintf failed");
	if ((size_t)n >= b->cap - b->len) {
		sim_buf_reserve(b, (size_t)n);
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t)n;
}

void
sim_buf_free(struct sim_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

void
sim_buf_addi(struct sim_buf *b, int64_t v)
{
	char tmp[24], *e = tmp + sizeof(tmp), *q = e;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

	do {
		*--q = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		*--q = '-';
	sim_buf_add(b, q, (size_t)(e - q));
}

void
sim_buf_addhex(struct sim_buf *b, const unsigned char *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	sim_buf_reserve(b, 2 * n);
	for (i = 0; i < n; i++) {
		b->p[b->len++] = hex[p[i] >> 4];
		b->p[b->len++] = hex[p[i] & 15];
	}
	b->p[b->len] = '\0';
}

uint64_t
sim_rng_next(struct sim_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

double
sim_rng_unit(struct sim_rng *r)
{
	return (double)(sim_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

void
sim_rng_hex(struct sim_rng *r, char *out, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t v = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (i % 16 == 0)
			v = sim_rng_next(r);
		out[i] = hex[v & 15];
		v >>= 4;
	}
}

uint64_t
sim_hash(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}
