#!/usr/bin/env python3
"""The responder's structured logs and the ids it sends on (issue 37).

tests/logs/run.sh starts Redis, charge-provider-sim with --request-log and
`charge --listen` (log_format json, log_level debug) and passes:
LOGS_SOCKET (the responder's FastCGI socket), LOGS_CHARGE_LOG (its
stderr), LOGS_SIM_LOG (the simulator's request log), LOGS_SIM_URL,
LOGS_API_KEY (principal alice), LOGS_SIM_KEY (provider_api_key),
CHARGE_PROVIDER_SECRET, CHARGE_PROVIDER_WEBHOOK_SECRET, LOGS_DOC
(docs/API.md, whose §20 table names the log's fields). Python standard
library; prints TAP.
"""
import json
import os
import re
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import fcgi  # noqa: E402
from tap import check, diag, run, test  # noqa: E402

SOCK = os.environ["LOGS_SOCKET"]
CHARGE_LOG = os.environ["LOGS_CHARGE_LOG"]
SIM_LOG = os.environ["LOGS_SIM_LOG"]
API_KEY = os.environ["LOGS_API_KEY"]
SECRETS = {
    "the client's API key": API_KEY,
    "provider_api_key": os.environ["LOGS_SIM_KEY"],
    "provider_secret": os.environ["CHARGE_PROVIDER_SECRET"],
    "provider_webhook_secret": os.environ["CHARGE_PROVIDER_WEBHOOK_SECRET"],
}
CARD = "4242424242424242"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TAG = uuid.uuid4().hex[:8]
HEX32 = re.compile(r"^[0-9a-f]{32}$")
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


def fields_documented():
    """The field names of docs/API.md's log table (<!-- check_logs:fields -->)."""
    with open(os.environ["LOGS_DOC"], encoding="utf-8") as f:
        text = f.read()
    block = text.split("<!-- check_logs:fields -->", 1)[1].split("\n\n", 1)[0]
    rows = [ln for ln in block.splitlines() if ln.startswith("| `")]
    return {re.match(r"\| `([a-z_]+)`", ln).group(1): ("always" in ln) for ln in rows}


def request(method, uri, body=b"", headers=None, api_key=API_KEY):
    """One request over FastCGI: (status, {header: value} lower-case, body)."""
    params = {
        "REQUEST_METHOD": method, "REQUEST_URI": uri, "SCRIPT_NAME": uri,
        "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    if api_key is not None:
        params["HTTP_AUTHORIZATION"] = "Bearer " + api_key
    for k, v in (headers or {}).items():
        params["HTTP_" + k.upper().replace("-", "_")] = v
    s = fcgi.connect(SOCK)
    try:
        fcgi.send_request(s, params, body)
        out, ended = fcgi.read_response(s)
    finally:
        s.close()
    check(ended, "the response ended (END_REQUEST)")
    head, _, rest = out.partition(b"\r\n\r\n")
    hdrs = {}
    for line in head.decode().split("\r\n"):
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(hdrs.get("status", "200").split()[0]), hdrs, rest


def charge(key, headers=None, source="tok_visa", description=None):
    body = {"amount": 1999, "currency": "usd", "source": source}
    if description is not None:
        body["description"] = description
    h = {"Idempotency-Key": key}
    h.update(headers or {})
    return request("POST", "/charge", json.dumps(body).encode(), h)


def log_lines(path):
    with open(path, encoding="utf-8", errors="strict") as f:
        return f.read().splitlines()


def sim_requests():
    return [json.loads(ln) for ln in log_lines(SIM_LOG)]


def sim_seen(x_request_id):
    """The simulator's POST /v1/charges deliveries carrying x_request_id."""
    return [e for e in sim_requests()
            if e["method"] == "POST" and e["path"] == "/v1/charges"
            and e["x_request_id"] == x_request_id]


def charge_log():
    """The responder's log lines, parsed (each must be one JSON object)."""
    out = []
    for n, ln in enumerate(log_lines(CHARGE_LOG), 1):
        try:
            out.append(json.loads(ln))
        except ValueError as e:
            raise AssertionError("line %d is not JSON (%s): %r" % (n, e, ln[:200]))
    return out


def wait_for(pred, what, secs=5.0):
    end = time.monotonic() + secs
    while True:
        got = pred()
        if got:
            return got
        check(time.monotonic() < end, "within %.0f s: %s" % (secs, what))
        time.sleep(0.05)


@test("a valid X-Request-Id and traceparent: returned, logged, and sent to the provider")
def t_valid():
    rid = "order-%s.attempt_1:a" % TAG
    st, h, body = charge("k-valid-%s" % TAG, {
        "X-Request-Id": rid,
        "traceparent": "00-%s-%s-01" % (TRACE, CLIENT_SPAN)})
    check(st == 201, "201: %r %r" % (st, body[:200]))
    check(h.get("x-request-id") == rid, "X-Request-Id returned as sent: %r" % h)
    seen = wait_for(lambda: sim_seen(rid), "the simulator logs the delivery")
    tp = seen[0]["traceparent"]
    m = TRACEPARENT.match(tp or "")
    diag("the simulator saw X-Request-Id %s, traceparent %s, answered Request-Id %s"
         % (seen[0]["x_request_id"], tp, seen[0]["request_id"]))
    check(m and m.group(1) == TRACE, "the same trace id at the provider: %r" % tp)
    check(m.group(2) != CLIENT_SPAN and m.group(2) != "0" * 16,
          "the responder's own span id as the parent: %r" % tp)
    check(m.group(3) == "01", "the flags kept: %r" % tp)
    lines = wait_for(lambda: [e for e in charge_log() if e.get("request_id") == rid
                              and "provider: attempt" in e["msg"]], "the attempt logged")
    e = lines[0]
    check(e.get("trace_id") == TRACE, "the attempt line carries trace_id: %r" % e)
    check(("Request-Id %s" % seen[0]["request_id"]) in e["msg"],
          "the provider's Request-Id in the attempt line: %r (sim: %s)" % (e["msg"], seen[0]["request_id"]))


@test("X-Request-Id at its edge: 64 bytes kept, 65 bytes / other bytes / empty replaced by a new id")
def t_request_id_edges():
    edge = ("e%s" % TAG).ljust(64, "x")
    st, h, _ = charge("k-edge-%s" % TAG, {"X-Request-Id": edge})
    check(st == 201 and h.get("x-request-id") == edge, "64 bytes kept: %r" % h.get("x-request-id"))
    check(sim_seen(edge) != [], "and sent on")
    for bad in (edge + "y", "has space %s" % TAG, "semi;%s" % TAG, "quote\"%s" % TAG):
        st, h, _ = charge("k-bad-%s-%d" % (TAG, len(bad)), {"X-Request-Id": bad})
        got = h.get("x-request-id", "")
        check(st == 201 and HEX32.match(got), "%r replaced by 32 hex: %r" % (bad, got))
        check(sim_seen(got) != [] and sim_seen(bad) == [], "the new id sent on, not %r" % bad)
    st, h, _ = request("GET", "/healthz", headers={"X-Request-Id": ""}, api_key=None)
    check(HEX32.match(h.get("x-request-id", "")), "empty: a new one: %r" % h)


@test("a malformed or missing traceparent starts a new trace, sent on and logged")
def t_trace_started():
    cases = {
        "none": None,
        "upper": "00-%s-%s-01" % (TRACE.upper(), CLIENT_SPAN),
        "zero": "00-%s-%s-01" % ("0" * 32, CLIENT_SPAN),
        "ff": "ff-%s-%s-01" % (TRACE, CLIENT_SPAN),
        "short": "00-%s-%s-01" % (TRACE[:-1], CLIENT_SPAN),
    }
    traces = set()
    for name, tp in cases.items():
        rid = "trace-%s-%s" % (name, TAG)
        h = {"X-Request-Id": rid}
        if tp is not None:
            h["traceparent"] = tp
        st, _, _ = charge("k-trace-%s-%s" % (name, TAG), h)
        check(st == 201, "%s: 201" % name)
        seen = wait_for(lambda: sim_seen(rid), "%s: delivered" % name)
        m = TRACEPARENT.match(seen[0]["traceparent"] or "")
        check(m and m.group(1) != TRACE and m.group(1) != "0" * 32,
              "%s: a new trace: %r" % (name, seen[0]["traceparent"]))
        logged = [e for e in charge_log() if e.get("request_id") == rid and "trace_id" in e]
        check(logged and logged[0]["trace_id"] == m.group(1),
              "%s: the log names the trace sent on: %r" % (name, logged[:1]))
        traces.add(m.group(1))
    check(len(traces) == len(cases), "each request its own trace: %d" % len(traces))


@test("several provider attempts: one line each with the provider's Request-Id")
def t_attempts():
    rid = "retry-%s" % TAG
    st, _, _ = charge("k-retry-%s" % TAG, {"X-Request-Id": rid},
                      source="tok_providerError|tok_visa|n%s" % TAG)
    diag("status %d" % st)
    seen = wait_for(lambda: sim_seen(rid) if len(sim_seen(rid)) >= 2 else None,
                    "two deliveries")
    lines = wait_for(lambda: [e for e in charge_log() if e.get("request_id") == rid
                              and "provider: attempt" in e["msg"]], "the attempts logged")
    check(len(lines) == len(seen), "one line per delivery: %d lines, %d deliveries"
          % (len(lines), len(seen)))
    for i, (e, d) in enumerate(zip(lines, seen), 1):
        check(e["msg"].startswith("provider: attempt %d: " % i), "attempt %d: %r" % (i, e["msg"]))
        check(("Request-Id %s" % d["request_id"]) in e["msg"],
              "attempt %d names Request-Id %s: %r" % (i, d["request_id"], e["msg"]))


@test("no secret, API key or card number in any log line (errors provoked)")
def t_no_secrets():
    # a wrong key that looks like a card, a card in the body, the key and
    # a card in places that get logged, a webhook with a bad signature
    request("POST", "/charge", b"{}", {"Idempotency-Key": "k-%s" % TAG}, api_key=CARD)
    charge("k-card-%s" % TAG, source="tok_visa", description="card %s" % CARD)
    charge("k-card2-%s" % TAG, source=CARD)
    request("POST", "/charge", ('{"amount":1,"currency":"usd","source":"%s"' % CARD).encode(),
            {"Idempotency-Key": "k-bad-json-%s" % TAG})
    request("POST", "/webhooks/provider", ('{"card":"%s"}' % CARD).encode(),
            {"Stripe-Signature": "t=%d,v1=%s" % (int(time.time()), "ab" * 32)}, api_key=None)
    request("GET", "/charge/keys/%s" % CARD, api_key=API_KEY)
    time.sleep(0.2)
    text = open(CHARGE_LOG, encoding="utf-8").read()
    for what, value in SECRETS.items():
        check(value not in text, "%s is not in the log" % what)
    check("Bearer" not in text and "Authorization" not in text, "no Authorization")
    check(CARD not in text, "the card number is not in the log")
    cards = [m.group(0) for m in re.finditer(r"(?<![0-9])[3-6][0-9]{14,15}(?![0-9])", text)
             if luhn(m.group(0))]
    check(cards == [], "no card-like (Luhn-valid 15/16-digit) number: %r" % cards)


def luhn(digits):
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


@test("every line of the log is one JSON object with the documented fields")
def t_json_lines():
    doc = fields_documented()
    check(set(doc) >= {"ts", "level", "pid", "msg", "request_id", "trace_id"},
          "docs/API.md §20 names the fields: %r" % doc)
    lines = charge_log()
    check(len(lines) >= 20, "lines were written: %d" % len(lines))
    ts = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
    for e in lines:
        check(isinstance(e, dict), "an object: %r" % e)
        check(set(e) <= set(doc), "only documented fields: %r" % sorted(set(e) - set(doc)))
        for k, always in doc.items():
            check(not always or k in e, "%s in every line: %r" % (k, e))
        check(ts.match(e["ts"]), "ts: %r" % e["ts"])
        check(e["level"] in ("error", "warn", "info", "debug"), "level: %r" % e["level"])
        check(isinstance(e["pid"], int) and isinstance(e["msg"], str), "pid, msg: %r" % e)
        check("trace_id" not in e or HEX32.match(e["trace_id"]), "trace_id: %r" % e)
    levels = {e["level"] for e in lines}
    diag("%d lines, levels %s" % (len(lines), sorted(levels)))
    check(any("provider: attempt" in e["msg"] for e in lines), "attempt lines among them")


@test("the simulator's request log: one JSON object per answered request")
def t_sim_log():
    entries = sim_requests()
    check(len(entries) >= 10, "requests logged: %d" % len(entries))
    for e in entries:
        check(set(e) == {"request_id", "method", "path", "status", "idempotency_key",
                         "x_request_id", "traceparent"}, "its fields: %r" % e)
        check(re.match(r"^req_[0-9a-f]+$", e["request_id"]), "Request-Id: %r" % e)


if __name__ == "__main__":
    sys.exit(run(only_env="LOGS_ONLY", prefix="logs: "))
