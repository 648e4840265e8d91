/*
 * log.h - one line per event to stderr (the web server's error log),
 * level-filtered and printf-checked, as text or as one JSON object per
 * line (log_format; the fields are docs/API.md §20's). Never log API keys
 * or Authorization.
 */
#ifndef CHARGE_LOG_H
#define CHARGE_LOG_H

#include <stddef.h>

enum log_level { LL_ERROR = 0, LL_WARN = 1, LL_INFO = 2, LL_DEBUG = 3 };

/* text: "ts level [pid] [rid] message"; json: one object per line */
enum log_format { LF_TEXT = 0, LF_JSON = 1 };

/* The format named by s ("text", "json"), or -1. */
int log_format_parse(const char *s);
/* Sets the process-wide format; called once at start-up. */
void log_set_format(int format);

/* Returns the level named by s ("error", "warn", "info", "debug") or -1. */
int log_level_parse(const char *s);

/* The name of a level ("warn"), or "?" for none. */
const char *log_level_name(int level);
/* Sets the process-wide threshold; called once at start-up. */
void log_set_level(int level);

/*
 * Makes stderr non-blocking when it is a pipe or a terminal (a private
 * open file description, so the web server's end is not changed): an event
 * loop never waits for a full error log; a line that does not fit is
 * dropped and counted. A regular file is written as before (bounded).
 */
void log_nonblocking(void);
int log_enabled(int level);

/* Writes "ts level [pid] [rid] message\n"; rid may be NULL. */
void log_msg(int level, const char *rid, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * log_msg with the request's W3C trace id (32 hex digits, or NULL): in
 * JSON its own field trace_id, in text "[rid trace=<id>]".
 */
void log_event(int level, const char *rid, const char *trace_id,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define log_error(rid, ...) log_msg(LL_ERROR, (rid), __VA_ARGS__)
#define log_warn(rid, ...) log_msg(LL_WARN, (rid), __VA_ARGS__)
#define log_info(rid, ...) log_msg(LL_INFO, (rid), __VA_ARGS__)
#define log_debug(rid, ...) log_msg(LL_DEBUG, (rid), __VA_ARGS__)

/*
 * Copies src[0..srclen) into dst as printable ASCII: control characters,
 * backslash and bytes >= 0x7f become \xNN. Always NUL-terminates (dstlen > 0);
 * truncates with "..." when dst is too small. Returns strlen(dst).
 */
size_t log_escape(char *dst, size_t dstlen, const char *src, size_t srclen);

#endif
