/*
 * form.h - the pure parts of the wire: application/x-www-form-urlencoded
 * decoding, percent-encoding, JSON strings, UTF-8 checks and the test
 * tokens (with chains). Bytes in, results out; no I/O.
 */
#ifndef SIM_FORM_H
#define SIM_FORM_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "defaults.h"

struct sim_pair {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

struct sim_form {
	struct sim_pair pairs[SIM_MAX_PAIRS];
	size_t n;
};

enum sim_form_status {
	SIM_FORM_OK,
	SIM_FORM_BAD_ENCODING, /* a % not followed by two hex digits */
	SIM_FORM_TOO_MANY,     /* more than SIM_MAX_PAIRS pairs */
};

/*
 * Decodes src[0..len) ('&'-separated name=value, '+' is a space, %XX) into
 * dst (at least len bytes); the pairs of f point into dst. Empty segments
 * are skipped; a segment without '=' has an empty value.
 */
enum sim_form_status sim_form_decode(const char *src, size_t len, char *dst,
    struct sim_form *f);

/*
 * Decodes the %XX escapes of src[0..n) into dst (at least n bytes), '+'
 * staying a plus (a URL path segment). The length, or -1 on a bad escape.
 */
long sim_pct_decode(const char *src, size_t n, char *dst);

/* Sorts the pairs by name, then value (bytewise). */
void sim_form_sort(struct sim_form *f);

/* Appends s percent-encoded: every byte but [A-Za-z0-9._~-] as %XX. */
void sim_pct_encode(struct sim_buf *b, const char *s, size_t n);

/* Appends s as a JSON string, quotes included (control bytes as \u00XX). */
void sim_json_str(struct sim_buf *b, const char *s, size_t n);

/* True when s[0..n) is valid UTF-8 without NUL. */
bool sim_utf8_valid(const char *s, size_t n);

enum sim_token {
	SIM_TOK_NONE, /* no element of the chain starts with tok_ */
	SIM_TOK_SUCCEED,
	SIM_TOK_DECLINE_GENERIC,
	SIM_TOK_DECLINE_FUNDS,
	SIM_TOK_DECLINE_EXPIRED,
	SIM_TOK_DECLINE_CVC,
	SIM_TOK_DECLINE_FRAUD,
	SIM_TOK_ERROR,         /* 500, nothing charged */
	SIM_TOK_RATE_LIMITED,  /* 429, nothing charged */
	SIM_TOK_RESET,         /* RST after reading, nothing charged */
	SIM_TOK_CHARGED_500,   /* charged, answer 500 */
	SIM_TOK_CHARGED_CLOSE, /* charged, FIN without an answer */
	SIM_TOK_CHARGED_RESET, /* charged, RST without an answer */
	SIM_TOK_CHARGED_LATE,  /* charged, the answer after --late-ms */
	SIM_TOK_SLOW,          /* charged, the answer one byte at a time */
};

/* The token named tok[0..n) (any other tok_... succeeds). */
enum sim_token sim_token_of(const char *tok, size_t n);

/*
 * The token that delivery number nth (0-based) under one key uses, from
 * source "t1|t2|...|tn": elements not starting with tok_ are ignored, the
 * last token repeats. SIM_TOK_NONE when there is no token at all.
 */
enum sim_token sim_token_pick(const char *source, size_t n, unsigned long nth);

/* True for the tokens that are faults (they skip rate faults). */
bool sim_token_is_fault(enum sim_token t);

#endif
