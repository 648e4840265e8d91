-- charge_peer.lua - the nginx + Lua peer of bench/run --peers: POST /charge
-- in OpenResty style on Debian's nginx with its Lua module
-- (libnginx-mod-http-lua, lua-resty-core, lua-cjson), doing what the
-- responder does on a fresh charge and a replay: the API key's principal,
-- the canonical request and its fingerprint, the claim and the record as
-- one EVALSHA each of the project's own lua/claim.lua and lua/record.lua
-- (the same arguments), the provider called over HTTP with the downstream
-- Idempotency-Key (HMAC-SHA256 of principal, key and fingerprint) and the
-- form body of POST /v1/charges, the 201 charge object rendered from the
-- provider's charge. Only the paths the benchmark takes (a fresh charge, a
-- replay) are written out; anything else answers a bare error status.
--
-- Debian has neither lua-resty-redis nor lua-resty-http: the two minimal
-- pieces they would be are written here, on cosockets, with their
-- connections kept (setkeepalive) as those libraries keep them: a RESP
-- client for Redis on its unix socket, an HTTP/1.1 client for the provider
-- (Content-Length answers, as the simulator sends). SHA-256, HMAC and
-- random bytes through LuaJIT's FFI from libcrypto.
--
-- Written as an OpenResty user writes it, so that the peer is not slower
-- than it need be (the first version cost ~220 µs of nginx CPU per fresh
-- charge where an OpenResty endpoint is quoted at ~85 µs): headers read
-- from ngx.var.http_* (not a table of every header from get_headers),
-- hex digits by nginx's ngx_hex_dump through the FFI as lua-resty-string
-- does (string.gsub, which LuaJIT does not compile, was used before), one
-- pooled Redis connection per request for both EVALSHAs as with
-- lua-resty-redis (was a pool round trip per command), the fixed parts of
-- the canonical request, its digests and the provider's request head
-- computed once, the HMAC's keyed context kept (lua-resty-hmac's way), plain string.find/sub instead of patterns on the hot path,
-- standard functions held in locals. The work per request is the same.
--
-- Two provider modes, chosen in init's configuration as the responder
-- chooses its provider (and as the Go peer, charge.go, chooses its own):
--   - provider_host set: the provider over HTTP (above).
--   - provider_host nil: the provider in the process, doing what the
--     responder's in-process simulation (src/provider/provider_inproc.c)
--     and the Go peer's in-process mode do for a charge: the outcome
--     decided by the source token (tok_chargeDeclined,
--     tok_insufficientFunds, tok_providerError, tok_providerTimeout, or
--     the first element of a chain "a|b"; anything else succeeds), the
--     charge id "ch_" + the first 24 hex digits of HMAC-SHA256(secret,
--     principal NUL key NUL fingerprint) (the MAC the HTTP mode sends as
--     the downstream key), after provider_latency_ms (a timer of nginx's
--     loop, ngx.sleep, as the responder's is a timer of its loop; at 0,
--     the benchmark's latency, answered at once as the Go peer answers),
--     and one ledger line per call (ms, principal, key, charge id,
--     outcome, amount, currency, tab-separated) written with one write(2)
--     to provider_ledger, opened O_APPEND once per worker. A succeeded
--     charge is then recorded and answered exactly as in the HTTP mode;
--     any other outcome answers a bare status (402, 502, 504) without a
--     record, as the HTTP mode does for a provider failure.
local cjson = require "cjson.safe"
local ffi = require "ffi"

ffi.cdef [[
unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);
const void *EVP_sha256(void);
unsigned char *HMAC(const void *md, const void *key, int key_len,
    const unsigned char *d, size_t n, unsigned char *out,
    unsigned int *out_len);
int RAND_bytes(unsigned char *buf, int num);
void *HMAC_CTX_new(void);
int HMAC_Init_ex(void *ctx, const void *key, int key_len, const void *md,
    void *impl);
int HMAC_Update(void *ctx, const unsigned char *d, size_t n);
int HMAC_Final(void *ctx, unsigned char *md, unsigned int *len);
unsigned char *ngx_hex_dump(unsigned char *dst, const unsigned char *src, size_t len);
int open(const char *path, int flags, ...);
ssize_t write(int fd, const void *buf, size_t n);
]]
local crypto = ffi.load("libcrypto.so.3")
local md_buf = ffi.new("unsigned char[32]")
local md_len = ffi.new("unsigned int[1]")
local rand_buf = ffi.new("unsigned char[16]")

local _M = {}
local cfg = {}
local principals = {}
local SECRET = "bench-peer-provider-secret"
local PREFIX = "peer:lua:idem:"
local CLAIM_TTL_MS = "30000"
local RECORD_TTL_MS = 86400000
local RECORD_TTL_MS_S = "86400000"
local CANON_TAIL = ',"customer":null,"description":null,"metadata":{},"line_items":[]'
local format, floor = string.format, math.floor
local encode, decode = cjson.encode, cjson.decode
local escape_uri = ngx.escape_uri

-- hex digits as lua-resty-string's to_hex makes them: nginx's own
-- ngx_hex_dump through the FFI (string.gsub is not compiled by LuaJIT)
local hex_buf = ffi.new("unsigned char[64]")
local function hex(p, n)
  ffi.C.ngx_hex_dump(hex_buf, p, n)
  return ffi.string(hex_buf, n * 2)
end
local function tohex(s) return hex(s, #s) end

local EVP_SHA256 = crypto.EVP_sha256()

local function sha256_hex(s)
  crypto.SHA256(s, #s, md_buf)
  return hex(md_buf, 32)
end

-- HMAC-SHA256 with the secret: a context keyed once and reset per call,
-- as lua-resty-hmac keeps one (the one-shot HMAC() sets up its digest
-- and key on every call)
local hmac_ctx = crypto.HMAC_CTX_new()
local function hmac_hex(s)
  crypto.HMAC_Init_ex(hmac_ctx, nil, 0, nil, nil)
  crypto.HMAC_Update(hmac_ctx, s, #s)
  crypto.HMAC_Final(hmac_ctx, md_buf, md_len)
  return hex(md_buf, md_len[0])
end

local function rand_hex()
  crypto.RAND_bytes(rand_buf, 16)
  return hex(rand_buf, 16)
end

local function fnv1a32_hex(s)
  local h = bit.tobit(2166136261)
  for i = 1, #s do
    h = bit.bxor(h, s:byte(i))
    -- h * 16777619 (2^24 + 403) modulo 2^32, exact in a double
    h = bit.tobit(h * 403 + bit.lshift(h, 24))
  end
  return bit.tohex(h, 8)
end

-- the digests of the canonical members that are the same in every request
local DIGESTS_TAIL = fnv1a32_hex('"customer":null') .. fnv1a32_hex('"description":null') ..
  fnv1a32_hex('"metadata":{}') .. fnv1a32_hex('"line_items":[]')

-- --- a minimal RESP client on a kept cosocket ------------------------------
-- As lua-resty-redis is used: one connection from the pool per request
-- (connect), every command of the request on it, back to the pool at the
-- end (setkeepalive); replies read as that library reads them.

local byte, sub, find, lower = string.byte, string.sub, string.find, string.lower
local tcp, null = ngx.socket.tcp, ngx.null

local function read_reply(s)
  local line, err = s:receive("*l")
  if not line then return nil, err end
  local t = byte(line)
  if t == 43 then return sub(line, 2) end                   -- +
  if t == 45 then return nil, sub(line, 2) end              -- -
  if t == 58 then return tonumber(sub(line, 2)) end         -- :
  if t == 36 then                                           -- $
    local n = tonumber(sub(line, 2))
    if n < 0 then return null end
    local d, e = s:receive(n + 2)
    if not d then return nil, e end
    return sub(d, 1, n)
  end
  if t == 42 then                                           -- *
    local n = tonumber(sub(line, 2))
    if n < 0 then return null end
    local a = {}
    for i = 1, n do
      local v, e = read_reply(s)
      if v == nil then return nil, e end
      a[i] = v
    end
    return a
  end
  return nil, "bad reply"
end

local function redis_connect()
  local s = tcp()
  s:settimeout(5000)
  local ok, err = s:connect(cfg.redis)
  if not ok then return nil, err end
  return s
end

local function redis_cmd(s, args)
  local n = #args
  local t, k = { "*", n, "\r\n" }, 4
  for i = 1, n do
    local a = args[i]
    t[k], t[k + 1], t[k + 2], t[k + 3], t[k + 4] = "$", #a, "\r\n", a, "\r\n"
    k = k + 5
  end
  local sent, err = s:send(t)
  if not sent then return nil, err end
  return read_reply(s)
end

-- EVALSHA of script name on connection s; EVAL once on NOSCRIPT. args:
-- two slots for the command and the script, then its arguments.
local function evalsha(s, name, args)
  args[1], args[2] = "EVALSHA", cfg.sha[name]
  local v, err = redis_cmd(s, args)
  if v == nil and err and find(err, "NOSCRIPT", 1, true) == 1 then
    args[1], args[2] = "EVAL", cfg.text[name]
    v, err = redis_cmd(s, args)
  end
  return v, err
end

-- --- a minimal HTTP/1.1 client on a kept cosocket --------------------------
-- As lua-resty-http reads an answer: the status line and each header line
-- with receive("*l"), the body by its Content-Length.

local function provider_post(form, dkey)
  local s = tcp()
  s:settimeout(5000)
  local ok, err = s:connect(cfg.provider_host, cfg.provider_port)
  if not ok then return nil, err end
  local sent
  sent, err = s:send({ cfg.provider_head, dkey,
    "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ",
    #form, "\r\n\r\n", form })
  if not sent then return nil, err end
  local line
  line, err = s:receive("*l")
  if not line then return nil, err end
  local status = tonumber(sub(line, 10, 12))
  local len, close = 0, false
  while true do
    line, err = s:receive("*l")
    if not line then return nil, err end
    if line == "" then break end
    local c = find(line, ":", 1, true)
    if c == 15 or c == 11 then
      local n = lower(sub(line, 1, c - 1))
      if n == "content-length" then len = tonumber(sub(line, c + 1))
      elseif n == "connection" and find(lower(line), "close", c + 1, true) then close = true end
    end
  end
  local body = ""
  if len > 0 then
    body, err = s:receive(len)
    if not body then return nil, err end
  end
  if close then s:close() else s:setkeepalive(60000, 1024) end
  return status, body
end

-- the provider over HTTP: the charge id and its created time, or nil and
-- the status to answer bare
local function provider_http(principal, key, machex, amount, q)
  local dkey = "charge_" .. machex
  local form = "amount=" .. amount ..
    "&currency=" .. escape_uri(q.currency) ..
    "&source=" .. escape_uri(q.source) ..
    "&metadata[charge_principal]=" .. escape_uri(principal) ..
    "&metadata[charge_idempotency_key]=" .. escape_uri(key)
  local status, body = provider_post(form, dkey)
  if status == nil then return nil, 504 end
  local ch = status == 200 and decode(body)
  if type(ch) ~= "table" or type(ch.id) ~= "string" then return nil, 502 end
  return ch.id, ch.created
end

-- --- the provider in the process -------------------------------------------
-- provider_inproc.c's simulation: the outcome of the source token, the
-- charge id from the request's MAC, the latency as a timer of the loop,
-- one ledger line with one write(2) on a descriptor opened O_APPEND once.

local O_LEDGER = 0x1 + 0x40 + 0x400 + 0x80000  -- WRONLY|CREAT|APPEND|CLOEXEC
local ledger_fd = -1

local function token_is(source, tok)
  local n = #tok
  return sub(source, 1, n) == tok and (#source == n or byte(source, n + 1) == 124)
end

local function outcome_for(source)
  if token_is(source, "tok_chargeDeclined") or token_is(source, "tok_insufficientFunds") then
    return "declined", 402
  end
  if token_is(source, "tok_providerError") then return "error", 502 end
  if token_is(source, "tok_providerTimeout") then return "timeout", 504 end
  return "succeeded", nil
end

-- returns the charge id and its created time (s), or nil and the status to
-- answer bare (the outcome was not a charge, or the ledger write failed)
local function provider_inproc(principal, key, machex, amount, currency, source)
  local outcome, status = outcome_for(source)
  if cfg.latency_s > 0 then ngx.sleep(cfg.latency_s) end
  if ledger_fd < 0 then
    ledger_fd = ffi.C.open(cfg.provider_ledger, O_LEDGER, ffi.cast("int", 420))  -- 0644
    if ledger_fd < 0 then return nil, 502 end
  end
  local id = "ch_" .. sub(machex, 1, 24)
  -- the loop's time, taken when the claim's reply woke it
  local ms = floor(ngx.now() * 1000)
  -- ms \t principal \t key \t charge id \t outcome \t amount \t currency
  local line = format("%d", ms) .. "\t" .. principal .. "\t" .. key .. "\t" .. id ..
    "\t" .. outcome .. "\t" .. amount .. "\t" .. currency .. "\n"
  if tonumber(ffi.C.write(ledger_fd, line, #line)) ~= #line then return nil, 502 end
  if status then return nil, status end
  return id, floor(ms / 1000)
end

-- --- the endpoint -----------------------------------------------------------

function _M.init(c)
  cfg = c
  assert(hmac_ctx ~= nil and crypto.HMAC_Init_ex(hmac_ctx, SECRET, #SECRET, EVP_SHA256, nil) == 1)
  cfg.sha, cfg.text = {}, {}
  for _, name in ipairs({ "claim", "record" }) do
    local f = assert(io.open(c.lua_dir .. "/" .. name .. ".lua"))
    local text = f:read("*a")
    f:close()
    cfg.text[name] = text
    cfg.sha[name] = tohex(ngx.sha1_bin(text))
  end
  for l in io.lines(c.api_keys) do
    local p, h = l:match("^(%S+)%s+(%x+)$")
    if p and p:sub(1, 1) ~= "#" then principals[h] = p end
  end
  cfg.latency_s = (c.provider_latency_ms or 0) / 1000
  if c.provider_host then
    cfg.provider_head = "POST /v1/charges HTTP/1.1\r\nHost: " .. c.provider_host .. ":" ..
      c.provider_port .. "\r\nAuthorization: Bearer " .. c.provider_api_key ..
      "\r\nIdempotency-Key: "
  else
    assert(c.provider_ledger, "the provider in the process needs provider_ledger")
  end
end

local function replay(r)
  -- {'recorded', state, status, content_type, retry_after, body, ...}
  ngx.status = tonumber(r[3])
  ngx.header["Content-Type"] = r[4]
  ngx.header["Cache-Control"] = "no-store"
  ngx.header["X-Request-Id"] = rand_hex()
  ngx.header["Idempotent-Replayed"] = "true"
  ngx.header["Idempotency-Key-Expires"] = ngx.http_time(math.floor(tonumber(r[10]) / 1000))
  ngx.header["Content-Length"] = #r[6]
  ngx.print(r[6])
end

local function done(s) s:setkeepalive(60000, 1024) end

function _M.handle()
  if ngx.req.get_method() ~= "POST" then return ngx.exit(405) end
  local var = ngx.var
  local auth = var.http_authorization
  local principal = auth and find(auth, "Bearer ", 1, true) == 1 and #auth > 7 and
    principals[sha256_hex(sub(auth, 8))]
  if not principal then return ngx.exit(401) end
  local key = var.http_idempotency_key
  if not key or #key == 0 or #key > 255 then return ngx.exit(400) end
  ngx.req.read_body()
  local q = decode(ngx.req.get_body_data() or "")
  if type(q) ~= "table" or type(q.amount) ~= "number" or
      q.amount <= 0 or q.amount % 1 ~= 0 or type(q.currency) ~= "string" or
      #q.currency ~= 3 or type(q.source) ~= "string" or q.source == "" then
    return ngx.exit(400)
  end
  local amount = format("%d", q.amount)
  local m_amount, m_currency, m_source = '"amount":' .. amount,
    '"currency":' .. encode(q.currency), '"source":' .. encode(q.source)
  local canon_inner = m_amount .. "," .. m_currency .. "," .. m_source .. CANON_TAIL
  local digests = fnv1a32_hex(m_amount) .. fnv1a32_hex(m_currency) ..
    fnv1a32_hex(m_source) .. DIGESTS_TAIL
  local fp = sha256_hex("POST /charge\n" .. principal .. "\n{" .. canon_inner .. "}")
  local owner = rand_hex()
  local rkey = PREFIX .. principal .. ":" .. key
  ngx.update_time()
  local now = floor(ngx.now() * 1000)
  local s = redis_connect()
  if not s then return ngx.exit(503) end
  local r = evalsha(s, "claim", { false, false, "1", rkey, fp, owner, format("%d", now),
    CLAIM_TTL_MS, digests })
  if r == nil then
    s:close()
    return ngx.exit(503)
  end
  if type(r) == "table" and r[1] == "recorded" then
    done(s)
    return replay(r)
  end
  if r ~= "claimed" then
    done(s)
    return ngx.exit(409)
  end
  local machex = hmac_hex(principal .. "\0" .. key .. "\0" .. fp)
  local ch_id, created
  if cfg.provider_head then
    ch_id, created = provider_http(principal, key, machex, amount, q)
  else
    ch_id, created = provider_inproc(principal, key, machex, amount, q.currency, q.source)
  end
  if not ch_id then
    done(s)
    return ngx.exit(created)
  end
  local out = '{"id":' .. encode(ch_id) .. ',"object":"charge","status":"succeeded",' ..
    canon_inner .. ',"created":' .. format("%d", created) ..
    ',"idempotency_key":' .. encode(key) .. "}"
  ngx.update_time()
  now = floor(ngx.now() * 1000)
  local expires = now + RECORD_TTL_MS
  r = evalsha(s, "record", { false, false, "1", rkey, owner, fp, digests, "completed",
    "201", "application/json", "", RECORD_TTL_MS_S, format("%d", now),
    format("%d", expires), "inline", out })
  if r == nil then
    s:close()
    return ngx.exit(503)
  end
  done(s)
  if r ~= "ok" then return ngx.exit(503) end
  local h = ngx.header
  ngx.status = 201
  h["Content-Type"] = "application/json"
  h["Cache-Control"] = "no-store"
  h["X-Request-Id"] = rand_hex()
  h["Idempotent-Replayed"] = "false"
  h["Idempotency-Key-Expires"] = ngx.http_time(floor(expires / 1000))
  h["Content-Length"] = #out
  ngx.print(out)
end

return _M
