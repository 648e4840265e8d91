#!/usr/bin/env python3
"""load.py - the client of tests/deploy_live/run.sh: charges through a web
server while the responders behind it are restarted, then their replays.

  load.py load URL SECONDS CLIENTS OUT [--key-header K] [--stop FILE]
      CLIENTS threads, each on a kept-alive HTTP/1.1 connection to URL (a
      new one after any error), send fresh charges (a new Idempotency-Key
      each) for SECONDS, or until FILE exists. Appends one JSON line per
      request to OUT: key, status (0: no HTTP answer), the error or the
      body (base64), the Idempotent-Replayed header.
  load.py replay URL OUT
      Every charge of OUT answered 201 is sent again with its key: each
      must come back 201 with Idempotent-Replayed: true and the same body,
      byte for byte. Prints "replayed N mismatched M" and the first
      mismatches.
  load.py summary OUT
      "answers N 201 N failed N" and the first failures.
  load.py ledger OUT LEDGER
      Outcomes lost or doubled: every key of OUT must have one line in the
      provider's ledger if it was answered 201 and at most one otherwise.
      Prints "charged N unanswered N doubled N missing N".

Standard library only.
"""

import base64
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
import uuid

API_KEY = os.environ.get("LOAD_API_KEY", "sk_test_demo")
BODY = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'


def post(conn, key, api_key=API_KEY):
    conn.request("POST", "/charge", body=BODY, headers={
        "Authorization": "Bearer " + api_key,
        "Idempotency-Key": key,
        "Content-Type": "application/json",
    })
    r = conn.getresponse()
    return r.status, r.getheader("Idempotent-Replayed"), r.read()


def client(url, deadline, stop, out, lock, prefix):
    conn = None
    n = 0
    while time.monotonic() < deadline and not (stop and os.path.exists(stop)):
        if conn is None:
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        key = "%s-%d" % (prefix, n)
        n += 1
        rec = {"key": key, "t": time.time()}
        try:
            st, rep, body = post(conn, key)
            rec.update(status=st, replayed=rep, body=base64.b64encode(body).decode())
        except (OSError, http.client.HTTPException) as e:
            rec.update(status=0, error="%s: %s" % (type(e).__name__, e))
            conn.close()
            conn = None
        with lock:
            out.write(json.dumps(rec) + "\n")
    if conn is not None:
        conn.close()


def load(url, seconds, clients, path, stop=None):
    url = urllib.parse.urlsplit(url)
    deadline = time.monotonic() + float(seconds)
    lock = threading.Lock()
    run = uuid.uuid4().hex[:8]
    with open(path, "a", buffering=1) as out:
        ts = [threading.Thread(target=client, args=(url, deadline, stop, out, lock,
                                                    "dl-%s-%d" % (run, i)))
              for i in range(int(clients))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summary(path):
    recs = records(path)
    ok = [r for r in recs if r["status"] == 201]
    bad = [r for r in recs if r["status"] != 201]
    print("answers %d 201 %d failed %d" % (len(recs), len(ok), len(bad)))
    for r in bad[:10]:
        body = base64.b64decode(r.get("body", "")).decode("utf-8", "replace")[:200]
        print("# %s %s %s %s" % (r["key"], r["status"], r.get("error", ""), body))


def replay(url, path):
    url = urllib.parse.urlsplit(url)
    recs = [r for r in records(path) if r["status"] == 201]
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    bad = []
    for r in recs:
        try:
            st, rep, body = post(conn, r["key"])
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
            bad.append((r["key"], "error %s" % e))
            continue
        if st != 201 or rep != "true" or body != base64.b64decode(r["body"]):
            bad.append((r["key"], "%s replayed=%s %r" % (st, rep, body[:120])))
    conn.close()
    print("replayed %d mismatched %d" % (len(recs), len(bad)))
    for k, why in bad[:10]:
        print("# %s: %s" % (k, why))


def ledger(path, ledger_path):
    recs = records(path)
    count = {}
    with open(ledger_path, "rb") as f:
        for ln in f:
            r = ln.rstrip(b"\n").decode("utf-8", "replace").split("\t")
            if len(r) >= 3:
                count[r[2]] = count.get(r[2], 0) + 1
    mine = [r["key"] for r in recs]
    charged = sum(1 for k in mine if count.get(k, 0) >= 1)
    doubled = [k for k in mine if count.get(k, 0) > 1]
    missing = [r["key"] for r in recs if r["status"] == 201 and count.get(r["key"], 0) != 1]
    unanswered = [r["key"] for r in recs if r["status"] != 201 and count.get(r["key"], 0) >= 1]
    print("charged %d unanswered %d doubled %d missing %d" % (charged, len(unanswered),
                                                              len(doubled), len(missing)))
    for k in (doubled + missing + unanswered)[:10]:
        print("# %s: %d ledger line(s)" % (k, count.get(k, 0)))


def main():
    a = sys.argv[1:]
    if len(a) >= 5 and a[0] == "load":
        stop = a[a.index("--stop") + 1] if "--stop" in a else None
        load(a[1], a[2], a[3], a[4], stop)
    elif len(a) == 3 and a[0] == "replay":
        replay(a[1], a[2])
    elif len(a) == 3 and a[0] == "ledger":
        ledger(a[1], a[2])
    elif len(a) == 2 and a[0] == "summary":
        summary(a[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
