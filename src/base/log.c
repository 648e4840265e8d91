/*
 * log.c - one line per event to stderr:
 * "YYYY-mm-ddTHH:MM:SS.mmmZ <level> [pid] [rid] message\n", or with
 * log_format json one object per line ({"ts", "level", "pid",
 * "request_id", "trace_id", "msg"}), written with a single write(2) so
 * lines from several threads and processes sharing the web server's error
 * log do not interleave.
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
#define LOG_TRACE_MAX 32     /* bytes of a trace id shown */
#define LOG_PAN_MIN 13       /* digits of a card number (ISO/IEC 7812) */
#define LOG_PAN_MAX 19

/* The only mutable globals besides the configuration: set once at start-up. */
static int log_threshold = LL_INFO;
static int log_fmt = LF_TEXT;

/* Lines dropped because stderr was full (atomic). */
static unsigned long log_dropped;

static const char *const log_names[] = { "error", "warn", "info", "debug" };
static const char *const log_formats[] = { "text", "json" };

int
log_format_parse(const char *s)
{
	size_t i;

	for (i = 0;
	     s != NULL && i < sizeof(log_formats) / sizeof(log_formats[0]); i++)
		if (strcmp(s, log_formats[i]) == 0)
			return (int)i;
	return -1;
}

void
log_set_format(int format)
{
	log_fmt = format == LF_JSON ? LF_JSON : LF_TEXT;
}

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

/* Appends src as the inside of a JSON string (", \, controls and bytes
 * >= 0x7f as escapes), whole escapes only, up to cap. 1 when all fit. */
static int
log_append_json(char *buf, size_t cap, size_t *pos, const char *src,
    size_t srclen)
{
	static const char hexd[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < srclen; i++) {
		unsigned char ch = (unsigned char)src[i];
		char e[6] = { '\\', 'u', '0', '0', hexd[ch >> 4],
			hexd[ch & 15] };
		size_t n = 6;

		if (ch == '"' || ch == '\\') {
			e[1] = (char)ch;
			n = 2;
		} else if (ch >= 0x20 && ch < 0x7f) {
			e[0] = (char)ch;
			n = 1;
		}
		if (n > cap - *pos)
			return 0;
		memcpy(buf + *pos, e, n);
		*pos += n;
	}
	return 1;
}

/* Appends src with control bytes as \xNN (the text format), up to cap.
 * 1 when all fit. */
static int
log_append_text(char *buf, size_t cap, size_t *pos, const char *src,
    size_t srclen)
{
	size_t i;

	for (i = 0; i < srclen; i++) {
		unsigned char ch = (unsigned char)src[i];

		if (ch < 0x20 || ch == 0x7f) {
			char esc[5];

			if (cap - *pos < 4)
				return 0;
			(void)snprintf(esc, sizeof(esc), "\\x%02x", ch);
			memcpy(buf + *pos, esc, 4);
			*pos += 4;
		} else if (*pos < cap)
			buf[(*pos)++] = (char)ch;
		else
			return 0;
	}
	return 1;
}

/*
 * Masks in place every card-like number of s (a primary account number:
 * 13-19 digits, single spaces or '-' between them allowed, the first 2-6,
 * the Luhn check right): all its digits but the last four become '*'. A
 * card number must not reach a log whoever put it where (PCI DSS 3.4).
 */
/* s[i..end) holds 13-19 digits (and separators) passing the Luhn check. */
static int
log_is_pan(const char *s, size_t i, size_t end)
{
	size_t j, n = 0;
	int sum = 0, d;

	for (j = end; j-- > i;) {
		if (s[j] < '0' || s[j] > '9')
			continue;
		d = (s[j] - '0') * (n % 2 == 1 ? 2 : 1);
		sum += d > 9 ? d - 9 : d;
		n++;
	}
	return n >= LOG_PAN_MIN && n <= LOG_PAN_MAX && sum % 10 == 0;
}

static int
log_is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static void
log_mask_pan(char *s)
{
	size_t i = 0, j, cend, xend, end, n;

	while (s[i] != '\0') {
		if (s[i] < '2' || s[i] > '6' ||
		    (i > 0 && log_is_digit(s[i - 1]))) {
			i++;
			continue;
		}
		/* the digits alone, and with single ' ' or '-' between them */
		for (cend = i; log_is_digit(s[cend]); cend++)
			;
		for (xend = cend; log_is_digit(s[xend]) ||
		     ((s[xend] == ' ' || s[xend] == '-') &&
		         log_is_digit(s[xend + 1]));
		     xend++)
			;
		end = log_is_pan(s, i, xend) ? xend
		    : log_is_pan(s, i, cend) ? cend
		                             : 0;
		if (end != 0) {
			for (n = 0, j = i; j < end; j++)
				n += log_is_digit(s[j]);
			for (j = i; n > 4; j++)
				if (log_is_digit(s[j])) {
					s[j] = '*';
					n--;
				}
		}
		i = end != 0 ? end : cend;
	}
}

/* The line's head up to where the message starts, into line[0..cap). */
static void
log_head(char *line, size_t cap, size_t *pos, int level, const char *rid,
    const char *trace_id)
{
	const char *name =
	    (level >= LL_ERROR && level <= LL_DEBUG) ? log_names[level] : "?";
	char ts[32], num[32];

	log_timestamp(ts);
	(void)snprintf(num, sizeof(num), "%ld", (long)getpid());
	if (log_fmt == LF_JSON) {
		log_append(line, cap, pos, "{\"ts\":\"");
		log_append(line, cap, pos, ts);
		log_append(line, cap, pos, "\",\"level\":\"");
		log_append(line, cap, pos, name);
		log_append(line, cap, pos, "\",\"pid\":");
		log_append(line, cap, pos, num);
		if (rid != NULL && *rid != '\0') {
			log_append(line, cap, pos, ",\"request_id\":\"");
			(void)log_append_json(line,
			    *pos + LOG_RID_MAX < cap ? *pos + LOG_RID_MAX : cap,
			    pos, rid, strlen(rid));
			log_append(line, cap, pos, "\"");
		}
		if (trace_id != NULL && *trace_id != '\0') {
			log_append(line, cap, pos, ",\"trace_id\":\"");
			(void)log_append_json(line, cap, pos, trace_id,
			    strnlen(trace_id, LOG_TRACE_MAX));
			log_append(line, cap, pos, "\"");
		}
		log_append(line, cap, pos, ",\"msg\":\"");
		return;
	}
	log_append(line, cap, pos, ts);
	log_append(line, cap, pos, " ");
	log_append(line, cap, pos, name);
	log_append(line, cap, pos, " [");
	log_append(line, cap, pos, num);
	log_append(line, cap, pos, "] [");
	if (rid == NULL || *rid == '\0')
		rid = "-";
	/* The request id is ours, but escape it like any other text. */
	*pos += log_escape(line + *pos,
	    LOG_RID_MAX < cap - *pos ? LOG_RID_MAX : cap - *pos, rid,
	    strlen(rid));
	if (trace_id != NULL && *trace_id != '\0') {
		log_append(line, cap, pos, " trace=");
		(void)log_append_text(line, cap, pos, trace_id,
		    strnlen(trace_id, LOG_TRACE_MAX));
	}
	log_append(line, cap, pos, "] ");
}

/* One write(2) of the line; a full pipe drops it and counts it. */
static void
log_write(const char *line, size_t len)
{
	unsigned long dropped;
	char msg[160];
	ssize_t w;
	int n;

	do {
		w = write(STDERR_FILENO, line, len);
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
		if (log_fmt == LF_JSON) {
			char ts[32];

			log_timestamp(ts);
			n = snprintf(msg, sizeof(msg),
			    "{\"ts\":\"%s\",\"level\":\"warn\",\"pid\":%ld,\"msg\":\"%lu log line(s) dropped: stderr was full\"}\n",
			    ts, (long)getpid(), dropped);
		} else
			n = snprintf(msg, sizeof(msg),
			    "warn: %lu log line(s) dropped: stderr was full\n",
			    dropped);
		if (n > 0 && (size_t)n < sizeof(msg))
			(void)!write(STDERR_FILENO, msg, (size_t)n);
	}
}

static void
log_vevent(int level, const char *rid, const char *trace_id, const char *fmt,
    va_list ap)
{
	char line[LOG_LINE_MAX];
	char msg[LOG_LINE_MAX];
	size_t pos = 0, cap, tail;
	int saved_errno = errno, n, all;

	if (!log_enabled(level))
		return;
	/* Room for the truncation mark, the JSON end and the newline. */
	tail = strlen(LOG_TRUNC_MARK) + (log_fmt == LF_JSON ? 2 : 0) + 1;
	cap = sizeof(line) - tail;
	log_head(line, cap, &pos, level, rid, trace_id);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	if (n < 0)
		goto out;
	log_mask_pan(msg);
	/* Control characters would break the one-line rule: escape them. */
	all = log_fmt == LF_JSON
	    ? log_append_json(line, cap, &pos, msg, strlen(msg))
	    : log_append_text(line, cap, &pos, msg, strlen(msg));
	if (!all || (size_t)n >= sizeof(msg)) {
		memcpy(line + pos, LOG_TRUNC_MARK, strlen(LOG_TRUNC_MARK));
		pos += strlen(LOG_TRUNC_MARK);
	}
	if (log_fmt == LF_JSON) {
		memcpy(line + pos, "\"}", 2);
		pos += 2;
	}
	line[pos++] = '\n';
	log_write(line, pos);
out:
	errno = saved_errno;
}

void
log_msg(int level, const char *rid, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vevent(level, rid, NULL, fmt, ap);
	va_end(ap);
}

void
log_event(int level, const char *rid, const char *trace_id, const char *fmt,
    ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vevent(level, rid, trace_id, fmt, ap);
	va_end(ap);
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
