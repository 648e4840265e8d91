#!/usr/bin/env python3
"""The FastCGI protocol on the responder's own socket, byte for byte, for
tests/fcgi_wire/run.sh. Prints TAP lines without numbers (run.sh numbers
them). Python standard library only.

  wire.py SOCKET LEDGER MAX_INFLIGHT PID   (max_request_bytes = 65536)

SOCKET: charge --listen on a unix socket; LEDGER: its provider ledger;
MAX_INFLIGHT: its max_inflight (FCGI_MAX_REQS must say the same); PID: the
responder, which must stay alive through every malformed stream.
"""

import os
import socket
import struct
import sys
import time
import uuid

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import fcgi  # noqa: E402

ABORT_REQUEST, GET_VALUES, GET_VALUES_RESULT, UNKNOWN_TYPE = 2, 9, 10, 11
KEEP_CONN = 1
REQUEST_COMPLETE, CANT_MPX_CONN, OVERLOADED, UNKNOWN_ROLE = 0, 1, 2, 3
AUTHORIZER, FILTER = 2, 3
API_KEY = "sk_test_demo"
BODY = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'

SOCK, LEDGER, MAX_INFLIGHT, PID = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
MAX_REQUEST_BYTES = 65536


def tap(ok, desc, why=None):
    print("%s - %s" % ("ok" if ok else "not ok", desc), flush=True)
    if not ok and why:
        for line in str(why).splitlines()[:15]:
            print("#   " + line, flush=True)


def rec(rtype, content=b"", rid=1, version=1):
    pad = (8 - len(content) % 8) % 8
    return struct.pack(">BBHHBB", version, rtype, rid, len(content), pad, 0) + content + b"\0" * pad


def begin(rid=1, role=fcgi.RESPONDER, keep=True):
    return rec(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", role, KEEP_CONN if keep else 0), rid)


def params_recs(params, rid=1):
    p = fcgi.encode_params(params)
    out = b""
    for i in range(0, len(p), 65535):
        out += rec(fcgi.PARAMS, p[i:i + 65535], rid)
    return out + rec(fcgi.PARAMS, b"", rid)


def charge_params(key, body=BODY, **extra):
    p = {"REQUEST_METHOD": "POST", "REQUEST_URI": "/charge", "SCRIPT_NAME": "/charge",
         "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.1",
         "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
         "HTTP_AUTHORIZATION": "Bearer " + API_KEY, "HTTP_IDEMPOTENCY_KEY": key}
    p.update(extra)
    return p


def request_bytes(key, rid=1, keep=True, body=BODY, **extra):
    return (begin(rid, keep=keep) + params_recs(charge_params(key, body, **extra), rid)
            + (rec(fcgi.STDIN, body, rid) if body else b"") + rec(fcgi.STDIN, b"", rid))


def connect(timeout=10.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(SOCK)
    return s


class Reader(fcgi.RecordReader):
    """Records from a socket: (type, id, content)."""

    def response(self):
        """Records up to END_REQUEST: (stdout, ids seen, end id, app
        status, protocol status) or None on EOF / "timeout"."""
        out, ids = b"", set()
        while True:
            r = self.record()
            if r is None or r == "timeout":
                return r
            rtype, rid, content = r
            if rtype == fcgi.STDOUT:
                out += content
                ids.add(rid)
            elif rtype == fcgi.STDERR:
                ids.add(rid)
            elif rtype == fcgi.END_REQUEST:
                app, proto = struct.unpack(">IB3x", content[:8])
                return out, ids, rid, app, proto
            else:
                return ("other", rtype, rid, content)


def status_of(out):
    return fcgi.status_of(out)


def alive():
    try:
        os.kill(PID, 0)
    except OSError:
        return False
    with open("/proc/%d/stat" % PID) as f:
        return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def fresh_charge():
    """One fresh charge on a new connection: its status, or why none."""
    try:
        s = connect()
    except OSError as e:
        return "connect: %s" % e
    try:
        s.sendall(request_bytes("wire-fresh-" + uuid.uuid4().hex, keep=False))
        r = Reader(s).response()
    except OSError as e:
        return "%s" % e
    finally:
        s.close()
    if not isinstance(r, tuple) or r[0] == "other":
        return "no answer (%r)" % (r,)
    return status_of(r[0])


def ledger_lines(key):
    try:
        with open(LEDGER, errors="replace") as f:
            return sum(1 for line in f if line.split("\t")[2:3] == [key])
    except OSError:
        return 0


def nv_pairs(content):
    out, i = {}, 0
    while i < len(content):
        lens = []
        for _ in range(2):
            if content[i] >> 7:
                lens.append(struct.unpack(">I", content[i:i + 4])[0] & 0x7FFFFFFF)
                i += 4
            else:
                lens.append(content[i])
                i += 1
        k = content[i:i + lens[0]]
        i += lens[0]
        out[k.decode()] = content[i:i + lens[1]].decode()
        i += lens[1]
    return out


def describe(r):
    if r is None:
        return "connection closed without an answer"
    if r == "timeout":
        return "no answer within the timeout"
    if r[0] == "other":
        return "record type %d id %d %r" % (r[1], r[2], r[3][:40])
    out, ids, rid, app, proto = r
    return "status %s, stdout ids %s, END_REQUEST id %d app %d protocol %d: %r" % (
        status_of(out), sorted(ids), rid, app, proto, out[:120])


# ------------------------------------------------------------------ tests

def t_keep_sequential():
    s = connect()
    rd = Reader(s)
    got, why = [], []
    for rid in (1, 2, 3):
        key = "wire-keep-%d-%s" % (rid, uuid.uuid4().hex)
        s.sendall(request_bytes(key, rid))
        r = rd.response()
        ok = isinstance(r, tuple) and r[0] != "other" and status_of(r[0]) == 201 \
            and r[1] == {rid} and r[2] == rid and r[4] == REQUEST_COMPLETE
        got.append(ok)
        if not ok:
            why.append("request %d: %s" % (rid, describe(r)))
            break
    # the connection is still open after the last answer (FCGI_KEEP_CONN)
    s.settimeout(0.3)
    open_after = rd.record() == "timeout"
    s.close()
    tap(all(got) and len(got) == 3 and open_after,
        "FCGI_KEEP_CONN: three requests one after another on one connection (ids 1, 2, 3): "
        "each 201 with its own id, END_REQUEST REQUEST_COMPLETE, the connection stays open",
        "; ".join(why) or "the connection was closed after the last answer")


def t_pipelined(ids, what):
    s = connect()
    rd = Reader(s)
    keys = ["wire-pipe-%d-%s" % (i, uuid.uuid4().hex) for i in range(len(ids))]
    s.sendall(b"".join(request_bytes(k, rid) for rid, k in zip(ids, keys)))
    why = []
    for i, rid in enumerate(ids):
        r = rd.response()
        if not (isinstance(r, tuple) and r[0] != "other" and status_of(r[0]) == 201
                and r[1] == {rid} and r[2] == rid and r[4] == REQUEST_COMPLETE):
            why.append("answer %d (id %d): %s" % (i + 1, rid, describe(r)))
            break
    s.close()
    time.sleep(0.2)
    lines = [ledger_lines(k) for k in keys]
    tap(not why and lines == [1] * len(ids),
        "%d requests pipelined in one write on a kept connection, %s: answered in order, "
        "201 each with its request id, one ledger line each" % (len(ids), what),
        "; ".join(why) + " ledger lines %s" % lines)


def t_mpx_refused():
    s = connect()
    rd = Reader(s)
    key = "wire-mpx-%s" % uuid.uuid4().hex
    p = fcgi.encode_params(charge_params(key))
    # request 1 is active (its params are not complete) when BEGIN 2 comes
    s.sendall(begin(1) + rec(fcgi.PARAMS, p[:40], 1) + begin(2))
    r = rd.record()
    refused = isinstance(r, tuple) and r[0] == fcgi.END_REQUEST and r[1] == 2 and \
        struct.unpack(">IB3x", r[2][:8])[1] == CANT_MPX_CONN
    tap(refused, "a second BEGIN_REQUEST (id 2) while request 1 is active: END_REQUEST "
        "id 2 with FCGI_CANT_MPX_CONN",
        "got %r" % (r,))
    s.sendall(rec(fcgi.PARAMS, p[40:], 1) + rec(fcgi.PARAMS, b"", 1)
              + rec(fcgi.STDIN, BODY, 1) + rec(fcgi.STDIN, b"", 1))
    r = rd.response()
    ok = isinstance(r, tuple) and r[0] != "other" and status_of(r[0]) == 201 and r[2] == 1
    s.close()
    tap(ok and ledger_lines(key) == 1, "... and request 1 still completes: 201 on id 1, "
        "one ledger line", describe(r))


def t_refused_body_kept():
    """A body over max_request_bytes on a kept connection: 413, and the
    connection carries the next request (the spec: with FCGI_KEEP_CONN the
    application does not close it; Apache's enablereuse sends the next
    request on it)."""
    s = connect()
    rd = Reader(s)
    big = b" " * (MAX_REQUEST_BYTES + 1)
    key = "wire-413-%s" % uuid.uuid4().hex
    data = begin(1) + params_recs(charge_params(key, big))
    for i in range(0, len(big), 65528):
        data += rec(fcgi.STDIN, big[i:i + 65528], 1)
    data += rec(fcgi.STDIN, b"", 1)
    why = None
    try:
        s.sendall(data)
        r = rd.response()
        if not (isinstance(r, tuple) and r[0] != "other" and status_of(r[0]) == 413):
            why = "the large body: %s" % describe(r)
        else:
            time.sleep(0.2)
            key2 = "wire-after-413-%s" % uuid.uuid4().hex
            s.sendall(request_bytes(key2, 1))
            r = rd.response()
            if not (isinstance(r, tuple) and r[0] != "other" and status_of(r[0]) == 201):
                why = "the next request on the connection: %s" % describe(r)
    except OSError as e:
        why = "%s" % e
    s.close()
    tap(why is None, "FCGI_KEEP_CONN: a body over max_request_bytes gets 413, and the kept "
        "connection then serves the next request (201)", why)


def t_answered_early_kept():
    """A request answered before its input ended (from its params: a GET,
    a 405, a Content-Length over max_request_bytes). Apache's
    mod_proxy_fcgi (enablereuse=on) reads the answer, then still sends the
    rest of the input and the empty STDIN record, then the next
    BEGIN_REQUEST (same id, 1) on the kept connection: the rest of the
    input and the next request may come in one write, or the next request
    a little later. The next request must be served."""
    big = b" " * (MAX_REQUEST_BYTES + 1)
    cases = (
        ("GET /healthz", {"REQUEST_METHOD": "GET", "REQUEST_URI": "/healthz",
                          "SCRIPT_NAME": "/healthz", "QUERY_STRING": ""}, b"", 200),
        ("PUT /charge (405)", dict(charge_params("wire-405-x", b"{}"), REQUEST_METHOD="PUT"),
         b"{}", 405),
        ("a body over max_request_bytes (413)", charge_params("wire-413-x", big), big, 413),
    )
    for what, params, body, want in cases:
        rest = b"".join(rec(fcgi.STDIN, body[i:i + 65528], 1)
                        for i in range(0, len(body), 65528)) + rec(fcgi.STDIN, b"", 1)
        for together in (True, False):
            s = connect()
            rd = Reader(s)
            why = None
            try:
                s.sendall(begin(1) + params_recs(params))
                r = rd.response()
                if not (isinstance(r, tuple) and r[0] != "other" and status_of(r[0]) == want):
                    why = "the first request: %s" % describe(r)
                else:
                    key = "wire-next-%s" % uuid.uuid4().hex
                    if together:
                        s.sendall(rest + request_bytes(key, 1))
                    else:
                        s.sendall(rest)
                        time.sleep(0.05)
                        s.sendall(request_bytes(key, 1))
                    r = rd.response()
                    if not (isinstance(r, tuple) and r[0] != "other" and
                            status_of(r[0]) == 201):
                        why = "the next request (id 1) on the connection: %s" % describe(r)
            except OSError as e:
                why = "%s" % e
            s.close()
            tap(why is None, "FCGI_KEEP_CONN, %s answered %d before its input ended; the rest "
                "of the input then %s: the next request is served 201" % (
                    what, want, "and the next request in one write" if together else
                    "and 50 ms later the next request"), why)


def t_body_abandoned_kept():
    """Apache's mod_proxy_fcgi 2.4.71 with enablereuse=on, when the answer
    comes before it has sent the whole body (a 413 from CONTENT_LENGTH),
    stops sending the body where it is, without the empty STDIN record, and
    sends the next BEGIN_REQUEST (id 1) on the same connection (seen with a
    FastCGI server logging Apache's records: 18 of 20 requests with a
    300 KB body answered from their params were cut after 32-122 KiB). The
    next request must be served, not refused as a protocol error (Apache
    answers that client 503)."""
    big = b" " * (4 * MAX_REQUEST_BYTES)
    for cut in (0, 8192, 32768):
        s = connect()
        rd = Reader(s)
        why = None
        try:
            s.sendall(begin(1) + params_recs(charge_params("wire-cut-x", big)) +
                      b"".join(rec(fcgi.STDIN, big[i:i + 8192], 1) for i in range(0, cut, 8192)))
            r = rd.response()
            if not (isinstance(r, tuple) and r[0] != "other" and status_of(r[0]) == 413):
                why = "the large body: %s" % describe(r)
            else:
                s.sendall(b"".join(rec(fcgi.STDIN, big[i:i + 8192], 1)
                                   for i in range(cut, cut + 16384, 8192)))
                key = "wire-after-cut-%s" % uuid.uuid4().hex
                s.sendall(request_bytes(key, 1))
                r = rd.response()
                if not (isinstance(r, tuple) and r[0] != "other" and status_of(r[0]) == 201):
                    why = "the next request (id 1) on the connection: %s" % describe(r)
        except OSError as e:
            why = "%s" % e
        s.close()
        tap(why is None, "FCGI_KEEP_CONN, a body over max_request_bytes answered 413 from its "
            "params; the web server stops the body after %d KiB without the empty STDIN "
            "and sends the next request (as Apache mod_proxy_fcgi does): served 201"
            % ((cut + 16384) // 1024), why)


def t_get_values():
    s = connect()
    names = {"FCGI_MAX_CONNS": "", "FCGI_MAX_REQS": "", "FCGI_MPXS_CONNS": ""}
    s.sendall(rec(GET_VALUES, fcgi.encode_params(names), 0))
    r = Reader(s).record()
    s.close()
    vals = nv_pairs(r[2]) if isinstance(r, tuple) and r[0] == GET_VALUES_RESULT else None
    tap(vals is not None and r[1] == 0 and vals.get("FCGI_MPXS_CONNS") == "0"
        and vals.get("FCGI_MAX_REQS") == str(MAX_INFLIGHT),
        "FCGI_GET_VALUES: GET_VALUES_RESULT with FCGI_MPXS_CONNS=0 and FCGI_MAX_REQS=%d "
        "(max_inflight)" % MAX_INFLIGHT, "got %r (values %r)" % (r, vals))


def t_unknown_type():
    s = connect()
    s.sendall(rec(42, b"\1\2\3", 0))
    r = Reader(s).record()
    s.close()
    tap(isinstance(r, tuple) and r[0] == UNKNOWN_TYPE and r[1] == 0 and r[2][:1] == b"\x2a",
        "a management record of unknown type 42: FCGI_UNKNOWN_TYPE naming type 42",
        "got %r" % (r,))


def t_roles():
    for role, name in ((AUTHORIZER, "AUTHORIZER"), (FILTER, "FILTER"), (7, "role 7")):
        s = connect()
        s.sendall(begin(1, role=role, keep=False))
        r = Reader(s).record()
        s.close()
        tap(isinstance(r, tuple) and r[0] == fcgi.END_REQUEST and r[1] == 1 and
            struct.unpack(">IB3x", r[2][:8])[1] == UNKNOWN_ROLE,
            "BEGIN_REQUEST with role %s: END_REQUEST FCGI_UNKNOWN_ROLE" % name,
            "got %r" % (r,))


def t_nul_param():
    for name, extra in (("the Idempotency-Key", {"HTTP_IDEMPOTENCY_KEY": b"wire-nul\0after"}),
                        ("Authorization", {"HTTP_AUTHORIZATION": b"Bearer " + API_KEY.encode()
                                           + b"\0x"}),
                        ("REQUEST_URI", {"REQUEST_URI": b"/charge\0/x"})):
        key = "wire-nul-%s" % uuid.uuid4().hex
        p = charge_params(key)
        p.update(extra)
        s = connect()
        s.sendall(begin(1, keep=False) + params_recs(p) + rec(fcgi.STDIN, BODY)
                  + rec(fcgi.STDIN, b""))
        r = Reader(s).response()
        s.close()
        st = status_of(r[0]) if isinstance(r, tuple) and r[0] != "other" else None
        tap(st == 400, "a NUL inside the value of %s: 400" % name, describe(r))


def malformed(name, data, close_early=False, check=None):
    """Sends data on a new connection (then closes at once when close_early,
    else reads what comes for up to 2 s); afterwards the responder must be
    alive and serve a fresh charge."""
    r = None
    try:
        s = connect(timeout=2.0)
        s.sendall(data)
        if not close_early:
            rd = Reader(s)
            r = rd.response()
        s.close()
    except OSError as e:
        r = "error %s" % e
    extra = ""
    if check is not None:
        extra = check(r) or ""
    st = fresh_charge()
    tap(alive() and st == 201 and not extra,
        "%s: the responder stays up and serves a fresh charge afterwards" % name,
        "alive %s, fresh charge %s; this stream got %s %s" % (
            alive(), st, describe(r) if r is None or isinstance(r, tuple) or r == "timeout" else r,
            extra))


def t_malformed():
    key = "wire-bad-%s" % uuid.uuid4().hex
    malformed("a record with version 2", rec(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", 1, 0),
                                             1, version=2) + b"\0" * 64)
    malformed("a truncated header, then close", b"\x01\x01\x00", close_early=True)
    malformed("a truncated record (content length 5000, 10 bytes), then close",
              begin(1) + struct.pack(">BBHHBB", 1, fcgi.PARAMS, 1, 5000, 0, 0) + b"x" * 10,
              close_early=True)
    big = {"HTTP_X_PAD_%d" % i: "p" * 1000 for i in range(70)}     # about 70 KiB
    malformed("params past 64 KiB", begin(1, keep=False) +
              params_recs(dict(charge_params(key), **big)) + rec(fcgi.STDIN, BODY)
              + rec(fcgi.STDIN, b""),
              check=lambda r: "charged" if ledger_lines(key) else None)
    malformed("a BEGIN_REQUEST with request id 0", begin(0) + b"")
    akey = "wire-abort-%s" % uuid.uuid4().hex
    p = charge_params(akey)
    malformed("ABORT_REQUEST in the middle of the body",
              begin(1, keep=False) + params_recs(p) + rec(fcgi.STDIN, BODY[:10])
              + rec(ABORT_REQUEST, b"", 1),
              check=lambda r: "charged" if ledger_lines(akey) else None)
    malformed("STDIN before the params ended", begin(1) + rec(fcgi.STDIN, BODY))
    malformed("an END_REQUEST from the client", begin(1) + rec(fcgi.END_REQUEST, b"\0" * 8))
    malformed("a name-value pair longer than its record",
              begin(1) + rec(fcgi.PARAMS, b"\x7f\x7fAB") + rec(fcgi.PARAMS, b""))
    malformed("random bytes", os.urandom(4096))
    # many connections opened and dropped half-way
    for i in range(50):
        try:
            s = connect()
            s.sendall(request_bytes("wire-drop-%d" % i)[:30 + i])
            s.close()
        except OSError:
            pass
    st = fresh_charge()
    tap(alive() and st == 201, "50 connections dropped in the middle of a request: "
        "the responder stays up and serves a fresh charge", "fresh charge: %s" % st)


def main():
    t_keep_sequential()
    t_pipelined([1, 1, 1], "all with id 1 (as web servers send them)")
    t_pipelined([1, 2, 3], "ids 1, 2, 3")
    t_mpx_refused()
    t_refused_body_kept()
    t_answered_early_kept()
    t_body_abandoned_kept()
    t_get_values()
    t_unknown_type()
    t_roles()
    t_nul_param()
    t_malformed()


if __name__ == "__main__":
    main()
