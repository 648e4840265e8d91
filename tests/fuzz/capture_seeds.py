#!/usr/bin/env python3
"""capture_seeds.py SIM_BIN OUT_DIR - records what the provider peers really
send, as seed corpora for tests/fuzz (the files committed under
tests/fuzz/seeds/ came from this script; run it again to refresh them).

Starts charge-provider-sim (SIM_BIN) and, when tests/stripe_mock/node_modules
is installed (npm ci), stripe-stateful-mock on 127.0.0.1, sends them the
requests the responder sends (POST /v1/charges as a form, GET /v1/charges),
and writes each answer's raw bytes (status line, headers, body, as read from
the socket) to OUT_DIR/http1/ and its body to OUT_DIR/wire/; the simulator's
signed webhook deliveries (Stripe-Signature NUL body) to OUT_DIR/sig/; the
answers tests/lib/http_proxy.py gives to CONNECT to OUT_DIR/http1/.
Python standard library only; every process it starts is stopped."""
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SIM_KEY = "sk_test_fuzz"
WEBHOOK_SECRET = "whsec_fuzz_seed"  # fuzz_sig.c's first secret
REQUEST = "charge_" + "5f" * 32  # a downstream key's shape


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, deadline_s=10):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("nothing listens on %d" % port)


def raw_exchange(port, request):
    """Sends request, reads until the peer's answer is whole (by its
    Content-Length) or it closes; the bytes as received."""
    s = socket.create_connection(("127.0.0.1", port), 10)
    s.settimeout(10)
    s.sendall(request)
    data = b""
    while True:
        try:
            piece = s.recv(65536)
        except socket.timeout:
            break
        if not piece:
            break
        data += piece
        head, sep, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        if sep and m and len(body) >= int(m.group(1)):
            break
        if sep and head.startswith(b"HTTP/1.1 200 Connection") and not m:
            break
    s.close()
    return data


def form(fields):
    from urllib.parse import quote
    return "&".join("%s=%s" % (quote(k, safe=""), quote(v, safe="")) for k, v in fields).encode()


def post_charge(port, key, token, amount, idem):
    body = form([("amount", str(amount)), ("currency", "usd"), ("source", token),
                 ("description", "fuzz seed"), ("metadata[charge_principal]", "demo"),
                 ("metadata[charge_idempotency_key]", idem),
                 ("metadata[charge_request]", REQUEST)])
    head = ("POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
            "Idempotency-Key: %s\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            "Content-Length: %d\r\n\r\n" % (port, key, "charge_" + idem, len(body)))
    return raw_exchange(port, head.encode() + body)


def get(port, key, path):
    head = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n\r\n"
            % (path, port, key))
    return raw_exchange(port, head.encode())


def save(out, sub, name, data):
    os.makedirs(os.path.join(out, sub), exist_ok=True)
    with open(os.path.join(out, sub, name), "wb") as f:
        f.write(data)


def save_answer(out, name, raw):
    save(out, "http1", name, raw)
    save(out, "wire", name, raw.partition(b"\r\n\r\n")[2])


class Receiver(threading.Thread):
    """A webhook endpoint: keeps (Stripe-Signature, body) of each POST, answers 200."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.got = []

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            c.settimeout(5)
            data = b""
            try:
                while True:
                    head, sep, body = data.partition(b"\r\n\r\n")
                    m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                    if sep and m and len(body) >= int(m.group(1)):
                        break
                    piece = c.recv(65536)
                    if not piece:
                        break
                    data += piece
                sig = re.search(rb"(?im)^stripe-signature:\s*([^\r\n]*)", head)
                if sig:
                    self.got.append((sig.group(1), body))
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            c.close()


def sim_seeds(sim_bin, out, tmp):
    rx = Receiver()
    rx.start()
    port = free_port()
    p = subprocess.Popen([sim_bin, "--listen", "127.0.0.1:%d" % port, "--data",
                          os.path.join(tmp, "sim.data"), "--secret-key", SIM_KEY,
                          "--webhook-url", "http://127.0.0.1:%d/hook" % rx.port,
                          "--webhook-secret", WEBHOOK_SECRET, "--webhook-retry-ms", "50"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        save_answer(out, "sim-charge", post_charge(port, SIM_KEY, "tok_visa", 1999, "k1"))
        save_answer(out, "sim-replay", post_charge(port, SIM_KEY, "tok_visa", 1999, "k1"))
        save_answer(out, "sim-decline", post_charge(port, SIM_KEY, "tok_chargeDeclinedInsufficientFunds", 2500, "k2"))
        save_answer(out, "sim-idem-error", post_charge(port, SIM_KEY, "tok_visa", 3000, "k1"))
        save_answer(out, "sim-error-500", post_charge(port, SIM_KEY, "tok_providerError", 100, "k3"))
        save_answer(out, "sim-rate-limited", post_charge(port, SIM_KEY, "tok_providerRateLimited", 100, "k4"))
        save_answer(out, "sim-bad-key", post_charge(port, "sk_wrong", "tok_visa", 100, "k5"))
        save_answer(out, "sim-list", get(port, SIM_KEY, "/v1/charges?created%5Bgte%5D=0&limit=100"))
        save_answer(out, "sim-list-page", get(port, SIM_KEY, "/v1/charges?limit=1"))
        time.sleep(1)  # the webhook deliveries of the charges above
        for i, (sig, body) in enumerate(rx.got[:3]):
            save(out, "sig", "sim-event-%d" % i, sig + b"\0" + body)
    finally:
        p.terminate()
        p.wait(5)
        rx.sock.close()


def mock_seeds(out):
    mock = os.path.join(ROOT, "tests", "stripe_mock")
    if not os.path.isdir(os.path.join(mock, "node_modules", "stripe-stateful-mock")):
        print("# stripe-stateful-mock not installed (npm ci in tests/stripe_mock): skipped")
        return
    port = free_port()
    p = subprocess.Popen(["node", os.path.join(mock, "serve.js"), str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    key = "sk_test_fuzz_seed"
    try:
        wait_port(port, 30)
        save_answer(out, "mock-charge", post_charge(port, key, "tok_visa", 1999, "m1"))
        save_answer(out, "mock-decline", post_charge(port, key, "tok_chargeDeclined", 2500, "m2"))
        save_answer(out, "mock-decline-funds", post_charge(port, key, "tok_chargeDeclinedInsufficientFunds", 2600, "m3"))
        save_answer(out, "mock-429", post_charge(port, key, "tok_429", 100, "m4"))
        save_answer(out, "mock-500", post_charge(port, key, "tok_500", 100, "m5"))
        save_answer(out, "mock-list", get(port, key, "/v1/charges?limit=2"))
    finally:
        p.terminate()
        p.wait(5)


def proxy_seeds(out, tmp):
    lib = os.path.join(ROOT, "tests", "lib")
    for name, extra in (("proxy-connect-200", []), ("proxy-connect-403", ["--deny"]),
                        ("proxy-connect-407", ["--auth", "u:p"])):
        port = free_port()
        target = free_port()
        srv = socket.socket()
        srv.bind(("127.0.0.1", target))
        srv.listen(1)
        p = subprocess.Popen([sys.executable, os.path.join(lib, "http_proxy.py"), str(port),
                              os.path.join(tmp, "proxy.log")] + extra, cwd=lib,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port)
            req = "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (target, target)
            save(out, "http1", name, raw_exchange(port, req.encode()))
        finally:
            p.terminate()
            p.wait(5)
            srv.close()


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: capture_seeds.py SIM_BIN OUT_DIR")
    with tempfile.TemporaryDirectory() as tmp:
        sim_seeds(sys.argv[1], sys.argv[2], tmp)
        mock_seeds(sys.argv[2])
        proxy_seeds(sys.argv[2], tmp)


if __name__ == "__main__":
    main()
