#!/usr/bin/env bash
# Redis CPU per script call, on a private redis-server started from
# conf/redis.conf (its listpack settings included; no AOF, so the disk does
# not wait in the loop), for each script path:
#   floor         a two-command script (HSET of one field + PEXPIRE), the
#                 cheapest a Redis-backed claim or record can be
#   claim_fresh   claim.lua on a new key
#   record        record.lua by the claim's owner (inline body of a charge)
#   claim_replay  claim.lua on a recorded key
# and the MEMORY USAGE of one completed record.
#
#   tests/lua/cost.sh [N] [ROUNDS]   usec_per_call of EVALSHA from INFO
#       commandstats, the minimum over ROUNDS rounds of N calls each
#       (default 20000, 5). Wall-clock: noisy on a shared machine.
#   tests/lua/cost.sh --instructions [N]   instructions Redis executes per
#       call (valgrind --tool=callgrind, hz 1, one dump per path; default
#       N 1000): everything Redis does for the call, reading the command and
#       writing the reply included. Repeatable to about 0.5 %.
set -eu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MODE=usec
if [ "${1:-}" = --instructions ]; then
	MODE=instructions
	shift
	N=${1:-1000}
	ROUNDS=1
else
	N=${1:-20000}
	ROUNDS=${2:-5}
fi
DIR=$(mktemp -d "${TMPDIR:-/tmp}/charge-cost.XXXXXX")
PID=
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT
RUNNER=()
if [ "$MODE" = instructions ]; then
	command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
	RUNNER=(valgrind -q --tool=callgrind "--callgrind-out-file=$DIR/cg.%p.out")
fi
"${RUNNER[@]}" redis-server "$ROOT/conf/redis.conf" --dir "$DIR" \
	--unixsocket "$DIR/redis.sock" --pidfile "$DIR/redis.pid" \
	--logfile "$DIR/redis.log" --appendonly no --hz 1 &
PID=$!
for _ in $(seq 1 300); do
	[ "$(redis-cli -s "$DIR/redis.sock" PING 2>/dev/null)" = PONG ] && break
	sleep 0.1
done
python3 - "$DIR" "${CHARGE_LUA_DIR:-$ROOT/lua}" "$N" "$ROUNDS" "$MODE" "$PID" "$ROOT" <<'PY'
import glob, os, re, socket, subprocess, sys

d, luadir, n, rounds, mode, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
sys.path.insert(0, os.path.join(sys.argv[7], "tests", "lib"))
import resp  # noqa: E402  (tests/lib: the Redis client)

s = socket.socket(socket.AF_UNIX)
s.connect(os.path.join(d, "redis.sock"))
f = s.makefile("rb")
enc = resp.encode


def read():
    return resp.read(f)


def cmd(*a):
    s.sendall(enc(*a))
    return read()


def batch(cmds):
    for i in range(0, len(cmds), 200):
        chunk = cmds[i:i + 200]
        s.sendall(b"".join(enc(*c) for c in chunk))
        for _ in chunk:
            read()


def usec_per_call():
    info = cmd("INFO", "commandstats").decode()
    return float(re.search(r"cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)", info).group(1))


def callgrind(*args):
    subprocess.run(["callgrind_control", *args, pid], capture_output=True, check=True)


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


def phases(tag, k):
    keys = ["charge:idem:demo:order-%s-%06d" % (tag, i) for i in range(k)]
    owners = [os.urandom(16).hex() for _ in range(k)]
    return [
        ("floor", [("EVALSHA", sha["floor"], "1", "bench:floor:%s:%d" % (tag, i // 2),
                    "r%d" % (i % 2 + 1), "86400000") for i in range(2 * k)], 2 * k),
        ("claim_fresh", [("EVALSHA", sha["claim"], "1", keys[i], fp, owners[i], str(now),
                          "30000", params) for i in range(k)], k),
        ("record", [("EVALSHA", sha["record"], "1", keys[i], owners[i], fp, params, "completed",
                     "201", "application/json", "", "86400000", str(now + 5),
                     str(now + 5 + 86400000), "inline", body % i) for i in range(k)], k),
        ("claim_replay", [("EVALSHA", sha["claim"], "1", keys[i], fp, "b" * 32, str(now + 9),
                           "30000", params) for i in range(k)], k),
    ], keys[0]


best = {}
if mode == "instructions":
    for name, cmds, _ in phases("warm", 50)[0]:
        batch(cmds)
    plist, key0 = phases("run", n)
    for name, cmds, calls in plist:
        callgrind("-z")
        batch(cmds)
        callgrind("--dump=" + name)
    for fn in glob.glob(os.path.join(d, "cg.*.out.*")):
        txt = open(fn).read()
        m = re.search(r"^desc: Trigger: dump (\S+)", txt, re.M)
        tot = re.search(r"^(?:summary|totals): (\d+)", txt, re.M)
        calls = {p[0]: p[2] for p in plist}
        if m and tot and m.group(1) in calls:
            best[m.group(1)] = int(tot.group(1)) / calls[m.group(1)]
    unit = "instructions per call"
else:
    for rnd in range(rounds):
        cmd("FLUSHALL")
        plist, key0 = phases(str(rnd), n)
        for name, cmds, _ in plist:
            cmd("CONFIG", "RESETSTAT")
            batch(cmds)
            u = usec_per_call()
            best[name] = min(best.get(name, u), u)
    unit = "usec_per_call"
mem = int(cmd("MEMORY", "USAGE", key0))
fmt = "%-13s %9.0f %s" if mode == "instructions" else "%-13s %9.2f %s"
for name in ("floor", "claim_fresh", "record", "claim_replay"):
    print(fmt % (name, best[name], unit))
fresh = best["claim_fresh"] + best["record"]
print("fresh charge  %.2f x floor(2); replay %.2f x floor(1)"
      % (fresh / (2 * best["floor"]), best["claim_replay"] / best["floor"]))
print("memory usage  %d bytes per completed record" % mem)
PY
