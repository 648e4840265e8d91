/*
 * fcgi_codec.h - the FastCGI protocol, bytes in and events out, in the
 * style of hiredis's read.c: the reader is fed bytes and never touches a
 * socket, so it is tested with plain buffers. Built on libfcgi's protocol
 * definitions (fastcgi.h). The writer half frames records into a caller's
 * buffer. No I/O, no allocation beyond the reader's own bounded buffers.
 *
 * One reader per connection. One request at a time per connection (with
 * FCGI_KEEP_CONN, requests follow one another): a BEGIN_REQUEST for a second
 * request id while one is active is answered FCGI_CANT_MPX_CONN by the
 * caller (event FCGI_EV_REFUSE_MPX), as the specification allows; records of
 * request ids that are not active are ignored.
 *
 * Records the reader passes over (the specification's "ignore"): any record
 * of a request id other than the active one (BEGIN_REQUEST aside), FCGI_DATA
 * of the active request (the responder role has no data stream), and any
 * record of a nonzero id whose type lies outside 1..FCGI_MAXTYPE. Records a
 * web server never sends to an application (END_REQUEST, STDOUT, STDERR,
 * GET_VALUES, GET_VALUES_RESULT, UNKNOWN_TYPE) for the active request, PARAMS
 * after the params ended, STDIN before they ended or after the body ended
 * are protocol errors. Every record with request id 0 is a management
 * record: FCGI_EV_GET_VALUES or FCGI_EV_UNKNOWN.
 */
#ifndef CHARGE_FCGI_CODEC_H
#define CHARGE_FCGI_CODEC_H

#include <stddef.h>

#include <fastcgi.h>

/* Bytes of PARAMS content one request may send, all records together. */
#define FCGI_PARAMS_MAX 65536
/* Parameters one request may send. */
#define FCGI_PARAMS_COUNT_MAX 256
/* Bytes of the largest record: header, 65535 of content, 255 of padding. */
#define FCGI_RECORD_MAX (FCGI_HEADER_LEN + FCGI_MAX_LENGTH + 255)
/* Bytes the reader accepts beyond one whole record: a socket read's worth. */
#define FCGI_READER_SLACK 8192
/* Unread bytes one reader holds at most (73990). */
#define FCGI_READER_MAX (FCGI_RECORD_MAX + FCGI_READER_SLACK)
/* Content bytes of one STDOUT/STDERR record the writer frames (8-aligned). */
#define FCGI_STREAM_CHUNK 65528

struct fcgi_param {
	const char *name; /* not NUL-terminated; may contain NUL bytes */
	size_t namelen;
	const char *value; /* not NUL-terminated; may contain NUL bytes */
	size_t valuelen;
};

enum fcgi_event_type {
	FCGI_EV_NONE, /* no complete event: feed more bytes */
	/* request_id, role, keep_conn; any role: the caller answers
	 * FCGI_UNKNOWN_ROLE to all but the responder */
	FCGI_EV_BEGIN,
	FCGI_EV_PARAMS,     /* the params are complete: params, nparams */
	FCGI_EV_STDIN,      /* data, len > 0: a piece of the body */
	FCGI_EV_STDIN_END,  /* the empty STDIN record: the body ended */
	FCGI_EV_ABORT,      /* ABORT_REQUEST for the active request */
	FCGI_EV_GET_VALUES, /* FCGI_GET_VALUES: params are the names asked */
	FCGI_EV_UNKNOWN,    /* another management type: unknown_type */
	FCGI_EV_REFUSE_MPX, /* BEGIN_REQUEST for another id: request_id */
	FCGI_EV_ERROR       /* protocol error: errstr; close the connection */
};

struct fcgi_event {
	enum fcgi_event_type type;
	unsigned request_id; /* every event but the management ones */
	int role;
	int keep_conn;
	unsigned char unknown_type;
	const struct fcgi_param *params; /* FCGI_EV_PARAMS, _GET_VALUES */
	size_t nparams;
	const char *data; /* FCGI_EV_STDIN */
	size_t len;
};

struct fcgi_reader; /* opaque */

/* A new reader, NULL on ENOMEM. */
struct fcgi_reader *fcgi_reader_new(void);
/* NULL-safe. */
void fcgi_reader_free(struct fcgi_reader *r);

/*
 * Appends len bytes, all or none. 0, or -1 when the reader cannot hold them
 * (the unread bytes would pass FCGI_READER_MAX: the caller stops reading
 * until the events are taken), on ENOMEM, or after FCGI_EV_ERROR.
 */
int fcgi_reader_feed(struct fcgi_reader *r, const char *buf, size_t len);

/*
 * Bytes fcgi_reader_feed accepts now (0 after an error). When
 * fcgi_reader_next gave FCGI_EV_NONE it is at least the bytes the record
 * in progress still lacks, so a caller that reads at most this much never
 * stalls.
 */
size_t fcgi_reader_room(const struct fcgi_reader *r);

/*
 * The next event, or FCGI_EV_NONE when more bytes are needed. Pointers in
 * ev (params, data) stay valid until the next call to fcgi_reader_feed or
 * fcgi_reader_next. After FCGI_EV_ERROR every later call gives
 * FCGI_EV_ERROR again.
 */
void fcgi_reader_next(struct fcgi_reader *r, struct fcgi_event *ev);

/* Text of the last FCGI_EV_ERROR (static storage of the reader). */
const char *fcgi_reader_error(const struct fcgi_reader *r);

/*
 * After a request ends (END_REQUEST sent): the connection may carry the
 * next BEGIN_REQUEST. Unread bytes are kept.
 */
void fcgi_reader_request_done(struct fcgi_reader *r);

/*
 * END_REQUEST was sent for the active request while its input goes on: its
 * STDIN records still come as events, and a BEGIN_REQUEST (of any id) now
 * ends it and begins the next request instead of being refused. Apache's
 * mod_proxy_fcgi, answered before it sent a whole body, stops the body
 * without the empty STDIN record and sends the next request on the kept
 * connection.
 */
void fcgi_reader_answered(struct fcgi_reader *r);

/*
 * Bytes fcgi_write_stream writes for n bytes of stream data (STDOUT), exactly:
 * records of FCGI_STREAM_CHUNK content bytes and a last shorter one, each
 * padded to a multiple of 8 (as libfcgi does); 8 for n == 0.
 */
size_t fcgi_stream_size(size_t n);

/*
 * Frames n bytes as STDOUT (or STDERR) records of request_id into out
 * (room: fcgi_stream_size(n)); n == 0 writes the empty record that ends
 * the stream. Padding bytes are zero. Returns the bytes written.
 */
size_t fcgi_write_stream(char *out, int type, unsigned request_id,
    const char *data, size_t n);

/* FCGI_END_REQUEST: 16 bytes. */
#define FCGI_END_REQUEST_SIZE 16
size_t fcgi_write_end(char *out, unsigned request_id, unsigned app_status,
    int protocol_status);

/* FCGI_UNKNOWN_TYPE: 16 bytes. */
#define FCGI_UNKNOWN_TYPE_SIZE 16
size_t fcgi_write_unknown_type(char *out, unsigned char type);

/*
 * FCGI_GET_VALUES_RESULT for the names asked that the responder knows
 * (FCGI_MAX_CONNS, FCGI_MAX_REQS, FCGI_MPXS_CONNS), with the given values;
 * other names are left out, as the specification says. Returns the bytes
 * written, or 0 when outlen is too small.
 */
size_t fcgi_write_values(char *out, size_t outlen,
    const struct fcgi_param *asked, size_t nasked, unsigned max_conns,
    unsigned max_reqs, int mpxs_conns);

#endif
