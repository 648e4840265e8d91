#!/usr/bin/env python3
"""reload.py SOCKET HOLDER_PID CONF KEYS EVENTS LOG - API keys rotated by
SIGHUP under load (tests/deploy_live/run.sh, part reload). The responder
behind the holder (holder.py: SIGHUP is passed on, RELOADING=1 and READY=1
awaited) serves SOCKET with CONF (api_keys_file = KEYS) and writes LOG.

CLIENTS threads send fresh charges straight to SOCKET (FastCGI, a new
connection each) with the current key the whole time. Then:
  1. KEYS gains the new key, SIGHUP: the new key is accepted within 1 s;
     the clients switch to it;
  2. KEYS loses the old key, SIGHUP: the old key is refused (401) within 1 s;
  3. CONF with a bad value, SIGHUP: refused with one log line saying why,
     the configuration in force stays (the new key still serves);
  4. CONF with provider_secret changed, SIGHUP: refused with one log line
     naming the key (it cannot change live), the configuration stays;
and every client request was answered 201. Prints TAP lines without
numbers. Standard library only (tests/lib/fcgi.py).
"""

import hashlib
import os
import signal
import sys
import threading
import time
import uuid

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import fcgi  # noqa: E402

CLIENTS = 4
OLD, NEW = "sk_test_rotate_old", "sk_test_rotate_new"
BODY = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'
WITHIN_S = 1.0


def tap(ok, desc, why=""):
    print("%s - %s" % ("ok" if ok else "not ok", desc), flush=True)
    if not ok and why:
        for line in str(why).splitlines()[:10]:
            print("#   " + line, flush=True)


def charge(sock, api_key):
    """One fresh charge; its status (0: no answer)."""
    key = "rl-" + uuid.uuid4().hex
    try:
        s = fcgi.connect(sock, timeout=10)
        try:
            fcgi.send_request(s, fcgi.charge_params(key, BODY, api_key=api_key), BODY)
            out, _ = fcgi.read_response(s)
        finally:
            s.close()
        return fcgi.status_of(out) or 0
    except OSError:
        return 0


def write_keys(path, keys):
    with open(path + ".tmp", "w") as f:
        for k in keys:
            f.write("demo %s\n" % hashlib.sha256(k.encode()).hexdigest())
    os.replace(path + ".tmp", path)


def write_conf(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def count(path, word):
    try:
        with open(path) as f:
            return sum(1 for line in f if line.split()[:1] == [word])
    except OSError:
        return 0


def hup(holder, events):
    """SIGHUP through the holder; waits until it saw READY=1 again."""
    n = count(events, "reloaded")
    os.kill(holder, signal.SIGHUP)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        if count(events, "reloaded") > n:
            return True
        time.sleep(0.01)
    return False


def until(sock, api_key, want, secs=3.0):
    """Charges with api_key until one answers want: the seconds it took, or None."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        if charge(sock, api_key) == want:
            return time.monotonic() - t0
        time.sleep(0.01)
    return None


def log_lines(path, start):
    with open(path, errors="replace") as f:
        f.seek(start)
        return f.read()


def main():
    sock, holder, conf, keys, events, log = sys.argv[1:7]
    holder = int(holder)
    with open(conf) as f:
        conf_text = f.read()
    state = {"key": OLD, "stop": False}
    results = []
    lock = threading.Lock()

    def client():
        while not state["stop"]:
            st = charge(sock, state["key"])
            with lock:
                results.append(st)

    ts = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for t in ts:
        t.start()
    try:
        time.sleep(0.5)
        # 1. the new key beside the old one
        write_keys(keys, [OLD, NEW])
        t0 = time.monotonic()
        os.kill(holder, signal.SIGHUP)
        dt = until(sock, NEW, 201)
        tap(dt is not None and dt <= WITHIN_S,
            "keys rotated under load: the new key is accepted %s after SIGHUP (within %.0f s)"
            % ("%.0f ms" % (dt * 1000) if dt is not None else "never", WITHIN_S))
        state["key"] = NEW
        time.sleep(0.5)
        # 2. the old key removed
        write_keys(keys, [NEW])
        os.kill(holder, signal.SIGHUP)
        dt = until(sock, OLD, 401)
        tap(dt is not None and dt <= WITHIN_S,
            "... and the old one refused (401) %s after its removal and SIGHUP (within %.0f s)"
            % ("%.0f ms" % (dt * 1000) if dt is not None else "never", WITHIN_S))
        time.sleep(0.3)
        # 3. a bad file
        start = os.path.getsize(log)
        write_conf(conf, conf_text + "max_wait_s = forever\n")
        hup(holder, events)
        text = log_lines(log, start)
        bad = [ln for ln in text.splitlines() if "reload refused" in ln]
        tap(len(bad) == 1 and "max_wait_s" in bad[0] and charge(sock, NEW) == 201,
            "a bad file: refused with one log line naming the key, the configuration in force stays",
            text)
        # 4. a key that cannot change live
        start = os.path.getsize(log)
        write_conf(conf, conf_text.replace("provider_secret = reload-one",
                                           "provider_secret = reload-two"))
        hup(holder, events)
        text = log_lines(log, start)
        bad = [ln for ln in text.splitlines() if "reload refused" in ln]
        tap(len(bad) == 1 and "provider_secret cannot change while running" in bad[0]
            and charge(sock, NEW) == 201 and charge(sock, OLD) == 401,
            "provider_secret changed: refused with one log line naming it, the configuration in force stays",
            text)
        write_conf(conf, conf_text)
    finally:
        state["stop"] = True
        for t in ts:
            t.join()
    failed = [st for st in results if st != 201]
    tap(len(results) > 0 and not failed,
        "0 failed requests under load across the reloads (%d answered, %d not 201)"
        % (len(results), len(failed)), "statuses: %r" % sorted(set(failed)))
    tap(count(events, "reloaded") >= 4 and count(events, "error") == 0,
        "every SIGHUP: RELOADING=1, then READY=1 on NOTIFY_SOCKET (%d)" % count(events, "reloaded"))


if __name__ == "__main__":
    main()
