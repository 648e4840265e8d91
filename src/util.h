/*
 * util.h - leaf helpers shared by the modules that read files at start-up.
 */
#ifndef CHARGE_UTIL_H
#define CHARGE_UTIL_H

#include <stddef.h>

/* printf into the caller's error buffer (bounded; NULL/0 ignored). */
void util_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Reads the regular file at path, at most max bytes, into *out (malloc'd,
 * NUL-terminated; caller frees), its length in *outlen. 0, or -1 with err
 * naming path (missing, not a regular file, larger than max, read error).
 */
int util_read_file(const char *path, size_t max, char **out, size_t *outlen,
    char *err, size_t errlen);

#endif
