-- bench/sim_post.lua - wrk script for charge-provider-sim: POST
-- /v1/charges with a form body and a fresh Idempotency-Key per request
-- (fresh charges), or the same few keys (replays) when SIM_REPLAY=1.
--   wrk -t1 -c64 -d10s -s bench/sim_post.lua http://127.0.0.1:PORT
local counter = 0
local thread_id = 0
local replay = os.getenv("SIM_REPLAY") == "1"

function setup(thread)
	thread_id = thread_id + 1
	thread:set("tid", thread_id)
end

function init(args)
	math.randomseed(os.time() + (tid or 0))
	prefix = string.format("bench-%d-%d-%d-", os.time(), tid or 0, math.random(1, 1e9))
end

local body = "amount=1999&currency=usd&source=tok_visa&metadata[charge_principal]=bench&metadata[charge_idempotency_key]=k"
local headers = {
	["Authorization"] = "Bearer sk_test_sim",
	["Content-Type"] = "application/x-www-form-urlencoded",
}

function request()
	counter = counter + 1
	if replay then
		headers["Idempotency-Key"] = prefix .. (counter % 16)
	else
		headers["Idempotency-Key"] = prefix .. counter
	end
	return wrk.format("POST", "/v1/charges", headers, body)
end

local bad = 0
function response(status, hdrs, b)
	if status ~= 200 then
		bad = bad + 1
	end
end

function done(summary, latency, requests)
	io.write(string.format("non-2xx: %d\n", summary.errors.status))
end
