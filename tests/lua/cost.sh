#!/usr/bin/env bash
# Redis CPU per script call: runs N calls of each script path on a private
# redis-server started from conf/redis.conf (listpack settings included; no
# AOF, so the disk does not wait in the loop) and prints usec_per_call of
# EVALSHA from INFO commandstats, the minimum over ROUNDS rounds:
#   floor         a two-command script (HSET of one field + PEXPIRE), the
#                 cheapest a Redis-backed claim or record can be
#   claim_fresh   claim.lua on a new key
#   record        record.lua by the claim's owner (inline body)
#   claim_replay  claim.lua on a recorded key
# and the MEMORY USAGE of one completed record.
# Usage: tests/lua/cost.sh [N] [ROUNDS]     (default 20000 calls, 5 rounds)
set -eu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
N=${1:-20000}
ROUNDS=${2:-5}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/charge-cost.XXXXXX")
PID=
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT
redis-server "$ROOT/conf/redis.conf" --dir "$DIR" --unixsocket "$DIR/redis.sock" \
	--pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log" --appendonly no &
PID=$!
for _ in $(seq 1 100); do
	[ "$(redis-cli -s "$DIR/redis.sock" PING 2>/dev/null)" = PONG ] && break
	sleep 0.05
done
python3 - "$DIR/redis.sock" "${CHARGE_LUA_DIR:-$ROOT/lua}" "$N" "$ROUNDS" <<'PY'
import os, re, socket, sys

sock, luadir, n, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_UNIX)
s.connect(sock)
f = s.makefile("rb")


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read():
    line = f.readline()
    t, rest = line[:1], line[1:-2]
    if t in b"+:":
        return rest
    if t == b"-":
        raise SystemExit("redis: %s" % rest.decode())
    if t == b"$":
        k = int(rest)
        return None if k < 0 else f.read(k + 2)[:-2]
    if t == b"*":
        return [read() for _ in range(int(rest))]
    raise SystemExit("bad reply %r" % line)


def cmd(*a):
    s.sendall(enc(*a))
    return read()


def batch(cmds):
    for i in range(0, len(cmds), 500):
        chunk = cmds[i:i + 500]
        s.sendall(b"".join(enc(*c) for c in chunk))
        for _ in chunk:
            read()


def usec_per_call():
    info = cmd("INFO", "commandstats").decode()
    return float(re.search(r"cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)", info).group(1))


sha = {name: cmd("SCRIPT", "LOAD", open(os.path.join(luadir, name + ".lua")).read()).decode()
       for name in ("claim", "record")}
sha["floor"] = cmd("SCRIPT", "LOAD", "redis.call('HSET', KEYS[1], 'state', ARGV[1])\n"
                   "redis.call('PEXPIRE', KEYS[1], ARGV[2])\nreturn 1\n").decode()
fp = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
params = "3b5d2f1a9c0e4d7b11a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4"
now = 1763740800123
body = ('{"id":"ch_0123456789abcdef01234567","object":"charge","status":"succeeded",'
        '"amount":1999,"currency":"usd","source":"tok_visa","customer":null,'
        '"description":null,"metadata":{},"line_items":[],"created":1763740800,'
        '"idempotency_key":"order-%06d"}')
best = {}
mem = None
for rnd in range(rounds):
    cmd("FLUSHALL")
    keys = ["charge:idem:demo:order-%d-%06d" % (rnd, i) for i in range(n)]
    owners = [os.urandom(16).hex() for _ in range(n)]
    phases = [
        ("floor", [("EVALSHA", sha["floor"], "1", "bench:floor:%d:%d" % (rnd, i // 2),
                    "r%d" % (i % 2 + 1), "86400000") for i in range(2 * n)]),
        ("claim_fresh", [("EVALSHA", sha["claim"], "1", keys[i], fp, owners[i], str(now),
                          "30000", params) for i in range(n)]),
        ("record", [("EVALSHA", sha["record"], "1", keys[i], owners[i], fp, params, "completed",
                     "201", "application/json", "", "86400000", str(now + 5),
                     str(now + 5 + 86400000), "inline",
                     body % i) for i in range(n)]),
        ("claim_replay", [("EVALSHA", sha["claim"], "1", keys[i], fp, "b" * 32, str(now + 9),
                           "30000", params) for i in range(n)]),
    ]
    for name, cmds in phases:
        cmd("CONFIG", "RESETSTAT")
        batch(cmds)
        u = usec_per_call()
        best[name] = min(best.get(name, u), u)
    mem = int(cmd("MEMORY", "USAGE", keys[0]))
for name in ("floor", "claim_fresh", "record", "claim_replay"):
    print("%-13s usec_per_call %6.2f" % (name, best[name]))
fresh = best["claim_fresh"] + best["record"]
print("fresh charge  %6.2f = %.2f x floor(2) (%.2f)" % (fresh, fresh / (2 * best["floor"]), 2 * best["floor"]))
print("replay        %6.2f = %.2f x floor(1) (%.2f)" % (best["claim_replay"], best["claim_replay"] / best["floor"], best["floor"]))
print("memory usage  %d bytes per completed record" % mem)
PY
