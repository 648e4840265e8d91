#!/usr/bin/env python3
"""FastCGI requests for tests/signals/run.sh, straight to the listener.

  client.py stall-body ADDR KEY      params + half the body, then silence;
                                     prints "STATUS SECONDS"
  client.py slow-params ADDR KEY P   half the params, P seconds of silence,
                                     the rest; prints "STATUS" or "NONE"
  client.py burst ADDR N TAG         N requests at once; prints one line per
                                     request: STATUS, "RESET" (refused or
                                     reset: never accepted) or "EOF" (closed
                                     without an answer)
  client.py one ADDR KEY [NAME=VALUE ...]
                                     one request with extra params (a value
                                     may hold \\0 as an escape); prints STATUS
"""

import concurrent.futures
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import fcgi  # noqa: E402

BODY = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'


def one(addr, key, extra=None, **kw):
    try:
        s = fcgi.connect(addr, timeout=20)
    except OSError:
        return "RESET"
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


def main():
    cmd, addr = sys.argv[1], sys.argv[2]
    if cmd == "stall-body":
        t0 = time.monotonic()
        st = one(addr, sys.argv[3], body_split=len(BODY) // 2, body_pause=None)
        print(st, "%.2f" % (time.monotonic() - t0))
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
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
