/*
 * http1_read.h - the answer to one request of the native HTTP/1.1 client
 * (http1.h), read with llhttp: its status, its headers one by one, its
 * body piece by piece, whether it ended and whether the connection may be
 * kept. Bytes after the answer are an error (the connection is not kept).
 */
#ifndef CHARGE_HTTP1_READ_H
#define CHARGE_HTTP1_READ_H

#include <stddef.h>

#include <llhttp.h>

/* One header of the answer (name and value without the ": "). */
typedef void h1_header_fn(void *arg, const char *name, size_t nlen,
    const char *value, size_t vlen);
/* A piece of the answer's body: 0, or -1 to abort (HPE_USER). */
typedef int h1_body_fn(void *arg, const char *p, size_t len);

struct h1_reader {
	llhttp_t parser;
	h1_header_fn *header; /* NULL: headers not wanted */
	h1_body_fn *body;     /* NULL: the body not wanted */
	void *arg;
	int status;                /* the answer's (not a 1xx) */
	int complete;              /* its end was parsed */
	int keep;                  /* it allows the connection's reuse */
	char hname[64], hval[256]; /* the header being read (cut there) */
	size_t hname_len, hval_len;
};

/* Starts reading one answer into rd. */
void h1_read_start(struct h1_reader *rd, h1_header_fn *header, h1_body_fn *body,
    void *arg);

/*
 * Bytes of the answer: HPE_OK, HPE_USER (body refused), or an error (also
 * HPE_CB_HEADERS_COMPLETE: a status below 100).
 */
llhttp_errno_t h1_read(struct h1_reader *rd, const char *p, size_t n);

/* The connection ended: 1 when that ended the answer (complete set). */
int h1_read_eof(struct h1_reader *rd);

#endif
