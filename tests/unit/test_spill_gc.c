/*
 * test_spill_gc.c - several collectors on one spill directory at once, as
 * when several web nodes share spill_dir: together they remove every stale
 * file exactly once, none of them fails on a file another one removed, and
 * no file young enough to be named by a live record goes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "spill.h"

#define COLLECTORS 4
#define STALE 2000    /* .body files older than MAX_AGE_S */
#define STALE_TMP 500 /* .tmp files older than TMP_AGE_S */
#define YOUNG 400     /* .body files a live record may name */
#define MAX_AGE_S 1000
#define TMP_AGE_S 60

struct race {
	const char *dir;
	pthread_barrier_t start;
	int removed[COLLECTORS];
	int next;
	pthread_mutex_t lock;
};

static void
make_file(const char *dir, const char *name, long age_s)
{
	struct timespec ts[2];
	char path[256];
	int fd;

	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(close(fd), 0);
	ts[0].tv_sec = ts[1].tv_sec = time(NULL) - age_s;
	ts[0].tv_nsec = ts[1].tv_nsec = 0;
	assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static int
exists(const char *dir, const char *name)
{
	char path[256];

	(void)snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

static void *
collect(void *arg)
{
	struct race *r = arg;
	int me;

	(void)pthread_mutex_lock(&r->lock);
	me = r->next++;
	(void)pthread_mutex_unlock(&r->lock);
	(void)pthread_barrier_wait(&r->start);
	r->removed[me] = spill_gc(r->dir, MAX_AGE_S, TMP_AGE_S);
	return NULL;
}

static void
remove_all(const char *dir)
{
	char path[256];
	struct dirent *e;
	DIR *d = opendir(dir);

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		(void)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		(void)unlink(path);
	}
	(void)closedir(d);
	(void)rmdir(dir);
}

static void
test_collectors_race(void **state)
{
	char dir[] = "/tmp/charge-spill-gc.XXXXXX", name[64];
	pthread_t t[COLLECTORS];
	struct race r;
	int i, total = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	for (i = 0; i < STALE; i++) {
		(void)snprintf(name, sizeof(name), "%032x.body", 0xa0000 + i);
		make_file(dir, name, MAX_AGE_S + 100);
	}
	for (i = 0; i < STALE_TMP; i++) {
		(void)snprintf(name, sizeof(name), "%032x.tmp", 0xb0000 + i);
		make_file(dir, name, TMP_AGE_S + 100);
	}
	/* young: the boundary itself is not stale (age must exceed it) */
	for (i = 0; i < YOUNG; i++) {
		(void)snprintf(name, sizeof(name), "%032x.body", 0xc0000 + i);
		make_file(dir, name, i == 0 ? MAX_AGE_S - 5 : i % 500);
	}
	make_file(dir, "00000000000000000000000000000000.tmp", 0);
	make_file(dir, "not-a-spill-file", MAX_AGE_S + 100);

	memset(&r, 0, sizeof(r));
	r.dir = dir;
	assert_int_equal(pthread_mutex_init(&r.lock, NULL), 0);
	assert_int_equal(pthread_barrier_init(&r.start, NULL, COLLECTORS), 0);
	for (i = 0; i < COLLECTORS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, collect, &r), 0);
	for (i = 0; i < COLLECTORS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	for (i = 0; i < COLLECTORS; i++) {
		/* none failed on a file another one removed first */
		assert_true(r.removed[i] >= 0);
		total += r.removed[i];
	}
	/* every stale file removed exactly once, over all collectors */
	assert_int_equal(total, STALE + STALE_TMP);
	for (i = 0; i < STALE; i++) {
		(void)snprintf(name, sizeof(name), "%032x.body", 0xa0000 + i);
		assert_false(exists(dir, name));
	}
	for (i = 0; i < YOUNG; i++) {
		(void)snprintf(name, sizeof(name), "%032x.body", 0xc0000 + i);
		assert_true(exists(dir, name));
	}
	assert_true(exists(dir, "00000000000000000000000000000000.tmp"));
	assert_true(exists(dir, "not-a-spill-file"));
	/* a second round finds nothing */
	assert_int_equal(spill_gc(dir, MAX_AGE_S, TMP_AGE_S), 0);
	(void)pthread_barrier_destroy(&r.start);
	(void)pthread_mutex_destroy(&r.lock);
	remove_all(dir);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_collectors_race),
	};

	return cmocka_run_group_tests_name("spill_gc", tests, NULL, NULL);
}
