/*
 * log.c - one line per event to stderr:
 * "YYYY-mm-ddTHH:MM:SS.mmmZ <level> [pid] [rid] message\n", written with a
 * single write(2) so lines from several threads and processes sharing the
 * web server's error log do not interleave.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define LOG_LINE_MAX 2048    /* bytes per line, newline included */
#define LOG_TRUNC_MARK "..." /* ends a truncated line */
#define LOG_RID_MAX 64       /* bytes of request id shown */

/* The only mutable global besides the configuration: set once at start-up. */
static int log_threshold = LL_INFO;

/* Lines dropped because stderr was full (atomic). */
static unsigned long log_dropped;

static const char *const log_names[] = { "error", "warn", "info", "debug" };

int
log_level_parse(const char *s)
{
	size_t i;

	if (s == NULL)
		return -1;
	for (i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++)
		if (strcmp(s, log_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *
log_level_name(int level)
{
	if (level < 0 ||
	    (size_t)level >= sizeof(log_names) / sizeof(log_names[0]))
		return "?";
	return log_names[level];
}

void
log_set_level(int level)
{
	if (level < LL_ERROR)
		level = LL_ERROR;
	if (level > LL_DEBUG)
		level = LL_DEBUG;
	/* a reload sets it while the loops log */
	__atomic_store_n(&log_threshold, level, __ATOMIC_RELAXED);
}

int
log_enabled(int level)
{
	return level <= __atomic_load_n(&log_threshold, __ATOMIC_RELAXED);
}

/* Appends s to buf[*pos..cap), truncating; *pos never exceeds cap. */
static void
log_append(char *buf, size_t cap, size_t *pos, const char *s)
{
	size_t n = strlen(s);

	if (n > cap - *pos)
		n = cap - *pos;
	memcpy(buf + *pos, s, n);
	*pos += n;
}

/* Writes "YYYY-mm-ddTHH:MM:SS.mmmZ" (24 bytes) into out[32]. */
static void
log_timestamp(char out[32])
{
	struct timespec ts;
	struct tm tm;
	size_t n;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0 ||
	    gmtime_r(&ts.tv_sec, &tm) == NULL) {
		(void)snprintf(out, 32, "0000-00-00T00:00:00.000Z");
		return;
	}
	n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
	if (n == 0) {
		(void)snprintf(out, 32, "0000-00-00T00:00:00.000Z");
		return;
	}
	(void)snprintf(out + n, 32 - n, ".%03ldZ", ts.tv_nsec / 1000000L);
}

void
log_msg(int level, const char *rid, const char *fmt, ...)
{
	char line[LOG_LINE_MAX];
	char msg[LOG_LINE_MAX];
	char head[128];
	char ts[32];
	const char *name;
	size_t pos = 0, cap, i;
	va_list ap;
	int saved_errno = errno, n;
	unsigned long dropped;
	ssize_t w;

	if (!log_enabled(level))
		return;
	name =
	    (level >= LL_ERROR && level <= LL_DEBUG) ? log_names[level] : "?";

	log_timestamp(ts);
	n = snprintf(head, sizeof(head), "%s %s [%ld] [", ts, name,
	    (long)getpid());
	if (n < 0)
		goto out;
	/* Room for the truncation mark and the newline is kept aside. */
	cap = sizeof(line) - strlen(LOG_TRUNC_MARK) - 1;
	log_append(line, cap, &pos, head);
	if (rid == NULL || *rid == '\0')
		rid = "-";
	/* The request id is ours, but escape it like any other text. */
	pos += log_escape(line + pos,
	    LOG_RID_MAX < cap - pos ? LOG_RID_MAX : cap - pos, rid,
	    strlen(rid));
	log_append(line, cap, &pos, "] ");

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		goto out;

	/* Control characters would break the one-line rule: escape them. */
	for (i = 0; msg[i] != '\0' && pos < cap; i++) {
		unsigned char ch = (unsigned char)msg[i];

		if (ch < 0x20 || ch == 0x7f) {
			char esc[5];

			if (cap - pos < 4)
				break;
			(void)snprintf(esc, sizeof(esc), "\\x%02x", ch);
			memcpy(line + pos, esc, 4);
			pos += 4;
		} else
			line[pos++] = (char)ch;
	}
	if (msg[i] != '\0' || (size_t)n >= sizeof(msg)) {
		memcpy(line + pos, LOG_TRUNC_MARK, strlen(LOG_TRUNC_MARK));
		pos += strlen(LOG_TRUNC_MARK);
	}
	line[pos++] = '\n';

	do {
		w = write(STDERR_FILENO, line, pos);
	} while (w < 0 && errno == EINTR);
	/*
	 * A failed write to stderr has nowhere to be reported. A full pipe
	 * (log_nonblocking) drops the line rather than stop an event loop;
	 * the count is told with the next line that gets through.
	 */
	if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		__atomic_add_fetch(&log_dropped, 1, __ATOMIC_RELAXED);
	else if (w > 0 &&
	    (dropped = __atomic_exchange_n(&log_dropped, 0, __ATOMIC_RELAXED)) >
	        0) {
		n = snprintf(msg, sizeof(msg),
		    "warn: %lu log line(s) dropped: stderr was full\n",
		    dropped);
		if (n > 0 && (size_t)n < sizeof(msg))
			(void)!write(STDERR_FILENO, msg, (size_t)n);
	}
out:
	errno = saved_errno;
}

void
log_nonblocking(void)
{
	struct stat st;
	int fd;

	/* a pipe or a terminal: a new open file description of its own */
	if (fstat(STDERR_FILENO, &st) != 0 || S_ISREG(st.st_mode) ||
	    S_ISSOCK(st.st_mode))
		return;
	fd = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return;
	if (dup2(fd, STDERR_FILENO) < 0)
		log_warn(NULL, "stderr stays blocking: %s", strerror(errno));
	(void)close(fd);
}

size_t
log_escape(char *dst, size_t dstlen, const char *src, size_t srclen)
{
	size_t need = 0, pos = 0, reserve, i;

	if (dst == NULL || dstlen == 0)
		return 0;
	for (i = 0; i < srclen; i++) {
		unsigned char ch = (unsigned char)src[i];

		need += (ch < 0x20 || ch >= 0x7f || ch == '\\') ? 4 : 1;
	}
	/* Everything fits: no room has to be kept for the mark. */
	reserve = 0;
	if (need > dstlen - 1) {
		reserve = strlen(LOG_TRUNC_MARK);
		if (reserve > dstlen - 1)
			reserve = dstlen - 1;
	}
	for (i = 0; i < srclen; i++) {
		unsigned char ch = (unsigned char)src[i];
		size_t unit = (ch < 0x20 || ch >= 0x7f || ch == '\\') ? 4 : 1;

		if (pos + unit > dstlen - 1 - reserve)
			break;
		if (unit == 4) {
			char esc[5];

			(void)snprintf(esc, sizeof(esc), "\\x%02x", ch);
			memcpy(dst + pos, esc, 4);
		} else
			dst[pos] = (char)ch;
		pos += unit;
	}
	if (reserve > 0) {
		memcpy(dst + pos, LOG_TRUNC_MARK, reserve);
		pos += reserve;
	}
	dst[pos] = '\0';
	return pos;
}
