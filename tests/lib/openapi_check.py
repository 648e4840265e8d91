"""openapi_check.py - checks real HTTP answers against docs/openapi.yaml.

    from openapi_check import Contract
    c = Contract()                                  # loads docs/openapi.yaml
    problems = c.check("POST", "/charge", 201, headers, body)
    c.uncovered()                                   # what no answer showed

check() finds the operation (method and path; a path that is no route
answers as x-charge-unknown-path, a method a route lacks as the path's
x-charge-method-not-allowed), then checks the answer against it:

  - the status is one the operation documents;
  - every required header of that response is present, and every
    documented header that is present matches its schema;
  - no header of the responder's own vocabulary (RESPONDER_HEADERS) is sent
    where the description does not list it;
  - the Content-Type is one of the response's media types, and a JSON body
    is valid against its schema; HEAD answers and responses without
    content have an empty body.

It returns a list of human-readable problems (empty: allowed) and records
what it saw, so that uncovered() can list the documented statuses and
problem types that no answer exercised.

The validator is Debian 12's python3-jsonschema (PINNED_JSONSCHEMA, JSON
Schema 2020-12 as OpenAPI 3.1 uses it) with python3-yaml: run this under
/usr/bin/python3. Anything else raises at load time, so that a result never
depends on whichever jsonschema a python on PATH happens to have.
"""
import importlib.metadata
import json
import os
import re

import yaml
import jsonschema

PINNED_JSONSCHEMA = "4.10.3"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DESCRIPTION_FILE = os.path.join(ROOT, "docs", "openapi.yaml")
METHODS = ("get", "head", "post", "put", "delete", "patch", "options", "trace")
# Headers only the responder sends (web servers add Date, Server, ...):
# present where the description does not list them, they are a violation.
RESPONDER_HEADERS = ("Idempotent-Replayed", "Idempotency-Key-Expires", "Retry-After",
                     "Allow", "WWW-Authenticate", "X-Request-Id", "Cache-Control")


class Contract:
    def __init__(self, path=DESCRIPTION_FILE):
        got = importlib.metadata.version("jsonschema")
        if got != PINNED_JSONSCHEMA:
            raise RuntimeError("openapi_check: jsonschema %s, want Debian 12's %s "
                               "(run under /usr/bin/python3 with python3-jsonschema)"
                               % (got, PINNED_JSONSCHEMA))
        with open(path, encoding="utf-8") as f:
            self.spec = yaml.safe_load(f)
        self.resolver = jsonschema.RefResolver.from_schema(self.spec)
        self.seen = set()           # (operation, status) and ("type", slug)
        self.routes = []            # (regex, path template)
        for tmpl in self.spec["paths"]:
            rx = "^" + re.sub(r"\\\{[^}]*\\\}", "(.*)", re.escape(tmpl)) + "$"
            self.routes.append((re.compile(rx), tmpl))

    # -- description ---------------------------------------------------------

    def deref(self, obj):
        while isinstance(obj, dict) and "$ref" in obj:
            _, obj = self.resolver.resolve(obj["$ref"])
        return obj

    def operation(self, method, path):
        """(name, {status: response}) of the operation that answers."""
        path = path.split("?", 1)[0]
        for rx, tmpl in self.routes:
            if rx.match(path):
                item = self.spec["paths"][tmpl]
                op = item.get(method.lower())
                if op is not None:
                    return "%s %s" % (method.upper(), tmpl), op["responses"]
                return ("other methods on %s" % tmpl,
                        {"405": item["x-charge-method-not-allowed"]})
        return "unknown paths", {"404": self.spec["x-charge-unknown-path"]}

    def documented(self):
        """{operation: set of statuses} and the set of problem types."""
        ops = {"unknown paths": {"404"}}
        for tmpl, item in self.spec["paths"].items():
            for m in METHODS:
                if m in item:
                    ops["%s %s" % (m.upper(), tmpl)] = set(item[m]["responses"])
            ops["other methods on %s" % tmpl] = {"405"}
        types = set()
        for schema in self.spec["components"]["schemas"].values():
            t = schema.get("properties", {}).get("type", {})
            if isinstance(t, dict) and "const" in t:
                types.add(t["const"].rpartition("/")[2])
        return ops, types

    # -- one answer --------------------------------------------------------

    def validate(self, schema, value):
        v = jsonschema.Draft202012Validator(schema, resolver=self.resolver)
        errs = sorted(v.iter_errors(value), key=lambda e: list(e.path))
        return ["%s: %s" % ("/".join(str(p) for p in e.path) or "(root)", e.message[:200])
                for e in errs[:5]]

    def check(self, method, path, status, headers, body):
        """Problems of this answer (a list of strings; empty: allowed).
        headers: a mapping with case-insensitive get() (http.client's)."""
        opname, responses = self.operation(method, path)
        where = "%s -> %d" % (opname, status)
        resp = responses.get(str(status))
        if resp is None:
            return ["%s: status %d is not documented for %s (documented: %s)"
                    % (where, status, opname, ", ".join(sorted(responses)))]
        self.seen.add((opname, str(status)))
        resp = self.deref(resp)
        out = []
        hdefs = {k.lower(): self.deref(v) for k, v in resp.get("headers", {}).items()}
        for name, h in hdefs.items():
            val = headers.get(name)
            if val is None:
                if h.get("required"):
                    out.append("%s: header %s is missing" % (where, name))
                continue
            for e in self.validate(h.get("schema", {}), val):
                out.append("%s: header %s %r: %s" % (where, name, val, e))
        for name in RESPONDER_HEADERS:
            if name.lower() not in hdefs and headers.get(name) is not None:
                out.append("%s: header %s is sent but not documented for this answer"
                           % (where, name))
        content = resp.get("content")
        if method.upper() == "HEAD" or not content:
            if body:
                out.append("%s: a body of %d bytes where none is documented"
                           % (where, len(body)))
            return out
        ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
        media = {k.split(";")[0].strip().lower(): v for k, v in content.items()}
        if ctype not in media:
            out.append("%s: Content-Type %r, documented: %s"
                       % (where, headers.get("Content-Type"), ", ".join(content)))
            return out
        schema = media[ctype].get("schema", {})
        if ctype.endswith("json"):
            try:
                doc = json.loads(body)
            except ValueError as e:
                return out + ["%s: body is not JSON (%s): %r" % (where, e, body[:200])]
            if isinstance(doc, dict) and isinstance(doc.get("type"), str) and \
                    doc["type"].startswith("/problems/"):
                self.seen.add(("type", doc["type"].rpartition("/")[2]))
            out += ["%s: body %s" % (where, e) for e in self.validate(schema, doc)]
        else:
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError:
                return out + ["%s: body is not UTF-8" % where]
            out += ["%s: body %s" % (where, e) for e in self.validate(schema, text)]
        return out

    # -- coverage ----------------------------------------------------------

    def uncovered(self, exempt=()):
        """(statuses, types, operations): documented statuses and problem
        types that no checked answer had (exempt: names not to count), and
        "operation status" pairs not seen (for information)."""
        ops, types = self.documented()
        got_status = {s for (o, s) in self.seen if o != "type"}
        all_status = set().union(*ops.values())
        statuses = sorted(s for s in all_status - got_status if s not in exempt)
        missing_types = sorted(t for t in types
                               if ("type", t) not in self.seen and t not in exempt)
        # a 405 listed under an operation is answered to the other methods
        pairs = sorted("%s %s" % (o, s) for o, ss in ops.items() for s in ss
                       if (o, s) not in self.seen and not (s == "405" and " /" in o
                                                            and not o.startswith("other")))
        return statuses, missing_types, pairs
