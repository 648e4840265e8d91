/*
 * reqlog.h - the simulator's request log (--request-log FILE): one JSON
 * object per answered request, appended with one write(2), so that a test
 * sees what each delivery carried: the caller's X-Request-Id and W3C
 * traceparent, the Idempotency-Key, and the Request-Id it was answered with.
 */
#ifndef SIM_REQLOG_H
#define SIM_REQLOG_H

#include <stddef.h>

#define SIM_REQLOG_VALUE_MAX 256 /* bytes of a header value kept */

struct sim_reqlog_entry {
	const char *request_id; /* the answer's Request-Id */
	const char *method;
	const char *target;
	size_t target_len;
	int status;
	const char *idem; /* each: bytes and length; NULL or 0: absent */
	size_t idem_len;
	const char *x_request_id;
	size_t x_request_id_len;
	const char *traceparent;
	size_t traceparent_len;
};

/*
 * Appends e as {"request_id","method","path","status","idempotency_key",
 * "x_request_id","traceparent"} (absent headers null) and a newline to fd.
 * A write that fails is dropped: the log is for tests.
 */
void sim_reqlog_write(int fd, const struct sim_reqlog_entry *e);

#endif
