-- charge.lua: the wrk script of bench/run for every scenario.
-- Environment (read once per wrk thread):
--   BENCH_PATH  request path (/charge, /baseline, /floor1, /floor2)
--   BENCH_KEY   fixed Idempotency-Key (replay); unset: a new key per request
--   BENCH_RUN   run id, part of every generated key
--   BENCH_BODY  request body (default: the default charge body)
-- Every scenario sends the same request bytes (modulo the key), built with
-- wrk.format on every request, so wrk costs the same for all of them.
-- done() prints one machine-readable line: "BENCH {json}".

local path = os.getenv("BENCH_PATH") or "/charge"
local fixed_key = os.getenv("BENCH_KEY")
local run_id = os.getenv("BENCH_RUN") or "run"
local body = os.getenv("BENCH_BODY") or
  '{"amount":1999,"currency":"usd","source":"tok_visa"}'
local headers = {
  ["Authorization"] = "Bearer sk_test_demo",
  ["Content-Type"] = "application/json",
}
local prefix = run_id
local counter = 0

-- setup() runs in the main Lua state once per thread: number the threads.
local next_tid = 0
function setup(thread)
  next_tid = next_tid + 1
  thread:set("tid", next_tid)
end

-- init() runs in each thread's own Lua state: seed with the thread id.
function init(args)
  local t = tid or 0
  math.randomseed(os.time() * 1000 + t)
  prefix = string.format("%s-%d-%08x", run_id, t,
                         math.random(0, 0x7fffffff))
end

function request()
  counter = counter + 1
  if fixed_key then
    headers["Idempotency-Key"] = fixed_key
  else
    headers["Idempotency-Key"] = prefix .. "-" .. counter
  end
  return wrk.format("POST", path, headers, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,' ..
    '"err_timeout":%d,"lat_mean_us":%.1f,"lat_max_us":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max,
    latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
