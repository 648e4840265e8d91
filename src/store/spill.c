/*
 * spill.c - large response bodies as files. A file is complete and durable
 * (written under a temporary name, fsync'ed, renamed, directory fsync'ed)
 * before any record names it, and every read checks length and SHA-256.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "defaults.h"
#include "digest.h"
#include "spill.h"
#include "util.h"

#define SPILL_SUFFIX ".body"
#define SPILL_TMP_SUFFIX ".tmp"
#define SPILL_RANDOM_BYTES 16 /* 128-bit random names: no client input */
#define SPILL_FILE_MODE 0600
#define SPILL_DIR_MODE 0700

static void
spill_err(char *errstr, size_t errlen, const char *what, const char *name)
{
	(void)snprintf(errstr, errlen, "spill %s %s: %s", what, name,
	    strerror(errno));
}

__attribute__((noinline)) int
spill_write(const char *dir, const char *data, size_t len,
    char name[SPILL_NAME_MAX], char sha_hex[65], char *errstr, size_t errlen)
{
	char rnd[2 * SPILL_RANDOM_BYTES + 1], tmp[SPILL_NAME_MAX];
	int dfd = -1, fd = -1, rc = -1, tmp_exists = 0;

	name[0] = '\0';
	if (digest_random_hex(rnd, SPILL_RANDOM_BYTES) != 0 ||
	    digest_sha256_hex(data, len, sha_hex) != 0) {
		(void)snprintf(errstr, errlen, "spill: digest failed");
		return -1;
	}
	(void)snprintf(tmp, SPILL_NAME_MAX, "%s%s", rnd, SPILL_TMP_SUFFIX);
	(void)snprintf(name, SPILL_NAME_MAX, "%s%s", rnd, SPILL_SUFFIX);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		spill_err(errstr, errlen, "open dir", dir);
		goto fail;
	}
	fd = openat(dfd, tmp,
	    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	    SPILL_FILE_MODE);
	if (fd < 0) {
		spill_err(errstr, errlen, "create", tmp);
		goto fail;
	}
	tmp_exists = 1;
	if (util_write_all(fd, data, len) != 0) {
		spill_err(errstr, errlen, "write", tmp);
		goto fail;
	}
	if (fsync(fd) != 0) {
		spill_err(errstr, errlen, "fsync", tmp);
		goto fail;
	}
	if (close(fd) != 0) {
		fd = -1;
		spill_err(errstr, errlen, "close", tmp);
		goto fail;
	}
	fd = -1;
	if (renameat(dfd, tmp, dfd, name) != 0) {
		spill_err(errstr, errlen, "rename", tmp);
		goto fail;
	}
	tmp_exists = 0;
	if (fsync(dfd) != 0) {
		spill_err(errstr, errlen, "fsync dir", dir);
		(void)unlinkat(dfd, name, 0);
		goto fail;
	}
	rc = 0;
fail:
	if (fd >= 0)
		(void)close(fd);
	if (tmp_exists)
		(void)unlinkat(dfd, tmp, 0);
	if (dfd >= 0)
		(void)close(dfd);
	if (rc != 0)
		name[0] = '\0';
	return rc;
}

/* 1 when name is 32 lower-case hex digits followed by suffix. */
static int
spill_name_has_form(const char *name, const char *suffix)
{
	return strnlen(name, 2 * SPILL_RANDOM_BYTES) ==
	    2 * SPILL_RANDOM_BYTES &&
	    util_is_hex(name, 2 * SPILL_RANDOM_BYTES) &&
	    strcmp(name + 2 * SPILL_RANDOM_BYTES, suffix) == 0;
}

int
spill_name_valid(const char *name)
{
	return spill_name_has_form(name, SPILL_SUFFIX);
}

int
spill_read(const char *dir, const char *name, size_t expect_len,
    const char *expect_sha_hex, char **out, char *errstr, size_t errlen)
{
	char path[PATH_MAX_LEN + SPILL_NAME_MAX], sha[65];
	struct stat st;
	char *buf = NULL;
	size_t got = 0;
	ssize_t n;
	int fd = -1, rc = -1;

	*out = NULL;
	if (!spill_name_valid(name)) {
		(void)snprintf(errstr, errlen, "spill: invalid file name");
		return -1;
	}
	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
			rc = SPILL_READ_RESOURCES;
		spill_err(errstr, errlen, "open", name);
		goto fail;
	}
	if (fstat(fd, &st) != 0) {
		spill_err(errstr, errlen, "stat", name);
		goto fail;
	}
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size != expect_len) {
		(void)snprintf(errstr, errlen,
		    "spill %s: size %lld, expected %zu", name,
		    (long long)st.st_size, expect_len);
		goto fail;
	}
	if ((buf = malloc(expect_len + 1)) == NULL) {
		rc = SPILL_READ_RESOURCES;
		(void)snprintf(errstr, errlen, "spill: out of memory");
		goto fail;
	}
	while (got < expect_len) {
		n = read(fd, buf + got, expect_len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			(void)snprintf(errstr, errlen, "spill %s: short read",
			    name);
			goto fail;
		}
		got += (size_t)n;
	}
	buf[got] = '\0';
	if (digest_sha256_hex(buf, got, sha) != 0 ||
	    strcmp(sha, expect_sha_hex) != 0) {
		(void)snprintf(errstr, errlen, "spill %s: checksum mismatch",
		    name);
		goto fail;
	}
	(void)close(fd);
	*out = buf;
	return 0;
fail:
	if (fd >= 0)
		(void)close(fd);
	free(buf);
	return rc;
}

int
spill_remove(const char *dir, const char *name)
{
	char path[PATH_MAX_LEN + SPILL_NAME_MAX];

	if (!spill_name_valid(name))
		return -1;
	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	return unlink(path);
}

int
spill_gc(const char *dir, long max_age_s, long tmp_age_s)
{
	DIR *d;
	struct dirent *e;
	struct stat st;
	time_t now = time(NULL);
	long age;
	int removed = 0;

	if ((d = opendir(dir)) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		int is_tmp = spill_name_has_form(e->d_name, SPILL_TMP_SUFFIX);

		/* only files this module names: never anything else in dir */
		if (!is_tmp && !spill_name_valid(e->d_name))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) !=
		        0 ||
		    !S_ISREG(st.st_mode))
			continue;
		age = (long)(now - st.st_mtime);
		if (age > (is_tmp ? tmp_age_s : max_age_s) &&
		    unlinkat(dirfd(d), e->d_name, 0) == 0)
			removed++;
	}
	(void)closedir(d);
	return removed;
}

int
spill_dir_create(const char *dir)
{
	if (mkdir(dir, SPILL_DIR_MODE) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

int
spill_dir_writable(const char *dir)
{
	return access(dir, W_OK | X_OK) == 0;
}

long long
spill_dir_avail(const char *dir)
{
	struct statvfs sv;

	if (statvfs(dir, &sv) != 0)
		return -1;
	return (long long)sv.f_bavail * (long long)sv.f_frsize;
}
