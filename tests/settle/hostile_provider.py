#!/usr/bin/env python3
"""hostile_provider.py - a scripted, Stripe-shaped payment provider for the
settle tests (tests/settle/). Python standard library only.

    python3 hostile_provider.py --port PORT [--api-key sk_test_hostile]

Listens on 127.0.0.1:PORT (threaded, HTTP/1.1 kept alive) and prints
"listening on 127.0.0.1:PORT" once it accepts.

The wire, as Stripe answers it:

  POST /v1/charges           form-encoded amount, currency, source,
                             [description], metadata[...]; Idempotency-Key.
                             200 charge object; 402 card_error with the
                             failed charge's id; 400/401/409 errors. Real
                             idempotency per key: the first delivery that
                             executes stores its answer, every later one
                             with the same parameters gets it again with
                             "Idempotent-Replayed: true" (other parameters:
                             400 idempotency_error; while the first one
                             still executes: 409 idempotency_key_in_use). A
                             delivery that was lost before it executed
                             leaves the key free: the next one executes.
  GET /v1/charges            the list API: created[gte|gt|lte|lt] (or
                             created=N), limit (1-100, default 10),
                             starting_after / ending_before; newest first;
                             {"object":"list","data":[...],"has_more":...}.
                             Strongly consistent.
  GET /v1/charges/search     query=metadata['k']:'v' [AND ...] (quoted
                             values unescaped as Stripe does), limit, page;
                             {"object":"search_result","data":[...],
                             "has_more":...,"next_page":...}. Eventually
                             consistent: a charge shows only search_lag_s
                             after it was created (POST /_config).
  GET /v1/charges/<id>       one charge.

The control API (no authorization; loopback only):

  POST /_script   {"rules": [RULE, ...], "replace": true}   -> {"ids": [...]}
  POST /_reset    {} clears the rules and the search lag;
                  {"everything": true} also the charges, keys and the log
  POST /_config   {"search_lag_s": 30, "keepalive": false,
                   "clock_offset_s": 150}: keepalive false answers
                  "Connection: close" and closes the idle kept connections
                  at once (every delivery on a fresh one); clock_offset_s
                  runs the provider's clock that far ahead (negative:
                  behind) of the machine's: every Date header and every
                  charge's created (and so the list's created filters);
                  list_delay_s: every page of the list takes that long
  POST /_seed     {"n": 150, "client_key": "order-1001", "amount": 1999,
                   "currency": "usd", "spread_s": 0}: n charges of other
                  principals under the same client key, created now (newer
                  than any before), or spread evenly over the last spread_s
                  seconds
  GET  /_log      every delivery, in order (?client_key=K, ?method=GET)
  GET  /_charges  every charge (?client_key=K, ?principal=P, ?request=DKEY)
  GET  /_health

A RULE scripts what happens to the deliveries it matches:

  {"method": "POST" | "GET" | "*",          default "POST"
   "path": "charges" | "list" | "search" | "retrieve" | null,
   "match": {"client_key": K, "principal": P, "source": S, "amount": N,
             "currency": C, "dkey": D,
             "reused": true},              every named field must match
                                           (reused: the delivery came on a
                                           kept connection)
   "first": 1, "last": null,               the rule's own count of the
                                           deliveries it matched: it acts
                                           on numbers first..last (null:
                                           every one from first on)
   "action": ACTION, ...its parameters}

Each rule counts every delivery it matches; the first rule (in order) whose
count is within first..last decides. The actions:

  normal          as the wire above (explicitly)
  drop            close the connection without executing or answering
  reset           send a TCP RST without executing or answering
  hang            hold the connection hang_s (default 3) seconds without
                  executing, then close it
  status          answer "status" (with "body", "content_type" or a
                  Stripe-shaped error for that status) without executing
  charge_drop     execute (or replay), then close without answering
  charge_reset    execute (or replay), then RST
  charge_hang     execute (or replay), then hold hang_s and close
  charge_status   execute (or replay), then answer "status" instead
  wrong_charge    create another charge (wrong_amount, default 1;
                  wrong_currency, default "jpy"; principal "mallory",
                  another charge_request) and answer 200 with it
  decline_no_id   execute as a decline that names no charge: 402
                  card_error without "charge" (stored for replays)
  decline         execute as a decline: a failed charge, 402 naming it
  slow            hold the delivery delay_s (default 1.2) seconds before
                  it arrives, then process it normally and answer
  execute_late    take the key at once (others get 409 in use), execute
                  after delay_s, then answer

Every action that executes a charge takes "created_offset_s": the charge
is stamped that many seconds after now (negative: before), as if it had
executed then (an earlier run of the request).

The log: one entry per delivery with its wall time "t" (Unix seconds,
float), "method", "path", "query", "client_key", "principal", "amount",
"currency", "source", "dkey", "charge_request", "conn" (the peer's
port), "conn_req" (the request's number on its connection), "reused"
(conn_req > 1), "rule" (id or null),
"action", "outcome" (executed, replayed, in_use, idempotency_error,
invalid, unauthorized, status, dropped, reset, hung, wrong_charge, listed,
searched, retrieved, not_found), "status" (the status answered, null when
none was), "charge" (the charge id it executed or answered), and "done"
(the wall time it finished).
"""

import argparse
import email.utils
import json
import re
import secrets
import socket
import struct
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()


class State:
    def __init__(self):
        self.api_key = "sk_test_hostile"
        self.clear(everything=True)

    def clear(self, everything=False):
        self.rules = []
        self.search_lag_s = 0.0
        self.keepalive = True
        self.clock_offset_s = 0.0
        self.list_delay_s = 0.0
        if everything:
            self.charges = []      # (seq, t, charge object), creation order
            self.by_id = {}
            self.keys = {}         # dkey -> {"params", "state", "status", "body"}
            self.log = []
            self.seq = 0
            self.rule_seq = 0


S = State()
CONNS = set()  # the handlers of open connections


def error_body(status, etype=None, code=None, message=None, extra=None):
    defaults = {
        400: ("invalid_request_error", "parameter_invalid", "Invalid request."),
        401: ("invalid_request_error", None, "Invalid API Key provided."),
        403: ("invalid_request_error", "forbidden", "Forbidden."),
        404: ("invalid_request_error", "resource_missing", "No such resource."),
        409: ("idempotency_error", "idempotency_key_in_use", "In use."),
        429: ("rate_limit_error", "lock_timeout", "Too many requests."),
    }
    d = defaults.get(status, ("api_error", None, "Something went wrong on our end."))
    err = {"type": etype or d[0], "message": message or d[2]}
    if code or d[1]:
        err["code"] = code or d[1]
    if extra:
        err.update(extra)
    return json.dumps({"error": err}).encode()


def new_charge(amount, currency, description, metadata, status="succeeded",
               decline_code=None, created_offset_s=0.0):
    """Creates and stores a charge; LOCK held. created_offset_s: stamped
    that long after now (negative: before), as if executed then."""
    S.seq += 1
    now = time.time() + float(created_offset_s)
    ok = status == "succeeded"
    c = {
        "id": "ch_" + secrets.token_hex(12),
        "object": "charge",
        "amount": amount,
        "amount_captured": amount if ok else 0,
        "amount_refunded": 0,
        "captured": ok,
        "created": int(now + S.clock_offset_s),
        "currency": currency,
        "description": description,
        "failure_code": None if ok else "card_declined",
        "failure_message": None if ok else "Your card was declined.",
        "livemode": False,
        "metadata": dict(metadata),
        "outcome": {"type": "authorized" if ok else "issuer_declined",
                    "reason": None if ok else (decline_code or "generic_decline")},
        "paid": ok,
        "refunded": False,
        "status": status,
    }
    S.charges.append((S.seq, now, c))
    S.by_id[c["id"]] = (S.seq, now, c)
    return c


def parse_form(body):
    fields, metadata = {}, {}
    for k, v in urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        m = re.fullmatch(r"metadata\[(.*)\]", k)
        if m:
            metadata[m.group(1)] = v
        else:
            fields[k] = v
    return fields, metadata


def rule_matches(rule, d):
    if rule["method"] != "*" and rule["method"] != d["method"]:
        return False
    if rule.get("path") and rule["path"] != d["path"]:
        return False
    for k, v in (rule.get("match") or {}).items():
        have = d.get(k)
        if k == "amount":
            try:
                have = int(have)
            except (TypeError, ValueError):
                return False
            v = int(v)
        if have != v:
            return False
    return True


def rule_pick(d):
    """The deciding rule for delivery d (every matching rule counts it); LOCK held."""
    chosen = None
    for r in S.rules:
        if not rule_matches(r, d):
            continue
        r["seen"] += 1
        n = r["seen"]
        if chosen is None and n >= r.get("first", 1) and (r.get("last") is None or n <= r["last"]):
            chosen = r
    return chosen


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hostile-provider/1"

    def log_message(self, fmt, *args):  # quiet: the log is /_log
        pass

    def date_time_string(self, timestamp=None):  # the Date header: our clock
        return email.utils.formatdate((timestamp or time.time()) + S.clock_offset_s, usegmt=True)

    def setup(self):
        super().setup()
        self.nreq = 0
        self.busy = False
        with LOCK:
            CONNS.add(self)

    def finish(self):
        with LOCK:
            CONNS.discard(self)
        try:
            super().finish()
        except OSError:
            pass

    # --- plumbing -----------------------------------------------------

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def answer(self, status, body, ctype="application/json", headers=None):
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Request-Id", "req_" + secrets.token_hex(7))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if not S.keepalive:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            self.close_connection = True
            return False
        return True

    def drop(self):
        self.close_connection = True

    def reset(self):
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def json_answer(self, obj, status=200):
        return self.answer(status, json.dumps(obj).encode())

    # --- routing ------------------------------------------------------

    def do_GET(self):
        self.busy = True
        self.nreq += 1
        try:
            u = urllib.parse.urlsplit(self.path)
            if u.path.startswith("/_"):
                return self.control("GET", u, b"")
            return self.provider("GET", u, b"")
        finally:
            self.busy = False

    def do_POST(self):
        self.busy = True
        self.nreq += 1
        try:
            u = urllib.parse.urlsplit(self.path)
            body = self.body()
            if u.path.startswith("/_"):
                return self.control("POST", u, body)
            return self.provider("POST", u, body)
        finally:
            self.busy = False

    # --- the control API ---------------------------------------------

    def control(self, method, u, body):
        q = dict(urllib.parse.parse_qsl(u.query))
        try:
            req = json.loads(body) if body else {}
        except ValueError:
            return self.json_answer({"error": "bad JSON"}, 400)
        with LOCK:
            if method == "GET" and u.path == "/_health":
                out = {"ok": True}
            elif method == "POST" and u.path == "/_script":
                if req.get("replace", True):
                    S.rules = []
                ids = []
                for r in req.get("rules", []):
                    S.rule_seq += 1
                    r = dict(r)
                    r.setdefault("method", "POST")
                    r["id"] = S.rule_seq
                    r["seen"] = 0
                    S.rules.append(r)
                    ids.append(r["id"])
                out = {"ids": ids}
            elif method == "POST" and u.path == "/_reset":
                S.clear(everything=bool(req.get("everything")))
                out = {"ok": True}
            elif method == "POST" and u.path == "/_config":
                if "search_lag_s" in req:
                    S.search_lag_s = float(req["search_lag_s"])
                if "clock_offset_s" in req:
                    S.clock_offset_s = float(req["clock_offset_s"])
                if "list_delay_s" in req:
                    S.list_delay_s = float(req["list_delay_s"])
                if "keepalive" in req:
                    S.keepalive = bool(req["keepalive"])
                    if not S.keepalive:  # idle kept connections close now
                        for h in list(CONNS):
                            if not h.busy:
                                try:
                                    h.connection.shutdown(socket.SHUT_RDWR)
                                except OSError:
                                    pass
                out = {"search_lag_s": S.search_lag_s, "keepalive": S.keepalive,
                       "clock_offset_s": S.clock_offset_s, "list_delay_s": S.list_delay_s}
            elif method == "POST" and u.path == "/_seed":
                ids = []
                for i in range(int(req.get("n", 1))):
                    md = {"charge_principal": "%s-%d" % (req.get("principal", "other"), i),
                          "charge_idempotency_key": req.get("client_key", "order-1001"),
                          "charge_request": "charge_" + secrets.token_hex(32)}
                    # spread_s: created evenly over the last spread_s seconds
                    back = float(req.get("spread_s", 0)) * (1 - (i + 1) / float(req.get("n", 1)))
                    c = new_charge(int(req.get("amount", 1999)), req.get("currency", "usd"), None, md,
                                   created_offset_s=-back)
                    ids.append(c["id"])
                out = {"ids": ids}
            elif method == "GET" and u.path == "/_log":
                out = {"log": [e for e in S.log
                               if ("client_key" not in q or e.get("client_key") == q["client_key"])
                               and ("method" not in q or e["method"] == q["method"])]}
            elif method == "GET" and u.path == "/_charges":
                cs = []
                for _, t, c in S.charges:
                    md = c["metadata"]
                    if "client_key" in q and md.get("charge_idempotency_key") != q["client_key"]:
                        continue
                    if "principal" in q and md.get("charge_principal") != q["principal"]:
                        continue
                    if "request" in q and md.get("charge_request") != q["request"]:
                        continue
                    cs.append(dict(c, _t=t))
                out = {"charges": cs}
            else:
                return self.json_answer({"error": "no such control route"}, 404)
        return self.json_answer(out)

    # --- the provider ---------------------------------------------------

    def provider(self, method, u, body):
        d = {"t": time.time(), "method": method, "query": u.query, "status": None,
             "charge": None, "rule": None, "action": "normal", "outcome": None,
             "conn": self.client_address[1], "conn_req": self.nreq, "reused": self.nreq > 1}
        if method == "POST" and u.path == "/v1/charges":
            d["path"] = "charges"
            fields, md = parse_form(body)
            d.update(client_key=md.get("charge_idempotency_key"), principal=md.get("charge_principal"),
                     charge_request=md.get("charge_request"), amount=fields.get("amount"),
                     currency=fields.get("currency"), source=fields.get("source"),
                     dkey=self.headers.get("Idempotency-Key"))
        elif method == "GET" and u.path == "/v1/charges":
            d["path"] = "list"
        elif method == "GET" and u.path == "/v1/charges/search":
            d["path"] = "search"
        elif method == "GET" and u.path.startswith("/v1/charges/"):
            d["path"] = "retrieve"
        else:
            d["path"] = u.path
        with LOCK:
            S.log.append(d)
            rule = rule_pick(d)
        if rule is not None:
            d["rule"] = rule["id"]
            d["action"] = rule["action"]
        try:
            self.act(d, rule or {"action": "normal"}, u, body)
        finally:
            d["done"] = time.time()

    def act(self, d, rule, u, body):
        a = rule["action"]
        if a == "drop":
            d["outcome"] = "dropped"
            return self.drop()
        if a == "reset":
            d["outcome"] = "reset"
            return self.reset()
        if a == "hang":
            d["outcome"] = "hung"
            time.sleep(float(rule.get("hang_s", 3)))
            return self.drop()
        if a == "status":
            d["outcome"] = "status"
            d["status"] = int(rule["status"])
            body_out = rule.get("body")
            if body_out is None:
                if d["status"] == 403 and rule.get("waf", True):
                    self.answer(403, b"<html><body><h1>403 Forbidden</h1></body></html>\n", "text/html")
                    return
                body_out = error_body(d["status"])
            elif isinstance(body_out, str):
                body_out = body_out.encode()
            else:
                body_out = json.dumps(body_out).encode()
            self.answer(d["status"], body_out, rule.get("content_type", "application/json"),
                        rule.get("headers"))
            return
        if a == "slow":
            time.sleep(float(rule.get("delay_s", 1.2)))
        if not self.authorized():
            d["outcome"] = "unauthorized"
            d["status"] = 401
            self.answer(401, error_body(401))
            return
        if d["path"] != "charges":
            return self.read_api(d, u)
        if a == "wrong_charge":
            with LOCK:
                c = new_charge(int(rule.get("wrong_amount", 1)), rule.get("wrong_currency", "jpy"), None,
                               {"charge_principal": rule.get("wrong_principal", "mallory"),
                                "charge_idempotency_key": d.get("client_key") or "order-1001",
                                "charge_request": "charge_" + secrets.token_hex(32)})
            d["outcome"] = "wrong_charge"
            d["charge"] = c["id"]
            d["status"] = 200
            self.answer(200, json.dumps(c).encode())
            return
        status, out, headers = self.execute(d, body, rule)
        if a == "charge_drop":
            return self.drop()
        if a == "charge_reset":
            return self.reset()
        if a == "charge_hang":
            time.sleep(float(rule.get("hang_s", 3)))
            return self.drop()
        if a == "charge_status":
            status = int(rule["status"])
            out = error_body(status)
            headers = {}
        d["status"] = status
        self.answer(status, out, headers=headers)

    def authorized(self):
        return self.headers.get("Authorization", "") == "Bearer " + S.api_key

    def execute(self, d, body, rule):
        """POST /v1/charges with real idempotency: (status, body, headers)."""
        fields, md = parse_form(body)
        dkey = d.get("dkey")
        params = (fields.get("amount"), fields.get("currency"), fields.get("source"),
                  fields.get("description"), tuple(sorted(md.items())))
        try:
            amount = int(fields.get("amount", ""))
        except ValueError:
            amount = 0
        currency = fields.get("currency", "")
        if amount < 1 or not re.fullmatch(r"[a-z]{3}", currency) or not fields.get("source"):
            d["outcome"] = "invalid"
            return 400, error_body(400, code="parameter_missing"), {}
        with LOCK:
            k = S.keys.get(dkey) if dkey else None
            if k is not None:
                if k["params"] != params:
                    d["outcome"] = "idempotency_error"
                    return 400, error_body(400, etype="idempotency_error", code="idempotency_error",
                                           message="Keys for idempotent requests can only be used with the same parameters they were first used with."), {}
                if k["state"] == "running":
                    d["outcome"] = "in_use"
                    return 409, error_body(409), {}
                d["outcome"] = "replayed"
                d["charge"] = k.get("charge")
                return k["status"], k["body"], {"Idempotent-Replayed": "true"}
            if dkey:
                k = S.keys[dkey] = {"params": params, "state": "running"}
        if rule["action"] == "execute_late":
            time.sleep(float(rule.get("delay_s", 1.2)))
        with LOCK:
            src = fields["source"]
            desc = fields.get("description")
            cid = None
            if rule["action"] == "decline_no_id":
                status = 402
                out = error_body(402, etype="card_error", code="card_declined",
                                 message="Your card was declined.", extra={"decline_code": "do_not_honor"})
            elif rule["action"] == "decline" or src.startswith("tok_chargeDeclined"):
                c = new_charge(amount, currency, desc, md, status="failed", decline_code="card_declined")
                cid = c["id"]
                status = 402
                out = error_body(402, etype="card_error", code="card_declined",
                                 message="Your card was declined.",
                                 extra={"decline_code": "card_declined", "charge": cid})
            else:
                c = new_charge(amount, currency, desc, md,
                               created_offset_s=rule.get("created_offset_s", 0.0))
                cid = c["id"]
                status = 200
                out = json.dumps(c).encode()
            if k is not None:
                k.update(state="done", status=status, body=out, charge=cid)
            d["outcome"] = "executed"
            d["charge"] = cid
        return status, out, {}

    def read_api(self, d, u):
        if d["path"] == "list" and S.list_delay_s > 0:
            time.sleep(S.list_delay_s)  # a busy account's page
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)

        def one(name, default=None):
            v = q.get(name)
            return v[0] if v else default

        try:
            limit = int(one("limit", "10"))
        except ValueError:
            limit = -1
        if limit < 1 or limit > 100:
            d["outcome"], d["status"] = "invalid", 400
            return self.answer(400, error_body(400, code="parameter_invalid_integer",
                                               message="limit must be between 1 and 100"))
        now = time.time()
        with LOCK:
            rows = sorted(S.charges, key=lambda r: (r[2]["created"], r[0]), reverse=True)
            if d["path"] == "retrieve":
                cid = urllib.parse.unquote(u.path.rsplit("/", 1)[1])
                hit = S.by_id.get(cid)
                if hit is None:
                    d["outcome"], d["status"] = "not_found", 404
                    return self.answer(404, error_body(404, message="No such charge: '%s'" % cid))
                d["outcome"], d["status"], d["charge"] = "retrieved", 200, cid
                return self.answer(200, json.dumps(hit[2]).encode())
            if d["path"] == "list":
                bounds = []
                for op, fn in (("gte", lambda c, v: c >= v), ("gt", lambda c, v: c > v),
                               ("lte", lambda c, v: c <= v), ("lt", lambda c, v: c < v)):
                    v = one("created[%s]" % op)
                    if v is not None:
                        try:
                            bounds.append((fn, int(v)))
                        except ValueError:
                            d["outcome"], d["status"] = "invalid", 400
                            return self.answer(400, error_body(400, code="parameter_invalid_integer"))
                if one("created") is not None:
                    bounds.append((lambda c, v: c == v, int(one("created"))))
                rows = [r for r in rows if all(fn(r[2]["created"], v) for fn, v in bounds)]
                after, before = one("starting_after"), one("ending_before")
                if after is not None or before is not None:
                    cid = after if after is not None else before
                    idx = [i for i, r in enumerate(rows) if r[2]["id"] == cid]
                    if cid not in S.by_id:
                        d["outcome"], d["status"] = "invalid", 400
                        return self.answer(400, error_body(400, code="resource_missing",
                                                           message="No such charge: '%s'" % cid))
                    if after is not None:
                        if idx:
                            rows = rows[idx[0] + 1:]
                        else:  # outside the range: everything older than it
                            seq, _, ref = S.by_id[cid]
                            rows = [r for r in rows if (r[2]["created"], r[0]) < (ref["created"], seq)]
                        page = rows[:limit]
                        more = len(rows) > limit
                    else:
                        if idx:
                            rows = rows[:idx[0]]
                        else:
                            seq, _, ref = S.by_id[cid]
                            rows = [r for r in rows if (r[2]["created"], r[0]) > (ref["created"], seq)]
                        page = rows[-limit:]
                        more = len(rows) > limit
                else:
                    page = rows[:limit]
                    more = len(rows) > limit
                d["outcome"], d["status"] = "listed", 200
                d["count"] = len(page)
                return self.answer(200, json.dumps({"object": "list", "url": "/v1/charges",
                                                    "has_more": more,
                                                    "data": [r[2] for r in page]}).encode())
            # search
            clauses = parse_search(one("query", ""))
            if clauses is None:
                d["outcome"], d["status"] = "invalid", 400
                return self.answer(400, error_body(400, code="parameter_invalid_string",
                                                   message="Invalid search query."))
            rows = [r for r in rows if now - r[1] >= S.search_lag_s and all(m(r[2]) for m in clauses)]
            page_tok = one("page")
            start = 0
            if page_tok:
                m = re.fullmatch(r"page_(\d+)", page_tok)
                if not m:
                    d["outcome"], d["status"] = "invalid", 400
                    return self.answer(400, error_body(400, message="Invalid page."))
                start = int(m.group(1))
            page = rows[start:start + limit]
            more = len(rows) > start + limit
            d["outcome"], d["status"] = "searched", 200
            d["count"] = len(page)
            return self.answer(200, json.dumps({"object": "search_result", "url": "/v1/charges/search",
                                                "has_more": more,
                                                "next_page": "page_%d" % (start + limit) if more else None,
                                                "data": [r[2] for r in page]}).encode())


def parse_search(query):
    """Stripe's search language, the subset used here: clauses
    field:'value' (or "value") joined by AND; field is metadata['k'],
    amount, currency or status. Quoted values are unescaped (\\' \\" \\\\).
    A list of predicates, or None when the query does not parse."""
    preds = []
    s = query.strip()
    pos = 0
    tok = re.compile(r"""\s*(metadata\[(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\]|amount|currency|status)\s*:\s*"""
                     r"""(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|(\d+))\s*""")

    def unesc(v):
        return re.sub(r"\\(.)", r"\1", v)
    while True:
        m = tok.match(s, pos)
        if not m:
            return None
        field = m.group(1)
        mkey = m.group(2) if m.group(2) is not None else m.group(3)
        val = next(g for g in (m.group(4), m.group(5), m.group(6)) if g is not None)
        val = unesc(val)
        if mkey is not None:
            k = unesc(mkey)
            preds.append(lambda c, k=k, v=val: c["metadata"].get(k) == v)
        elif field == "amount":
            preds.append(lambda c, v=val: str(c["amount"]) == v)
        else:
            preds.append(lambda c, f=field, v=val: c.get(f) == v)
        pos = m.end()
        if pos >= len(s):
            return preds
        m2 = re.compile(r"AND\s+").match(s, pos)
        if not m2:
            return None
        pos = m2.end()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    ap = argparse.ArgumentParser(description="a scripted, hostile Stripe-shaped provider")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--api-key", default="sk_test_hostile")
    args = ap.parse_args()
    S.api_key = args.api_key
    srv = Server(("127.0.0.1", args.port), Handler)
    print("listening on 127.0.0.1:%d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
