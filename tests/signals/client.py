#!/usr/bin/env python3
"""FastCGI requests for tests/signals/run.sh, straight to the listener.

  client.py stall-body ADDR KEY      params + half the body, then silence;
                                     prints "STATUS SECONDS"
  client.py stall-params ADDR KEY    half the params, then silence; prints
                                     "closed|open|answered SECONDS"
  client.py slow-params ADDR KEY P   half the params, P seconds of silence,
                                     the rest; prints "STATUS" or "NONE"
  client.py burst ADDR N TAG         N requests at once; prints one line per
                                     request: STATUS, "RESET" (refused or
                                     reset: never accepted) or "EOF" (closed
                                     without an answer)
  client.py one ADDR KEY [NAME=VALUE ...]
                                     one request with extra params (a value
                                     may hold \\0 as an escape); prints STATUS
  client.py after ADDR KEY MODE      how the responder ends a connection;
                                     prints "STATUS ENDED AFTER": ENDED is
                                     END_REQUEST seen, AFTER what a send 0.2 s
                                     after the answer met: "open" (read by the
                                     responder) or "closed" (EPIPE / reset).
                                     MODE: whole (a complete request), late-eof
                                     (the end of stdin 0.3 s after the body),
                                     refused (a body over the limit, sent in
                                     16 KiB pieces while the answer comes)
"""

import concurrent.futures
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import fcgi  # noqa: E402

BODY = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'


def ready():
    """Tells the script that a connection is up (SIGNALS_READY names a
    file to create): it signals the responder only then, however long this
    interpreter took to start."""
    path = os.environ.get("SIGNALS_READY")
    if path:
        try:
            open(path, "a").close()
        except OSError:
            pass


def one(addr, key, extra=None, **kw):
    try:
        s = fcgi.connect(addr, timeout=20)
    except OSError:
        return "RESET"
    ready()
    try:
        fcgi.send_request(s, fcgi.charge_params(key, BODY, **(extra or {})), BODY, **kw)
        out, ended = fcgi.read_response(s)
    except (ConnectionResetError, BrokenPipeError):
        return "RESET"
    except OSError as e:
        return "ERR:%s" % e.__class__.__name__
    finally:
        s.close()
    st = fcgi.status_of(out)
    if st is None:
        return "EOF"
    return str(st)


def after(addr, key, mode):
    body = BODY
    params = fcgi.charge_params(key, body)
    s = fcgi.connect(addr, timeout=20)
    sent_ok = True
    try:
        s.sendall(fcgi._record(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", fcgi.RESPONDER, 0)))
        if mode == "refused":
            big = b"x" * (4 << 20)
            params["CONTENT_LENGTH"] = str(len(big))
            s.sendall(fcgi._record(fcgi.PARAMS, fcgi.encode_params(params)) + fcgi._record(fcgi.PARAMS, b""))
            # the web server keeps sending the body it announced
            try:
                for i in range(0, len(big), 16384):
                    s.sendall(fcgi._record(fcgi.STDIN, big[i:i + 16384]))
                s.sendall(fcgi._record(fcgi.STDIN, b""))
            except OSError:
                sent_ok = False
        else:
            s.sendall(fcgi._record(fcgi.PARAMS, fcgi.encode_params(params)) + fcgi._record(fcgi.PARAMS, b"")
                      + fcgi._record(fcgi.STDIN, body))
            if mode == "late-eof":
                time.sleep(0.3)
            s.sendall(fcgi._record(fcgi.STDIN, b""))
        out, ended = fcgi.read_response(s)
        time.sleep(0.2)
        try:
            s.sendall(b"\0" * 8)
            time.sleep(0.05)
            s.sendall(b"\0" * 8)
            state = "open"
        except OSError:
            state = "closed"
    except OSError as e:
        return "ERR:%s" % e.__class__.__name__
    finally:
        s.close()
    return "%s %s %s%s" % (fcgi.status_of(out), "ended" if ended else "cut", state,
                           "" if sent_ok else " body-send-failed")


def stall_params(addr, key):
    """BEGIN and half the params, then nothing: the responder must close the
    connection once request_timeout_ms has passed. Prints "closed SECONDS"
    or "open SECONDS" (still open after 10 s)."""
    params = fcgi.encode_params(fcgi.charge_params(key, BODY))
    s = fcgi.connect(addr, timeout=10)
    t0 = time.monotonic()
    try:
        s.sendall(fcgi._record(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", fcgi.RESPONDER, 0)) +
                  fcgi._record(fcgi.PARAMS, params[:len(params) // 2]))
        state = "closed" if s.recv(4096) == b"" else "answered"
    except socket.timeout:
        state = "open"
    except OSError:
        state = "closed"
    finally:
        s.close()
    return "%s %.2f" % (state, time.monotonic() - t0)


def main():
    cmd, addr = sys.argv[1], sys.argv[2]
    if cmd == "stall-body":
        t0 = time.monotonic()
        st = one(addr, sys.argv[3], body_split=len(BODY) // 2, body_pause=None)
        print(st, "%.2f" % (time.monotonic() - t0))
    elif cmd == "stall-params":
        print(stall_params(addr, sys.argv[3]))
    elif cmd == "slow-params":
        print(one(addr, sys.argv[3], params_split=40, pause=float(sys.argv[4])))
    elif cmd == "burst":
        n, tag = int(sys.argv[3]), sys.argv[4]
        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            for r in ex.map(lambda i: one(addr, "%s-%d" % (tag, i)), range(n)):
                print(r)
    elif cmd == "one":
        extra = {}
        for a in sys.argv[4:]:
            k, v = a.split("=", 1)
            extra[k] = v.encode().replace(b"\\0", b"\0")
        print(one(addr, sys.argv[3], extra))
    elif cmd == "after":
        print(after(addr, sys.argv[3], sys.argv[4]))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
