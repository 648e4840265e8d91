/*
 * reqlog.c - the request log: one JSON line per answered request.
 */
#include "reqlog.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"

/* s[0..n) as a JSON string (or null when s is NULL). */
static void
put_string(struct sim_buf *b, const char *s, size_t n)
{
	static const char hexd[] = "0123456789abcdef";
	size_t i;

	if (s == NULL) {
		sim_buf_adds(b, "null");
		return;
	}
	sim_buf_adds(b, "\"");
	for (i = 0; i < n && i < SIM_REQLOG_VALUE_MAX; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[6] = { '\\', 'u', '0', '0', hexd[c >> 4], hexd[c & 15] };

		if (c == '"' || c == '\\') {
			e[1] = (char)c;
			sim_buf_add(b, e, 2);
		} else if (c < 0x20 || c >= 0x7f)
			sim_buf_add(b, e, 6);
		else
			sim_buf_add(b, (const char *)&s[i], 1);
	}
	sim_buf_adds(b, "\"");
}

void
sim_reqlog_write(int fd, const struct sim_reqlog_entry *e)
{
	struct sim_buf b = { NULL, 0, 0 };
	size_t path = strcspn(e->target, "?");
	ssize_t w;

	if (path > e->target_len)
		path = e->target_len;
	sim_buf_adds(&b, "{\"request_id\":");
	put_string(&b, e->request_id, strlen(e->request_id));
	sim_buf_adds(&b, ",\"method\":");
	put_string(&b, e->method, strlen(e->method));
	sim_buf_adds(&b, ",\"path\":");
	put_string(&b, e->target, path);
	sim_buf_addf(&b, ",\"status\":%d,\"idempotency_key\":", e->status);
	put_string(&b, e->idem_len > 0 ? e->idem : NULL, e->idem_len);
	sim_buf_adds(&b, ",\"x_request_id\":");
	put_string(&b, e->x_request_id_len > 0 ? e->x_request_id : NULL,
	    e->x_request_id_len);
	sim_buf_adds(&b, ",\"traceparent\":");
	put_string(&b, e->traceparent_len > 0 ? e->traceparent : NULL,
	    e->traceparent_len);
	sim_buf_adds(&b, "}\n");
	do {
		w = write(fd, b.p, b.len);
	} while (w < 0 && errno == EINTR);
	sim_buf_free(&b);
}
