#!/usr/bin/env python3
"""The responder against the simulator behind TLS (run by
tests/provider_tls/run.sh through tests/provider_faults/run.sh).

Made here with the openssl command: a test CA, a server certificate it
signs for the name "localhost" only, and a second CA that signed nothing of
ours. nginx terminates TLS on 127.0.0.1 in front of the simulator (plain
HTTP behind it). Then:

  * provider_url https://localhost:PORT, provider_ca_file = the test CA:
    201, the replay byte for byte, one charge at the simulator;
  * the system store (provider_ca_file empty), another CA, and the right CA
    but a name the certificate does not carry (https://127.0.0.1:PORT):
    the certificate is refused: nothing reaches the simulator for the key,
    never a 201, only documented answers;
  * provider_tls_verify = 0, documented as "only for tests", turns
    verification off: the same certificate is then accepted;
  * plain HTTP to the TLS port: nothing charged, documented answers;
  * through a proxy from the environment (tests/lib/http_proxy.py, a small
    HTTP proxy on 127.0.0.1): https_proxy with user:password, a CONNECT
    tunnel, the certificate still verified: 201, the proxy saw the CONNECT
    with the credentials; a proxy that answers 403 to CONNECT, or refuses
    the connection: nothing reaches the simulator (the not-sent outcome);
    no_proxy naming the host: the proxy is passed by; http_proxy for an
    http:// provider: the request in absolute form through the proxy.
"""
import os
import signal
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "provider_faults"))
import provlib as P  # noqa: E402
from provlib import check, diag, test  # noqa: E402

PKI = os.path.join(P.RUN, "pki")
SIM = None
NGINX = None
TLS_PORT = None


def openssl(*args):
    p = subprocess.run(["openssl"] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    check(p.returncode == 0, "openssl %s: %s" % (" ".join(args), p.stdout.decode(errors="replace")[-800:]))


def make_ca(name):
    key, crt = os.path.join(PKI, name + ".key"), os.path.join(PKI, name + ".pem")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=charge test %s" % name,
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return key, crt


def make_pki():
    os.makedirs(PKI, exist_ok=True)
    ca_key, ca = make_ca("ca")
    make_ca("other-ca")
    key, csr, crt = (os.path.join(PKI, "server" + x) for x in (".key", ".csr", ".pem"))
    ext = os.path.join(PKI, "server.ext")
    with open(ext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
            "-out", crt, "-days", "2", "-extfile", ext)
    return key, crt


class Nginx:
    """nginx terminating TLS on 127.0.0.1:port, proxying to upstream."""

    def __init__(self, port, key, crt, upstream):
        self.dir = os.path.join(P.RUN, "nginx")
        tmp = os.path.join(self.dir, "tmp")
        os.makedirs(tmp, exist_ok=True)
        os.chmod(self.dir, 0o755)
        os.chmod(tmp, 0o777)
        self.conf = os.path.join(self.dir, "nginx.conf")
        user = "user nobody nogroup;\n" if os.getuid() == 0 else ""
        with open(self.conf, "w") as f:
            f.write("""# written by tests/provider_tls: TLS in front of the simulator
daemon off;
%(user)sworker_processes 1;
pid %(dir)s/nginx.pid;
error_log %(dir)s/nginx-error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %(tmp)s/body;
    proxy_temp_path %(tmp)s/proxy;
    fastcgi_temp_path %(tmp)s/fastcgi;
    uwsgi_temp_path %(tmp)s/uwsgi;
    scgi_temp_path %(tmp)s/scgi;
    server_tokens off;
    upstream sim {
        server %(upstream)s;
        keepalive 16;
    }
    server {
        listen 127.0.0.1:%(port)d ssl;
        server_name localhost;
        ssl_certificate %(crt)s;
        ssl_certificate_key %(key)s;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            proxy_pass http://sim;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 60s;
        }
    }
}
""" % dict(user=user, dir=self.dir, tmp=tmp, port=port, crt=crt, key=key, upstream=upstream))
        p = subprocess.run(["nginx", "-t", "-q", "-p", self.dir, "-c", self.conf, "-e",
                            os.path.join(self.dir, "nginx-error.log")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        check(p.returncode == 0, "nginx rejects %s: %s" % (self.conf, p.stdout.decode(errors="replace")))
        lf = open(os.path.join(self.dir, "nginx.stderr.log"), "wb")
        self.proc = subprocess.Popen(["nginx", "-p", self.dir, "-c", self.conf, "-e",
                                      os.path.join(self.dir, "nginx-error.log")],
                                     stdin=subprocess.DEVNULL, stdout=lf, stderr=lf, start_new_session=True)
        lf.close()
        with open(os.path.join(self.dir, "nginx.master.pid"), "w") as f:
            f.write("%d nginx\n" % self.proc.pid)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                P.https_get_ok("https://localhost:%d/_sim/stats" % port, os.path.join(PKI, "ca.pem"))
                return
            except OSError:
                check(self.proc.poll() is None, "nginx exited")
                time.sleep(0.1)
        raise P.Fail("nginx did not serve TLS on %d" % port)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)   # fast shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Proxy:
    """tests/lib/http_proxy.py on 127.0.0.1 (args: --deny, --auth U:P)."""

    def __init__(self, name, *args):
        self.port = P.free_port()
        self.log = os.path.join(P.RUN, "proxy-%s.log" % name)
        open(self.log, "w").close()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(REPO, "tests", "lib", "http_proxy.py"), str(self.port), self.log]
            + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
        line = self.proc.stdout.readline()
        check(line.strip() == b"listening", "http_proxy.py did not start: %r" % line)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def lines(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def setup():
    global SIM, NGINX, TLS_PORT
    key, crt = make_pki()
    SIM = P.Sim("tls")
    TLS_PORT = P.free_port()
    NGINX = Nginx(TLS_PORT, key, crt, "127.0.0.1:%d" % SIM.port)


def sim_side(key):
    sk = SIM.by_metadata().get((P.PRINCIPAL, key), [])
    return sum(x.get("charges", 0) for x in sk), sum(x.get("deliveries", 0) for x in sk)


def refused(name, answers=None, **cfg):
    """A stack whose provider certificate must be refused (or whose
    provider is out of reach). answers: the only statuses allowed."""
    st = P.Stack(name, procs=1, provider_api_key="sk_test_sim", **cfg)
    try:
        k = P.new_key(name)
        body = P.charge_body("tok_visa", amount=1234)
        seen = P.retry_until_final(st, k, body, time.monotonic() + 6, tag=name)
        check(not any(r.status == 201 for r in seen), "a 201 through a refused certificate: %r" % seen)
        charges, deliveries = sim_side(k)
        check(deliveries == 0 and charges == 0,
              "the simulator got %d deliveries (%d charges) through a refused certificate" % (deliveries, charges))
        bad = P.undocumented(seen)
        check(not bad, "\n".join(bad[:8]))
        check(answers is None or {r.status for r in seen} <= set(answers),
              "answers %s, expected only %r" % (P.statuses(seen), answers))
        code, j = P.key_state(st, k)
        check(code == 404 or j.get("state") != "completed", "the key: %d %r" % (code, j))
        log = st.log_text()
        diag("answers %s; the key: %s; responder log: %s" % (
            P.statuses(seen), j.get("state") if code == 200 else code,
            " | ".join(ln for ln in log.splitlines() if "certif" in ln.lower() or "tls" in ln.lower())[-300:]))
    finally:
        st.stop()


@test("TLS with the test CA (provider_ca_file): 201, the replay byte for byte, one charge at the simulator")
def t_tls_ok():
    st = P.Stack("tls-ca", procs=1, provider_url="https://localhost:%d" % TLS_PORT,
                 provider_ca_file=os.path.join(PKI, "ca.pem"), provider_api_key="sk_test_sim")
    try:
        k = P.new_key("tls")
        body = P.charge_body("tok_visa", amount=2222)
        r1 = P.post(st, k, body)
        check(r1.status == 201, "over TLS: %r" % r1)
        r2 = P.post(st, k, body)
        check(r2.status == 201 and r2.body == r1.body and r2.h("idempotent-replayed") == "true",
              "replay %r, first %r" % (r2, r1))
        charges, deliveries = sim_side(k)
        check(charges == 1 and deliveries == 1, "simulator: %d charges, %d deliveries" % (charges, deliveries))
        k2 = P.new_key("tls-decl")
        r3 = P.post(st, k2, P.charge_body("tok_chargeDeclined", amount=2223))
        check(r3.status == 402, "a decline over TLS: %r" % r3)
        bad = P.undocumented([r1, r2, r3])
        check(not bad, "\n".join(bad))
    finally:
        st.stop()


@test("TLS with the system store (provider_ca_file empty): the test CA's certificate is refused, nothing charged")
def t_tls_system_store():
    refused("tls-system", provider_url="https://localhost:%d" % TLS_PORT, provider_ca_file="")


@test("TLS with another CA: the certificate is refused, nothing charged")
def t_tls_other_ca():
    refused("tls-other", provider_url="https://localhost:%d" % TLS_PORT,
            provider_ca_file=os.path.join(PKI, "other-ca.pem"))


@test("TLS with the right CA but a name the certificate does not carry (https://127.0.0.1): refused")
def t_tls_wrong_name():
    refused("tls-name", provider_url="https://127.0.0.1:%d" % TLS_PORT,
            provider_ca_file=os.path.join(PKI, "ca.pem"))


@test("provider_tls_verify = 0 (documented: for tests only) with the system store: no verification, 201")
def t_tls_verify_off():
    st = P.Stack("tls-noverify", procs=1, provider_url="https://127.0.0.1:%d" % TLS_PORT,
                 provider_ca_file="", provider_tls_verify=0, provider_api_key="sk_test_sim")
    try:
        k = P.new_key("tls-noverify")
        r = P.post(st, k, P.charge_body("tok_visa", amount=3333))
        check(r.status == 201, "with provider_tls_verify = 0: %r" % r)
        charges, _ = sim_side(k)
        check(charges == 1, "simulator: %d charges" % charges)
    finally:
        st.stop()


@test("plain HTTP to the TLS port: no charge, documented answers")
def t_plain_to_tls():
    refused("tls-plain", provider_url="http://localhost:%d" % TLS_PORT)


@test("https_proxy (with user:password) to an https provider: a CONNECT tunnel, the certificate verified, 201")
def t_proxy_connect():
    px = Proxy("ok", "--auth", "user:p@ss")
    url = "https://localhost:%d" % TLS_PORT
    st = P.Stack("tls-proxy", procs=1, provider_url=url, provider_ca_file=os.path.join(PKI, "ca.pem"),
                 provider_api_key="sk_test_sim",
                 env_extra={"https_proxy": "http://user:p%%40ss@127.0.0.1:%d" % px.port})
    try:
        k = P.new_key("tls-proxy")
        r = P.post(st, k, P.charge_body("tok_visa", amount=4444))
        check(r.status == 201, "through the proxy: %r" % r)
        charges, deliveries = sim_side(k)
        check(charges == 1 and deliveries == 1, "simulator: %d charges, %d deliveries" % (charges, deliveries))
        seen = px.lines()
        check("CONNECT localhost:%d HTTP/1.1 -> 200" % TLS_PORT in seen, "the proxy saw: %r" % seen)
        diag("the proxy saw: %s" % " | ".join(seen))
    finally:
        st.stop()
        px.stop()
    # the same proxy, the certificate of the wrong name: still refused
    px = Proxy("name")
    try:
        refused("tls-proxy-name", provider_url="https://127.0.0.1:%d" % TLS_PORT,
                provider_ca_file=os.path.join(PKI, "ca.pem"), env_extra={"https_proxy": px.url})
        seen = px.lines()
        check(any(ln.startswith("CONNECT 127.0.0.1:%d " % TLS_PORT) for ln in seen), "the proxy saw: %r" % seen)
    finally:
        px.stop()


@test("https_proxy answering 403 to CONNECT: nothing reaches the provider (not sent), documented answers")
def t_proxy_denied():
    px = Proxy("deny", "--deny")
    try:
        # what an unreachable provider gets: 504 outcome-unknown (API.md §17.2)
        refused("tls-proxy-deny", answers=(504,), provider_url="https://localhost:%d" % TLS_PORT,
                provider_ca_file=os.path.join(PKI, "ca.pem"), env_extra={"https_proxy": px.url})
        seen = px.lines()
        check(seen and all(ln == "CONNECT localhost:%d HTTP/1.1 -> 403" % TLS_PORT for ln in seen),
              "the proxy saw: %r" % seen)
    finally:
        px.stop()


@test("https_proxy on a port nobody listens on: not sent, documented answers")
def t_proxy_refused():
    refused("tls-proxy-closed", answers=(504,), provider_url="https://localhost:%d" % TLS_PORT,
            provider_ca_file=os.path.join(PKI, "ca.pem"),
            env_extra={"HTTPS_PROXY": "http://127.0.0.1:%d" % P.free_port()})


@test("no_proxy naming the provider's host: the proxy (one that would refuse) is passed by, 201")
def t_proxy_bypassed():
    px = Proxy("bypass", "--deny")
    st = P.Stack("tls-noproxy", procs=1, provider_url="https://localhost:%d" % TLS_PORT,
                 provider_ca_file=os.path.join(PKI, "ca.pem"), provider_api_key="sk_test_sim",
                 env_extra={"https_proxy": px.url, "no_proxy": "example.com, .localhost"})
    try:
        r = P.post(st, P.new_key("tls-noproxy"), P.charge_body("tok_visa", amount=5555))
        check(r.status == 201, "with no_proxy: %r" % r)
        check(px.lines() == [], "the proxy saw: %r" % px.lines())
    finally:
        st.stop()
        px.stop()


@test("http_proxy to an http:// provider: the request in absolute form through the proxy, 201")
def t_proxy_plain():
    px = Proxy("plain")
    st = P.Stack("plain-proxy", procs=1, provider_url=SIM.url, provider_api_key="sk_test_sim",
                 env_extra={"http_proxy": px.url, "HTTP_PROXY": "http://127.0.0.1:9"})
    try:
        k = P.new_key("plain-proxy")
        r = P.post(st, k, P.charge_body("tok_visa", amount=6666))
        check(r.status == 201, "through the proxy: %r" % r)
        charges, _ = sim_side(k)
        check(charges == 1, "simulator: %d charges" % charges)
        seen = px.lines()
        check("POST %s/v1/charges HTTP/1.1 -> 200" % SIM.url in seen, "the proxy saw: %r" % seen)
    finally:
        st.stop()
        px.stop()


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        setup()
    except Exception as e:  # noqa: BLE001
        print("not ok 1 - provider_tls: set-up: %s" % e)
        if NGINX:
            NGINX.stop()
        P.stop_all()
        return 1
    try:
        return P.tap.run("PROV_ONLY")
    finally:
        P.stop_all()
        NGINX.stop()


if __name__ == "__main__":
    sys.exit(main())
