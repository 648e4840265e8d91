/*
 * rekey_proxy.c - a TLS front for a plain Redis that changes keys under
 * its client, for tests/redis_tls/run.sh: after every EVERY-th chunk of
 * replies it forwards it asks for a TLS 1.3 key update (mode keyupdate:
 * KeyUpdate with update_requested, which the client must answer) or starts
 * a TLS 1.2 renegotiation (mode renegotiate: HelloRequest) and forwards no
 * reply until the client has completed it, so a client that leaves its
 * handshake messages unsent until its next command waits forever.
 *
 *   rekey_proxy PORT REDIS_PORT CERT KEY keyupdate|renegotiate EVERY STATS
 *
 * One process per connection (fork); each appends "updates=N done=M" to
 * the file STATS when its connection ends. Runs until killed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define BUF_BYTES 16384
#define IDLE_MS 30000 /* a connection quiet this long ends */

struct proxy {
	SSL *ssl;
	int rfd;
	int renegotiate, every;
	long chunks, updates, done;
};

static int
listen_on(int port)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		return -1;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((unsigned short)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    listen(fd, 64) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int
connect_to(int port)
{
	struct sockaddr_in a;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons((unsigned short)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int
write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		if ((w = write(fd, p, n)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Client to Redis: 0, or -1 when the connection ended. */
static int
from_client(struct proxy *x)
{
	char buf[BUF_BYTES];
	int n, e;

	n = SSL_read(x->ssl, buf, sizeof(buf));
	if (n > 0)
		return write_all(x->rfd, buf, (size_t)n);
	e = SSL_get_error(x->ssl, n);
	/* a handshake record without data (AUTO_RETRY is off) */
	return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
}

/* Redis to client, then the key change. 0, or -1 when it ended. */
static int
from_redis(struct proxy *x)
{
	char buf[BUF_BYTES];
	ssize_t n = read(x->rfd, buf, sizeof(buf));

	if (n <= 0 || SSL_write(x->ssl, buf, (int)n) != (int)n)
		return -1;
	if (++x->chunks % x->every != 0)
		return 0;
	if (x->renegotiate
	        ? SSL_renegotiate(x->ssl) != 1
	        : SSL_key_update(x->ssl, SSL_KEY_UPDATE_REQUESTED) != 1)
		return -1;
	x->updates++;
	/* sends the HelloRequest or the KeyUpdate now */
	return SSL_do_handshake(x->ssl) == 1 ? 0 : -1;
}

static void
serve(struct proxy *x, int cfd)
{
	struct pollfd pf[2];
	int pending;

	for (;;) {
		/* a renegotiation under way: no reply until it is done */
		pending = x->renegotiate && SSL_renegotiate_pending(x->ssl);
		pf[0].fd = cfd;
		pf[0].events = POLLIN;
		pf[1].fd = pending ? -1 : x->rfd;
		pf[1].events = POLLIN;
		pf[0].revents = pf[1].revents = 0;
		if (SSL_pending(x->ssl) == 0 && poll(pf, 2, IDLE_MS) <= 0)
			return;
		if ((SSL_pending(x->ssl) > 0 || pf[0].revents != 0) &&
		    from_client(x) != 0)
			return;
		if (x->renegotiate && pending &&
		    !SSL_renegotiate_pending(x->ssl))
			x->done++;
		if (pf[1].revents != 0 && from_redis(x) != 0)
			return;
	}
}

static void
child(SSL_CTX *ctx, int cfd, int redis_port, struct proxy *x, const char *stats)
{
	FILE *f;

	if ((x->rfd = connect_to(redis_port)) < 0 ||
	    (x->ssl = SSL_new(ctx)) == NULL || SSL_set_fd(x->ssl, cfd) != 1 ||
	    SSL_accept(x->ssl) != 1)
		_exit(1);
	serve(x, cfd);
	if (!x->renegotiate)
		x->done = x->updates;
	if ((f = fopen(stats, "a")) != NULL) {
		fprintf(f, "updates=%ld done=%ld\n", x->updates, x->done);
		fclose(f);
	}
	_exit(0);
}

int
main(int argc, char **argv)
{
	struct proxy x;
	SSL_CTX *ctx;
	int lfd, cfd;

	if (argc != 8) {
		fprintf(stderr,
		    "usage: rekey_proxy PORT REDIS_PORT CERT KEY keyupdate|renegotiate EVERY STATS\n");
		return 2;
	}
	memset(&x, 0, sizeof(x));
	x.renegotiate = strcmp(argv[5], "renegotiate") == 0;
	x.every = atoi(argv[6]) > 0 ? atoi(argv[6]) : 1;
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL ||
	    SSL_CTX_use_certificate_chain_file(ctx, argv[3]) != 1 ||
	    SSL_CTX_use_PrivateKey_file(ctx, argv[4], SSL_FILETYPE_PEM) != 1) {
		ERR_print_errors_fp(stderr);
		return 1;
	}
	SSL_CTX_clear_mode(ctx, SSL_MODE_AUTO_RETRY);
	if (x.renegotiate)
		(void)SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
	else
		(void)SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
	if ((lfd = listen_on(atoi(argv[1]))) < 0) {
		perror("rekey_proxy: listen");
		return 1;
	}
	(void)signal(SIGCHLD, SIG_IGN);
	(void)signal(SIGPIPE, SIG_IGN);
	for (;;) {
		if ((cfd = accept(lfd, NULL, NULL)) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (fork() == 0) {
			close(lfd);
			child(ctx, cfd, atoi(argv[2]), &x, argv[7]);
		}
		close(cfd);
	}
}
