/*
 * json_lex.h - the parser state of the strict JSON reader and its tokens,
 * shared by json_lex.c (whitespace, strings, numbers) and json.c (values,
 * the document). Nothing else includes it: json.h is the interface.
 */
#ifndef CHARGE_JSON_LEX_H
#define CHARGE_JSON_LEX_H

#include <stddef.h>

#include <cJSON.h>

#include "json_path.h"

#define SCRATCH_BYTES 256 /* decoded string held on the stack */

/* What a string or object has that json_problems() reports. */
#define MARK_BAD_UTF8 0x01 /* raw bytes are not UTF-8 */
#define MARK_CTRL 0x02     /* unescaped byte < 0x20 */
#define MARK_NUL 0x04      /* \u0000 escape */
#define MARK_DUP 0x08      /* object: a member name occurs twice */

/* Objects and strings (names and values) are numbered in document order. */
struct json_mark {
	size_t seq;
	unsigned char flags;
};

enum parse_fail { FAIL_NONE, FAIL_SYNTAX, FAIL_DEEP, FAIL_MANY, FAIL_NOMEM };

struct parser {
	const unsigned char *s;
	size_t len;
	size_t i;      /* next byte */
	int depth;     /* containers open at i */
	size_t values; /* values begun so far */
	/* the root object's member being read (for JSON_TOO_MANY) */
	char top[JSON_FIELD_SIZE];
	enum parse_fail fail;
	size_t fail_at; /* FAIL_SYNTAX: the byte cJSON names */
	size_t resume;  /* FAIL_SYNTAX: where tail_scan() goes on */
	int bad;        /* a BOM or control byte used as whitespace */
	size_t bad_at;
	int not_utf8; /* some string read so far is not UTF-8 */
	size_t seq;
	struct json_mark *marks;
	size_t nmarks, markcap;
	int unsorted; /* an object was marked after its strings */
	char *buf;    /* decoded string, NUL-terminated */
	size_t bufcap;
	char stack[SCRATCH_BYTES];
};

/* 1 for the whitespace JSON allows: space, tab, LF, CR. */
int is_json_ws(unsigned char c);

/* Fails the parse: syntax error at byte at, tail_scan() from resume. NULL. */
cJSON *syntax_error(struct parser *ps, size_t at, size_t resume);

/* Fails the parse for why (FAIL_DEEP, FAIL_NOMEM). NULL. */
cJSON *abandon(struct parser *ps, enum parse_fail why);

/* cJSON's whitespace: any byte <= 0x20; the first that JSON forbids is kept. */
void skip_ws(struct parser *ps);

/* Records flags for the string or object numbered seq. 0, or -1 on ENOMEM. */
int mark(struct parser *ps, size_t seq, unsigned char flags);

/*
 * Scans a string token, numbers it and marks its problems; -1 on failure.
 * Its decoded text is in ps->buf, NUL-terminated, until the next token.
 */
int string_token(struct parser *ps);

/*
 * A number token: as cJSON, the characters [-+.eE0-9] that follow are the
 * token and the longest prefix strtod() takes is the number (what it leaves
 * is a syntax error where the next token should be).
 */
cJSON *parse_number(struct parser *ps);

#endif
