/*
 * test_spill.c - spill files in a private temporary directory: round trips,
 * every way a stored file can be wrong, name checks, and the GC.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "digest.h"
#include "spill.h"

#define HEX32 "0123456789abcdef0123456789abcdef"
#define EMPTY_SHA                                                              \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct fixture {
	char dir[64];
};

/* Removes dir and everything in it (one level of subdirectories). */
static void
rm_tree(const char *dir)
{
	char path[512];
	struct dirent *e;
	struct stat st;
	DIR *d;

	if ((d = opendir(dir)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		(void)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
			rm_tree(path);
		else
			(void)unlink(path);
	}
	(void)closedir(d);
	(void)rmdir(dir);
}

static int
setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (fx == NULL)
		return -1;
	(void)snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_spill.XXXXXX");
	if (mkdtemp(fx->dir) == NULL) {
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *fx = *state;

	rm_tree(fx->dir);
	free(fx);
	return 0;
}

static const char *
dir_of(void **state)
{
	return ((struct fixture *)*state)->dir;
}

/* Number of entries in dir (without . and ..); *tmp counts ".tmp" names. */
static int
count_entries(const char *dir, int *tmp)
{
	struct dirent *e;
	DIR *d;
	int n = 0;

	if (tmp != NULL)
		*tmp = 0;
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		n++;
		if (tmp != NULL && len > 4 &&
		    strcmp(e->d_name + len - 4, ".tmp") == 0)
			(*tmp)++;
	}
	(void)closedir(d);
	return n;
}

static void
path_join(char *out, size_t outlen, const char *dir, const char *name)
{
	int n = snprintf(out, outlen, "%s/%s", dir, name);

	assert_true(n > 0 && (size_t)n < outlen);
}

static void
write_file(const char *path, const char *data, size_t len)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static int
exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* Sets the mtime of path (not following a symlink) to age_s seconds ago. */
static void
age_file(const char *path, long age_s)
{
	struct timespec ts[2];

	ts[0].tv_sec = time(NULL) - age_s;
	ts[0].tv_nsec = 0;
	ts[1] = ts[0];
	assert_int_equal(utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW), 0);
}

/* Writes data, checks the name, the mode and the directory, reads it back. */
static void
round_trip(const char *dir, const char *data, size_t len)
{
	char name[SPILL_NAME_MAX], sha[65], want_sha[65], err[256], path[512];
	struct stat st;
	char *out = NULL;
	int tmp;

	assert_int_equal(spill_write(dir, data, len, name, sha, err,
	                     sizeof(err)),
	    0);
	assert_true(spill_name_valid(name));
	assert_int_equal(strlen(name), 32 + 5);
	assert_int_equal(digest_sha256_hex(data, len, want_sha), 0);
	assert_string_equal(sha, want_sha);
	path_join(path, sizeof(path), dir, name);
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal((size_t)st.st_size, len);
	assert_int_equal(count_entries(dir, &tmp), 1);
	assert_int_equal(tmp, 0);
	assert_int_equal(spill_read(dir, name, len, sha, &out, err,
	                     sizeof(err)),
	    0);
	assert_non_null(out);
	if (len > 0)
		assert_memory_equal(out, data, len);
	assert_int_equal(out[len], '\0');
	free(out);
	assert_int_equal(spill_remove(dir, name), 0);
	assert_int_equal(count_entries(dir, NULL), 0);
}

static void
test_round_trip_small(void **state)
{
	static const char data[] = "{\"a\":1}\0binary\xff\xfe\r\n";

	round_trip(dir_of(state), data, sizeof(data) - 1);
}

static void
test_round_trip_empty(void **state)
{
	char name[SPILL_NAME_MAX], sha[65], err[256];
	const char *dir = dir_of(state);
	char *out = NULL;

	round_trip(dir, "", 0);
	assert_int_equal(spill_write(dir, "", 0, name, sha, err, sizeof(err)),
	    0);
	assert_string_equal(sha, EMPTY_SHA);
	assert_int_equal(spill_read(dir, name, 0, EMPTY_SHA, &out, err,
	                     sizeof(err)),
	    0);
	assert_non_null(out);
	assert_string_equal(out, "");
	free(out);
}

static void
test_round_trip_1mib(void **state)
{
	size_t len = 1024 * 1024, i;
	char *data = malloc(len);

	assert_non_null(data);
	for (i = 0; i < len; i++)
		data[i] = (char)(i * 131 + (i >> 11));
	round_trip(dir_of(state), data, len);
	free(data);
}

static void
test_names_random(void **state)
{
	char a[SPILL_NAME_MAX], b[SPILL_NAME_MAX], sha[65], err[256];
	const char *dir = dir_of(state);

	/* the same body twice: two files, two names, no client input in them */
	assert_int_equal(spill_write(dir, "../../etc/passwd", 16, a, sha, err,
	                     sizeof(err)),
	    0);
	assert_int_equal(spill_write(dir, "../../etc/passwd", 16, b, sha, err,
	                     sizeof(err)),
	    0);
	assert_string_not_equal(a, b);
	assert_true(spill_name_valid(a));
	assert_true(spill_name_valid(b));
	assert_null(strchr(a, '/'));
	assert_int_equal(count_entries(dir, NULL), 2);
}

/* A file written by spill_write: its name, sha and path. */
struct stored {
	char name[SPILL_NAME_MAX], sha[65], path[512];
};

static void
store(const char *dir, const char *data, size_t len, struct stored *s)
{
	char err[256];

	assert_int_equal(spill_write(dir, data, len, s->name, s->sha, err,
	                     sizeof(err)),
	    0);
	path_join(s->path, sizeof(s->path), dir, s->name);
}

static void
assert_read_fails(const char *dir, const char *name, size_t len,
    const char *sha)
{
	char err[256];
	char *out = (char *)"sentinel";

	err[0] = '\0';
	assert_int_equal(spill_read(dir, name, len, sha, &out, err,
	                     sizeof(err)),
	    -1);
	assert_null(out);
	assert_true(strlen(err) > 0);
}

static const char body[] = "{\"id\":\"ch_x\",\"amount\":1999}";
#define BODY_LEN (sizeof(body) - 1)

static void
test_read_missing(void **state)
{
	const char *dir = dir_of(state);
	struct stored s;

	store(dir, body, BODY_LEN, &s);
	assert_int_equal(unlink(s.path), 0);
	assert_read_fails(dir, s.name, BODY_LEN, s.sha);
	/* a valid name that was never written */
	assert_read_fails(dir, HEX32 ".body", BODY_LEN, s.sha);
	/* a missing directory */
	assert_read_fails("/nonexistent-spill-dir", s.name, BODY_LEN, s.sha);
}

/* Out of descriptors: a sound file, but no fd to read it with. */
static void
test_read_out_of_fds(void **state)
{
	const char *dir = dir_of(state);
	struct stored s;
	struct rlimit old, low;
	char err[256];
	char *out = (char *)"sentinel";
	int lowest;

	store(dir, body, BODY_LEN, &s);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	assert_true((lowest = dup(0)) >= 0);
	assert_int_equal(close(lowest), 0);
	low = old;
	low.rlim_cur = (rlim_t)lowest; /* the next open() gets EMFILE */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	err[0] = '\0';
	assert_int_equal(spill_read(dir, s.name, BODY_LEN, s.sha, &out, err,
	                     sizeof(err)),
	    SPILL_READ_RESOURCES);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_null(out);
	assert_non_null(strstr(err, "open"));
	/* the same file reads once descriptors are back */
	assert_int_equal(spill_read(dir, s.name, BODY_LEN, s.sha, &out, err,
	                     sizeof(err)),
	    0);
	assert_memory_equal(out, body, BODY_LEN);
	free(out);
}

static void
test_read_short_file(void **state)
{
	const char *dir = dir_of(state);
	struct stored s;

	store(dir, body, BODY_LEN, &s);
	assert_int_equal(truncate(s.path, BODY_LEN - 1), 0);
	assert_read_fails(dir, s.name, BODY_LEN, s.sha);
	assert_int_equal(truncate(s.path, 0), 0);
	assert_read_fails(dir, s.name, BODY_LEN, s.sha);
}

static void
test_read_long_file(void **state)
{
	const char *dir = dir_of(state);
	struct stored s;
	FILE *f;

	store(dir, body, BODY_LEN, &s);
	f = fopen(s.path, "ab");
	assert_non_null(f);
	assert_int_equal(fputc('x', f), 'x');
	assert_int_equal(fclose(f), 0);
	assert_read_fails(dir, s.name, BODY_LEN, s.sha);
}

static void
test_read_flipped_byte(void **state)
{
	const char *dir = dir_of(state);
	char err[256], *out = NULL;
	struct stored s;
	int fd;

	store(dir, body, BODY_LEN, &s);
	fd = open(s.path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "X", 1, 10), 1);
	assert_int_equal(close(fd), 0);
	assert_int_equal(spill_read(dir, s.name, BODY_LEN, s.sha, &out, err,
	                     sizeof(err)),
	    -1);
	assert_null(out);
	assert_non_null(strstr(err, "checksum"));
}

static void
test_read_wrong_expectations(void **state)
{
	const char *dir = dir_of(state);
	char sha[65];
	struct stored s;
	char *out = NULL, err[256];

	store(dir, body, BODY_LEN, &s);
	assert_read_fails(dir, s.name, BODY_LEN + 1, s.sha);
	assert_read_fails(dir, s.name, BODY_LEN - 1, s.sha);
	assert_read_fails(dir, s.name, 0, s.sha);
	/* a different (valid) checksum */
	memcpy(sha, s.sha, sizeof(sha));
	sha[0] = sha[0] == '0' ? '1' : '0';
	assert_read_fails(dir, s.name, BODY_LEN, sha);
	assert_read_fails(dir, s.name, BODY_LEN, EMPTY_SHA);
	/* the right expectations still work afterwards */
	assert_int_equal(spill_read(dir, s.name, BODY_LEN, s.sha, &out, err,
	                     sizeof(err)),
	    0);
	assert_string_equal(out, body);
	free(out);
}

static const char *bad_names[] = {
	"../x",
	"a.body",
	"0123456789ABCDEF0123456789abcdef.body",
	"0123456789abcdef0123456789abcde.body",   /* 31 hex */
	"0123456789abcdef0123456789abcdef0.body", /* 33 hex */
	"0123456789abcdef0123456789abcdef",
	"0123456789abcdef0123456789abcdef.",
	"0123456789abcdef0123456789abcdef.tmp",
	"0123456789abcdef0123456789abcdef.bodyx",
	"0123456789abcdef0123456789abcdef.body/",
	"0123456789abcdef0123456789abcdef.Body",
	"/0123456789abcdef0123456789abcdef.body",
	"../0123456789abcdef0123456789abcdef.body",
	"0123456789abcdef0123456789abcdeg.body",
	".body",
	"",
};

static void
test_invalid_names(void **state)
{
	const char *dir = dir_of(state);
	char sub[512], path[512], sha[65];
	size_t i;

	/* real files behind some invalid names, so only the name check stops them */
	assert_int_equal(digest_sha256_hex(body, BODY_LEN, sha), 0);
	path_join(sub, sizeof(sub), dir, "spill");
	assert_int_equal(mkdir(sub, 0700), 0);
	path_join(path, sizeof(path), dir, "x");
	write_file(path, body, BODY_LEN);
	path_join(path, sizeof(path), dir, HEX32 ".body");
	write_file(path, body, BODY_LEN);
	for (i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		if (bad_names[i][0] != '\0' && bad_names[i][0] != '.' &&
		    bad_names[i][0] != '/' &&
		    strchr(bad_names[i], '/') == NULL) {
			path_join(path, sizeof(path), sub, bad_names[i]);
			write_file(path, body, BODY_LEN);
		}
	}
	for (i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		if (spill_name_valid(bad_names[i]))
			fail_msg("spill_name_valid accepts \"%s\"",
			    bad_names[i]);
		assert_read_fails(sub, bad_names[i], BODY_LEN, sha);
		assert_int_equal(spill_remove(sub, bad_names[i]), -1);
	}
	/* nothing was removed through an invalid name */
	path_join(path, sizeof(path), dir, "x");
	assert_true(exists(path));
	path_join(path, sizeof(path), dir, HEX32 ".body");
	assert_true(exists(path));
	assert_true(spill_name_valid(HEX32 ".body"));
}

static void
test_read_refuses_symlink(void **state)
{
	const char *dir = dir_of(state);
	char target[512], link_path[512], sha[65];

	assert_int_equal(digest_sha256_hex(body, BODY_LEN, sha), 0);
	path_join(target, sizeof(target), dir, "elsewhere");
	write_file(target, body, BODY_LEN);
	path_join(link_path, sizeof(link_path), dir, HEX32 ".body");
	assert_int_equal(symlink(target, link_path), 0);
	assert_read_fails(dir, HEX32 ".body", BODY_LEN, sha);
}

static void
test_write_missing_dir(void **state)
{
	char name[SPILL_NAME_MAX], sha[65], err[256], missing[512], file[512];
	const char *dir = dir_of(state);

	path_join(missing, sizeof(missing), dir, "no/such/dir");
	memset(name, 'X', sizeof(name));
	err[0] = '\0';
	assert_int_equal(spill_write(missing, body, BODY_LEN, name, sha, err,
	                     sizeof(err)),
	    -1);
	assert_true(strlen(err) > 0);
	assert_string_equal(name, "");
	assert_false(exists(missing));
	assert_int_equal(count_entries(dir, NULL), 0);

	/* a regular file where the directory should be */
	path_join(file, sizeof(file), dir, "plainfile");
	write_file(file, "x", 1);
	err[0] = '\0';
	assert_int_equal(spill_write(file, body, BODY_LEN, name, sha, err,
	                     sizeof(err)),
	    -1);
	assert_true(strlen(err) > 0);
	assert_string_equal(name, "");
	assert_int_equal(count_entries(dir, NULL), 1);
}

static void
test_remove(void **state)
{
	const char *dir = dir_of(state);
	struct stored a, b;

	store(dir, body, BODY_LEN, &a);
	store(dir, body, BODY_LEN, &b);
	assert_int_equal(spill_remove(dir, a.name), 0);
	assert_false(exists(a.path));
	assert_true(exists(b.path));
	assert_read_fails(dir, a.name, BODY_LEN, a.sha);
	assert_int_equal(spill_remove(dir, a.name), -1);
	assert_int_equal(count_entries(dir, NULL), 1);
}

static void
test_gc(void **state)
{
	const char *dir = dir_of(state);
	char p_old[512], p_young[512], p_oldtmp[512], p_youngtmp[512];
	char p_notes[512], p_link[512], p_linktarget[512], p_upper[512];
	char p_subdir[512];
	struct stored old, young;

	store(dir, body, BODY_LEN, &old);
	store(dir, body, BODY_LEN, &young);
	age_file(old.path, 1000);
	age_file(young.path, 10);
	path_join(p_old, sizeof(p_old), dir, old.name);
	path_join(p_young, sizeof(p_young), dir, young.name);
	/* temporary files of an interrupted spill_write */
	path_join(p_oldtmp, sizeof(p_oldtmp), dir, HEX32 ".tmp");
	write_file(p_oldtmp, "partial", 7);
	age_file(p_oldtmp, 1000);
	path_join(p_youngtmp, sizeof(p_youngtmp), dir,
	    "fedcba9876543210fedcba9876543210.tmp");
	write_file(p_youngtmp, "partial", 7);
	/* foreign entries, all old */
	path_join(p_notes, sizeof(p_notes), dir, "notes.txt");
	write_file(p_notes, "keep", 4);
	age_file(p_notes, 100000);
	path_join(p_linktarget, sizeof(p_linktarget), dir, "target.txt");
	write_file(p_linktarget, "keep", 4);
	age_file(p_linktarget, 100000);
	path_join(p_link, sizeof(p_link), dir,
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.body");
	assert_int_equal(symlink(p_linktarget, p_link), 0);
	age_file(p_link, 100000);
	path_join(p_upper, sizeof(p_upper), dir,
	    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.body");
	write_file(p_upper, "keep", 4);
	age_file(p_upper, 100000);
	path_join(p_subdir, sizeof(p_subdir), dir,
	    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb.body");
	assert_int_equal(mkdir(p_subdir, 0700), 0);
	age_file(p_subdir, 100000);

	assert_int_equal(spill_gc(dir, 500, 60), 2);
	assert_false(exists(p_old));
	assert_false(exists(p_oldtmp));
	assert_true(exists(p_young));
	assert_true(exists(p_youngtmp));
	assert_true(exists(p_notes));
	assert_true(exists(p_link));
	assert_true(exists(p_linktarget));
	assert_true(exists(p_upper));
	assert_true(exists(p_subdir));
	/* a second pass finds nothing more */
	assert_int_equal(spill_gc(dir, 500, 60), 0);
	/* with younger limits the young ones go too */
	assert_int_equal(spill_gc(dir, 5, 5), 1);
	assert_false(exists(p_young));
	assert_true(exists(p_youngtmp)); /* written just now */
	assert_true(exists(p_notes));
	assert_true(exists(p_link));
}

/* Only names spill_write() produces: an old foreign "*.tmp" file stays. */
static void
test_gc_foreign_tmp(void **state)
{
	const char *dir = dir_of(state);
	char p[512];

	path_join(p, sizeof(p), dir, "notes.tmp");
	write_file(p, "keep", 4);
	age_file(p, 100000);
	assert_int_equal(spill_gc(dir, 500, 60), 0);
	assert_true(exists(p));
}

static void
test_gc_missing_dir(void **state)
{
	char missing[512];

	path_join(missing, sizeof(missing), dir_of(state), "missing");
	assert_int_equal(spill_gc(missing, 1, 1), -1);
}

static void
test_dir_writable(void **state)
{
	char missing[512];

	assert_int_equal(spill_dir_writable(dir_of(state)), 1);
	path_join(missing, sizeof(missing), dir_of(state), "missing");
	assert_int_equal(spill_dir_writable(missing), 0);
}

static int
group_setup(void **state)
{
	(void)state;
	(void)umask(022);
	return digest_init();
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_round_trip_small),
		T(test_round_trip_empty),
		T(test_round_trip_1mib),
		T(test_names_random),
		T(test_read_missing),
		T(test_read_out_of_fds),
		T(test_read_short_file),
		T(test_read_long_file),
		T(test_read_flipped_byte),
		T(test_read_wrong_expectations),
		T(test_invalid_names),
		T(test_read_refuses_symlink),
		T(test_write_missing_dir),
		T(test_remove),
		T(test_gc),
		T(test_gc_foreign_tmp),
		T(test_gc_missing_dir),
		T(test_dir_writable),
	};

	return cmocka_run_group_tests_name("spill", tests, group_setup, NULL);
}
