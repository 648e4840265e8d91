#!/usr/bin/env python3
"""Redis over TLS (run by tests/redis_tls/run.sh): the responder as a CGI
program per request against TLS-only Redis servers, a TLS cluster and TLS
sentinels; each refusal fails closed (503) with its cause in the log.

Environment: TLS_BIN, TLS_RUN, TLS_DIR (the trusted CA, server and client
certificates), TLS_OTHER (a CA the servers do not know), TLS_PORT,
TLS_PORT_MTLS, TLS_PORT_EXPIRED, TLS_PORT_PLAIN, TLS_CLUSTER_URL,
TLS_CLUSTER_PORTS, TLS_SENTINEL_URL, TLS_SENTINEL_PORTS, TLS_MASTER,
TLS_RECONCILE_BIN.
"""
import json
import os
import re
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tap  # noqa: E402
from tap import check, test  # noqa: E402

BIN = os.environ.get("TLS_BIN", "")
RUN = os.environ.get("TLS_RUN", "")
CERTS = os.environ.get("TLS_DIR", "")
OTHER = os.environ.get("TLS_OTHER", "")
PORT = int(os.environ.get("TLS_PORT", "0"))
PORT_MTLS = int(os.environ.get("TLS_PORT_MTLS", "0"))
PORT_EXPIRED = int(os.environ.get("TLS_PORT_EXPIRED", "0"))
PORT_PLAIN = int(os.environ.get("TLS_PORT_PLAIN", "0"))
CLUSTER_URL = os.environ.get("TLS_CLUSTER_URL", "")
CLUSTER_PORTS = [int(p) for p in os.environ.get("TLS_CLUSTER_PORTS", "").split()]
SENTINEL_URL = os.environ.get("TLS_SENTINEL_URL", "")
RECONCILE_BIN = os.environ.get("TLS_RECONCILE_BIN", "")
SIM_URL = os.environ.get("TLS_SIM_URL", "")
API_KEY = os.environ.get("HA_API_KEY", "")
PRINCIPAL = os.environ.get("HA_PRINCIPAL", "ha")
RUN_ID = uuid.uuid4().hex[:8]
# the server's alert, or the reset that follows it when it overtakes it
CERT_REFUSED = r"TLS: (tlsv13 alert certificate required|tlsv1 alert unknown ca|.* \(did the server refuse the client certificate\?\))"

CONFIG = {
    "CHARGE_REDIS_URL": "rediss://localhost:%d" % PORT,
    "CHARGE_REDIS_TLS_CA_FILE": CERTS + "/ca.crt",
    "CHARGE_REDIS_TIMEOUT_MS": "1000",
    "CHARGE_API_KEYS_FILE": os.path.join(RUN, "api-keys"),
    "CHARGE_SPILL_DIR": os.path.join(RUN, "spill"),
    "CHARGE_PROVIDER_LEDGER": os.path.join(RUN, "ledger.log"),
    "CHARGE_METRICS_FILE": "none",
    "CHARGE_PROVIDER_LATENCY_MS": "0",
    "CHARGE_PROVIDER_TIMEOUT_MS": "300",
    "CHARGE_LOCK_TTL_S": "3",
    "CHARGE_LOG_LEVEL": "info",
}
SERVER_VARS = {
    "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_PROTOCOL": "HTTP/1.1",
    "SERVER_SOFTWARE": "test_tls.py", "SERVER_NAME": "127.0.0.1",
    "SERVER_PORT": "80", "REMOTE_ADDR": "127.0.0.1", "PATH": "/usr/bin:/bin",
}


class Resp:
    def __init__(self, raw, err):
        self.raw, self.err = raw, err.decode(errors="replace")
        head, _, self.body = raw.partition(b"\r\n\r\n")
        m = re.match(rb"Status: (\d{3})", head)
        self.status = int(m.group(1)) if m else 0
        self.head = head.decode(errors="replace")

    def __repr__(self):
        return "status %s, body %r, log %r" % (self.status, self.body[:200], self.err[-400:])


def post(key, body, conf=None):
    e = dict(SERVER_VARS)
    e.update(CONFIG)
    e.update(conf or {})
    e.update({"REQUEST_METHOD": "POST", "REQUEST_URI": "/charge", "SCRIPT_NAME": "/charge",
              "QUERY_STRING": "", "CONTENT_TYPE": "application/json",
              "CONTENT_LENGTH": str(len(body)), "HTTP_AUTHORIZATION": "Bearer " + API_KEY,
              "HTTP_IDEMPOTENCY_KEY": key})
    p = subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in e.items()] + [BIN],
                       input=body, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return Resp(p.stdout, p.stderr)


def get(uri, conf=None):
    e = dict(SERVER_VARS)
    e.update(CONFIG)
    e.update(conf or {})
    e.update({"REQUEST_METHOD": "GET", "REQUEST_URI": uri, "SCRIPT_NAME": uri, "QUERY_STRING": ""})
    p = subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in e.items()] + [BIN],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    return Resp(p.stdout, p.stderr)


def body(amount=1999):
    return json.dumps({"amount": amount, "currency": "usd", "source": "tok_visa"}).encode()


def new_key(tag):
    return "tls-%s-%s-%s" % (RUN_ID, tag, uuid.uuid4().hex[:8])


def cli(port, *args, tls=True):
    pre = ["--tls", "--cacert", CERTS + "/ca.crt", "--cert", CERTS + "/client.crt",
           "--key", CERTS + "/client.key"] if tls else []
    p = subprocess.run(["redis-cli"] + pre + ["--raw", "-h", "127.0.0.1", "-p", str(port)] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
    return p.stdout.decode(errors="replace")


def rkey(key):
    return "charge:idem:%s:%s" % (PRINCIPAL, key)


def refused(conf, cause, tag):
    """A charge with conf: 503, nothing stored, cause (a regex) in an error
    log line."""
    r = post(new_key(tag), body(), conf)
    check(r.status == 503, "not a 503: %r" % r)
    lines = [ln for ln in r.err.splitlines() if " error " in ln and re.search(cause, ln)]
    check(lines, "no log line says %r: %r" % (cause, r.err[-600:]))
    check(len(cli(PORT, "KEYS", "charge:idem:*%s*" % tag).split()) == 0, "something was stored")
    return r


@test("the TLS-only Redis answers no plain text on its port")
def t_plain_closed():
    out = cli(PORT, "PING", tls=False)
    check("PONG" not in out, "a plain-text PONG: %r" % out)
    check("PONG" in cli(PORT, "PING"), "no PONG over TLS")


@test("rediss://localhost: a fresh charge 201, its replay byte-identical, 422 on another body")
def t_single():
    key = new_key("single")
    r1 = post(key, body(2500))
    check(r1.status == 201, "fresh: %r" % r1)
    check(cli(PORT, "HGET", rkey(key), "state").strip() == "completed", "no record over TLS")
    r2 = post(key, body(2500))
    check(r2.status == 201 and r2.body == r1.body and "Idempotent-Replayed: true" in r2.head,
          "replay %r of %r" % (r2, r1))
    r3 = post(key, body(2501))
    check(r3.status == 422, "not a 422: %r" % r3)


@test("rediss://127.0.0.1 (the certificate's IP address) with a client certificate the server asks for")
def t_ip_mtls():
    r = post(new_key("mtls"), body(), {
        "CHARGE_REDIS_URL": "rediss://127.0.0.1:%d" % PORT_MTLS,
        "CHARGE_REDIS_TLS_CERT_FILE": CERTS + "/client.crt",
        "CHARGE_REDIS_TLS_KEY_FILE": CERTS + "/client.key"})
    check(r.status == 201, "%r" % r)


@test("refused: a CA the responder does not trust (503, the cause logged)")
def t_unknown_ca():
    refused({"CHARGE_REDIS_TLS_CA_FILE": OTHER + "/ca.crt"}, "certificate verify failed", "unknownca")


@test("/readyz: 200 over verified TLS, 503 (Redis unreachable) with a CA it does not trust; /healthz (liveness) 200 either way")
def t_readyz():
    r = get("/readyz")
    check(r.status == 200, "%r" % r)
    r = get("/healthz", {"CHARGE_REDIS_TLS_CA_FILE": OTHER + "/ca.crt"})
    check(r.status == 200, "%r" % r)
    r = get("/readyz", {"CHARGE_REDIS_TLS_CA_FILE": OTHER + "/ca.crt"})
    check(r.status == 503 and b"unreachable" in r.body, "%r" % r)
    check("certificate verify failed" in r.err, "%r" % r)


@test("refused: the system's store does not know the test CA either")
def t_system_store():
    refused({"CHARGE_REDIS_TLS_CA_FILE": ""}, "certificate verify failed", "systemca")


@test("refused: a name the certificate does not carry (redis_tls_server_name)")
def t_wrong_name():
    refused({"CHARGE_REDIS_TLS_SERVER_NAME": "redis.example.com"}, "hostname mismatch", "name")


@test("refused: an IP address the certificate does not carry (redis_tls_server_name 127.0.0.9)")
def t_wrong_ip():
    refused({"CHARGE_REDIS_TLS_SERVER_NAME": "127.0.0.9"}, "IP address mismatch", "ip")


@test("refused: an expired certificate")
def t_expired():
    refused({"CHARGE_REDIS_URL": "rediss://localhost:%d" % PORT_EXPIRED}, "certificate has expired", "expired")


@test("refused: a plain-text Redis on the port, never plain text instead")
def t_plain_server():
    r = refused({"CHARGE_REDIS_URL": "rediss://u:pw@localhost:%d" % PORT_PLAIN,
                 "CHARGE_REDIS_TIMEOUT_MS": "300"}, "TLS: ", "plainsrv")
    check("speak TLS" in r.err, "the log does not say the server may not speak TLS: %r" % r.err[-400:])
    check(cli(PORT_PLAIN, "KEYS", "*", tls=False).strip() == "", "something reached the plain Redis")
    # not a command of ours ran there: no AUTH (the password), no set-up, no script
    stats = cli(PORT_PLAIN, "INFO", "commandstats", tls=False)
    leaked = [c for c in ("cmdstat_auth", "cmdstat_config", "cmdstat_evalsha", "cmdstat_eval:")
              if c in stats]
    check(not leaked, "plain text reached the server: %r" % leaked)


@test("refused: no client certificate where the server asks for one")
def t_no_client_cert():
    refused({"CHARGE_REDIS_URL": "rediss://localhost:%d" % PORT_MTLS}, CERT_REFUSED, "nocert")


@test("refused: a client certificate of a CA the server does not know")
def t_bad_client_cert():
    refused({"CHARGE_REDIS_URL": "rediss://localhost:%d" % PORT_MTLS,
             "CHARGE_REDIS_TLS_CERT_FILE": OTHER + "/client.crt",
             "CHARGE_REDIS_TLS_KEY_FILE": OTHER + "/client.key"}, CERT_REFUSED, "othercert")


@test("redis_tls_verify = 0 accepts the unknown CA (the operator's explicit choice)")
def t_verify_off():
    r = post(new_key("noverify"), body(), {"CHARGE_REDIS_TLS_CA_FILE": OTHER + "/ca.crt",
                                          "CHARGE_REDIS_TLS_VERIFY": "0"})
    check(r.status == 201, "%r" % r)


@test("--check-config prints the redis_tls_* keys and masks the rediss:// password")
def t_check_config():
    e = dict(CONFIG)
    e.update({"CHARGE_REDIS_URL": "rediss://u:sekrit@localhost:%d" % PORT,
              "CHARGE_REDIS_TLS_SERVER_NAME": "redis.internal", "PATH": "/usr/bin:/bin"})
    p = subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in e.items()] + [BIN, "--check-config"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    out = p.stdout.decode()
    check(p.returncode == 0, out)
    check("sekrit" not in out and "redis_url = rediss://u:********@localhost" in out, out)
    for k in ("redis_tls_ca_file = " + CERTS + "/ca.crt", "redis_tls_cert_file = ",
              "redis_tls_key_file = ", "redis_tls_server_name = redis.internal", "redis_tls_verify = 1"):
        check(k in out, "%r not in %s" % (k, out))


@test("rediss-cluster:// (tls-cluster yes): charges routed to every node, replays byte-identical")
def t_cluster():
    conf = {"CHARGE_REDIS_URL": CLUSTER_URL}
    keys = [new_key("cl%d" % i) for i in range(24)]
    first = {}
    for k in keys:
        r = post(k, body(), conf)
        check(r.status == 201, "%s: %r" % (k, r))
        first[k] = r
    per_node = [int(cli(p, "DBSIZE").strip() or 0) for p in CLUSTER_PORTS]
    check(all(n > 0 for n in per_node), "records per node %r" % per_node)
    r = post(keys[0], body(), conf)
    check(r.status == 201 and r.body == first[keys[0]].body, "replay %r" % r)


@test("rediss-sentinel:// (sentinels and nodes over TLS): a charge and its replay")
def t_sentinel():
    conf = {"CHARGE_REDIS_URL": SENTINEL_URL}
    key = new_key("sentinel")
    r1 = post(key, body(), conf)
    check(r1.status == 201, "%r" % r1)
    r2 = post(key, body(), conf)
    check(r2.status == 201 and r2.body == r1.body, "replay %r" % r2)


def reconcile(conf):
    e = dict(CONFIG)
    e.update(conf)
    e["PATH"] = "/usr/bin:/bin"
    p = subprocess.run(["env", "-i"] + ["%s=%s" % kv for kv in e.items()]
                       + [RECONCILE_BIN, "--since", "1h", "--json", "--quiet"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


@test("charge-reconcile against the TLS cluster: clean, then the record it misses, then a foreign CA refused")
def t_reconcile():
    conf = {"CHARGE_REDIS_URL": CLUSTER_URL, "CHARGE_PROVIDER_URL": SIM_URL,
            "CHARGE_PROVIDER_API_KEY": "sk_test_tls", "CHARGE_KEY_PREFIX": "rc:",
            "CHARGE_PROVIDER_TIMEOUT_MS": "2000", "CHARGE_PROVIDER_DEADLINE_MS": "4000",
            "CHARGE_LOCK_TTL_S": "10"}
    keys = [new_key("rc%d" % i) for i in range(6)]
    for k in keys:
        r = post(k, body(), conf)
        check(r.status == 201, "%s: %r" % (k, r))
    rc, out, err = reconcile(conf)
    check(rc == 0, "rc %d: %s %s" % (rc, out[-400:], err[-400:]))
    rkey0 = "rc:idem:%s:%s" % (PRINCIPAL, keys[0])
    gone = sum(int(o) for o in (cli(p, "DEL", rkey0).strip() for p in CLUSTER_PORTS) if o.isdigit())
    check(gone == 1, "the record of %s not deleted (%d)" % (keys[0], gone))
    rc, out, err = reconcile(conf)
    check(rc == 1 and keys[0] in out, "rc %d, the orphan not named: %s %s" % (rc, out[-600:], err[-300:]))
    bad = dict(conf)
    bad["CHARGE_REDIS_TLS_CA_FILE"] = OTHER + "/ca.crt"
    rc, out, err = reconcile(bad)
    check(rc == 2 and "certificate verify failed" in err, "rc %d: %s" % (rc, err[-400:]))


if __name__ == "__main__":
    sys.exit(tap.run("TLS_ONLY"))
