/*
 * headers.h - pure parsers for the request headers of docs/API.md §4.
 * They take the header value as the web server passed it (NULL = absent).
 */
#ifndef CHARGE_HEADERS_H
#define CHARGE_HEADERS_H

#include <stddef.h>

#include "defaults.h"

enum key_status { KEY_OK, KEY_MISSING, KEY_INVALID };

/*
 * Idempotency-Key: 1-255 visible ASCII (0x21-0x7E), bare or as a
 * Structured-Field string ("abc" names the same key as abc). A bare key
 * holds no comma (two fields joined by a hop); a quoted one may. Leading
 * and trailing spaces/tabs are ignored. On KEY_OK out holds the key.
 */
enum key_status idem_key_parse(const char *value, char out[IDEM_KEY_MAX + 1],
    size_t *outlen);

/*
 * The key of GET /charge/keys/<key>: seg (the path after the prefix,
 * percent-encoded) decoded, then parsed exactly like an Idempotency-Key
 * header value by idem_key_parse() (bare or quoted, surrounding space
 * ignored). KEY_MISSING when seg or the decoded value is empty or space;
 * KEY_INVALID for a malformed %-escape, an encoded NUL or a value that is
 * not a key. On KEY_OK out holds the key.
 */
enum key_status idem_key_from_path(const char *seg, char out[IDEM_KEY_MAX + 1],
    size_t *outlen);

/* 1 when the media type is application/json (any parameters), else 0. */
int content_type_is_json(const char *value);

enum clen_status { CLEN_OK, CLEN_INVALID, CLEN_TOO_LARGE };
/* CONTENT_LENGTH: NULL or "" means 0. Digits only, <= max. */
enum clen_status content_length_parse(const char *value, size_t max,
    size_t *out);

/* RFC 7240 Prefer: the wait=N preference in seconds, or -1 when absent. */
int prefer_wait_parse(const char *value);

/*
 * "Bearer <token>" (scheme case-insensitive): sets *tok and *toklen and
 * returns 0, or -1 when absent or malformed.
 */
int bearer_token(const char *value, const char **tok, size_t *toklen);

/*
 * X-Request-Id worth keeping as the request's id: 1 to REQUEST_ID_MAX
 * bytes of A-Z a-z 0-9 . _ : - (nothing a log line, a header or a JSON
 * string must escape). 1, or 0 (absent, empty, too long, another byte).
 */
int request_id_acceptable(const char *value);

/*
 * W3C traceparent (Trace Context level 1): "00-<32 hex>-<16 hex>-<2 hex>",
 * lower-case hex, trace-id and parent-id not all zeros; a later version
 * (01-fe) is read by its first 55 bytes when the next is '-' or the end.
 * 0 with the trace-id (NUL-terminated) and the flags, or -1: malformed,
 * version ff, an all-zero id (the caller starts a new trace).
 */
int traceparent_parse(const char *value, char trace_id[TRACE_ID_HEX + 1],
    char flags[3]);

#endif
