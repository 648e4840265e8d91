/*
 * spill.h - response bodies too large for the Redis hash, as files under
 * spill_dir: written completely (temporary name, fsync, rename, fsync of the
 * directory) before the record that names them; verified on every read.
 * File names are random and never contain client input.
 */
#ifndef CHARGE_SPILL_H
#define CHARGE_SPILL_H

#include <stddef.h>

/* A spill file name: 32 hex + ".body", with room to spare. */
#define SPILL_NAME_MAX 80

/*
 * Writes data to a new file in dir; name receives its name (32 hex + ".body")
 * and sha_hex its SHA-256. 0, or -1 with errstr (nothing left behind).
 */
int spill_write(const char *dir, const char *data, size_t len,
    char name[SPILL_NAME_MAX], char sha_hex[65], char *errstr, size_t errlen);

/* spill_read() could not read a sound file: out of descriptors or memory. */
#define SPILL_READ_RESOURCES (-2)

/*
 * Reads dir/name and checks its length and SHA-256. 0 with *out malloc'd
 * (caller frees); -1 with errstr when the file is unusable (missing, short,
 * long, checksum); SPILL_READ_RESOURCES with errstr when the process ran
 * out of file descriptors or memory (the file may be fine: retry later).
 */
int spill_read(const char *dir, const char *name, size_t expect_len,
    const char *expect_sha_hex, char **out, char *errstr, size_t errlen);

/* Removes dir/name (after a record that did not take). 0 or -1. */
int spill_remove(const char *dir, const char *name);

/* 1 when name has the form spill_write() produces. Pure. */
int spill_name_valid(const char *name);

/*
 * Removes spill files older than max_age_s (no live record can name them:
 * records never outlive their TTL) and temporary files older than tmp_age_s.
 * Returns the number removed, or -1 when dir cannot be read.
 */
int spill_gc(const char *dir, long max_age_s, long tmp_age_s);

/* Creates dir (mode 0700) unless it exists. 0, or -1 with errno. */
int spill_dir_create(const char *dir);

/* 1 when a file can be created in dir. */
int spill_dir_writable(const char *dir);

/* Bytes an unprivileged writer can still use in dir, or -1 (statvfs). */
long long spill_dir_avail(const char *dir);

#endif
