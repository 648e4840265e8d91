/*
 * test_conn_sock.c - the transport under a FastCGI connection, on a
 * socketpair and a libuv loop: the output bound at its byte edge and the
 * WRITABLE that follows, a peer that reads nothing (STALLED after
 * stall_ms), a large output's buffer given back once sent, a half-close
 * (EOF), and data handed up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "conn_sock.h"

#define OUT_MAX 4096
#define STALL_MS 50
#define LOOP_TURNS 200

struct fixture {
	uv_loop_t loop;
	struct sock_set set;
	struct sock s;
	int peer;
	int events[SOCK_EV_CLOSED + 1];
	size_t data;
};

static struct fixture *current;

static void
on_event(struct sock *s, enum sock_event ev, const char *data, size_t len)
{
	(void)s;
	(void)data;
	current->events[ev]++;
	if (ev == SOCK_EV_DATA)
		current->data += len;
}

static int
setup(void **state)
{
	static struct fixture f;
	int sv[2];

	memset(&f, 0, sizeof(f));
	current = &f;
	if (uv_loop_init(&f.loop) != 0 || sock_set_init(&f.set, &f.loop) != 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
		return -1;
	f.peer = sv[1];
	if (sock_open(&f.s, &f.set, sv[0], on_event, OUT_MAX, STALL_MS) != 0)
		return -1;
	*state = &f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	sock_close(&f->s);
	sock_set_close(&f->set);
	(void)uv_run(&f->loop, UV_RUN_DEFAULT);
	(void)close(f->peer);
	return uv_loop_close(&f->loop) == 0 ? 0 : -1;
}

/* Turns the loop until events[ev] is set (at most LOOP_TURNS turns). */
static void
run_until(struct fixture *f, enum sock_event ev)
{
	int i;

	for (i = 0; i < LOOP_TURNS && f->events[ev] == 0; i++) {
		(void)uv_run(&f->loop, UV_RUN_NOWAIT);
		usleep(2000);
	}
}

static void
put(struct sock *s, size_t n)
{
	char *p = sock_out_room(s, n);

	assert_non_null(p);
	memset(p, 'x', n);
	sock_out_commit(s, n);
}

static void
drain_peer(int fd)
{
	char buf[65536];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

static void
test_out_bound_edge(void **state)
{
	struct fixture *f = *state;

	put(&f->s, OUT_MAX);
	assert_int_equal(sock_out_pending(&f->s), OUT_MAX);
	assert_false(sock_out_full(&f->s)); /* exactly the bound: room */
	put(&f->s, 1);
	assert_true(sock_out_full(&f->s)); /* one byte over */
	sock_flush(&f->s);                 /* the peer's buffer takes it */
	assert_int_equal(sock_out_pending(&f->s), 0);
	assert_int_equal(f->events[SOCK_EV_WRITABLE], 1);
	assert_int_equal(f->events[SOCK_EV_CLOSE], 0);
}

static void
test_stalled(void **state)
{
	struct fixture *f = *state;
	int small = 4096;

	(void)setsockopt(f->s.fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	put(&f->s, 1 << 20);
	sock_flush(&f->s);
	assert_true(sock_out_pending(&f->s) > 0);
	run_until(f, SOCK_EV_STALLED);
	assert_int_equal(f->events[SOCK_EV_STALLED], 1);
}

static void
test_large_output_given_back(void **state)
{
	struct fixture *f = *state;
	int i;

	put(&f->s, 1 << 20);
	for (i = 0; i < LOOP_TURNS && sock_out_pending(&f->s) > 0; i++) {
		drain_peer(f->peer);
		sock_flush(&f->s);
	}
	assert_int_equal(sock_out_pending(&f->s), 0);
	assert_null(f->s.out);
	assert_int_equal(f->s.out_cap, 0);
	assert_int_equal(f->events[SOCK_EV_STALLED], 0);
}

static void
test_data_then_eof(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(write(f->peer, "hello", 5), 5);
	assert_int_equal(shutdown(f->peer, SHUT_WR), 0);
	sock_read(&f->s, 1024);
	run_until(f, SOCK_EV_EOF);
	assert_int_equal(f->data, 5);
	assert_int_equal(f->events[SOCK_EV_EOF], 1);
	assert_int_equal(f->events[SOCK_EV_CLOSE], 0);
}

static void
test_not_reading_takes_nothing(void **state)
{
	struct fixture *f = *state;
	int i;

	assert_int_equal(write(f->peer, "hello", 5), 5);
	sock_read(&f->s, 0);
	for (i = 0; i < 10; i++)
		(void)uv_run(&f->loop, UV_RUN_NOWAIT);
	assert_int_equal(f->data, 0);
	sock_read(&f->s, 2); /* at most 2 bytes a read */
	run_until(f, SOCK_EV_DATA);
	assert_true(f->data >= 2);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_out_bound_edge, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_stalled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_output_given_back,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_data_then_eof, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_not_reading_takes_nothing,
		    setup, teardown),
	};

	return cmocka_run_group_tests_name("conn_sock", tests, NULL, NULL);
}
