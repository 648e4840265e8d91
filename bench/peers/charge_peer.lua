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
local cjson = require "cjson.safe"
local ffi = require "ffi"

ffi.cdef [[
unsigned char *SHA256(const unsigned char *d, size_t n, unsigned char *md);
const void *EVP_sha256(void);
unsigned char *HMAC(const void *md, const void *key, int key_len,
    const unsigned char *d, size_t n, unsigned char *out,
    unsigned int *out_len);
int RAND_bytes(unsigned char *buf, int num);
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

local HEX = {}
for i = 0, 255 do HEX[string.char(i)] = string.format("%02x", i) end
local function tohex(s) return (s:gsub(".", HEX)) end

local function sha256_hex(s)
  crypto.SHA256(s, #s, md_buf)
  return tohex(ffi.string(md_buf, 32))
end

local function hmac_hex(key, s)
  crypto.HMAC(crypto.EVP_sha256(), key, #key, s, #s, md_buf, md_len)
  return tohex(ffi.string(md_buf, md_len[0]))
end

local function rand_hex()
  crypto.RAND_bytes(rand_buf, 16)
  return tohex(ffi.string(rand_buf, 16))
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

-- --- a minimal RESP client on a kept cosocket ------------------------------

local function read_reply(s)
  local line, err = s:receive("*l")
  if not line then return nil, err end
  local t, rest = line:sub(1, 1), line:sub(2)
  if t == "+" then return rest end
  if t == "-" then return nil, rest end
  if t == ":" then return tonumber(rest) end
  if t == "$" then
    local n = tonumber(rest)
    if n < 0 then return ngx.null end
    local d, e = s:receive(n + 2)
    if not d then return nil, e end
    return d:sub(1, n)
  end
  if t == "*" then
    local n = tonumber(rest)
    if n < 0 then return ngx.null end
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

local function redis(args)
  local s = ngx.socket.tcp()
  s:settimeout(5000)
  local ok, err = s:connect(cfg.redis)
  if not ok then return nil, err end
  local t, k = { "*", #args, "\r\n" }, 4
  for i = 1, #args do
    local a = args[i]
    t[k], t[k + 1], t[k + 2], t[k + 3], t[k + 4] = "$", #a, "\r\n", a, "\r\n"
    k = k + 5
  end
  local sent
  sent, err = s:send(t)
  if not sent then return nil, err end
  local v
  v, err = read_reply(s)
  if v == nil and err ~= nil and not err:find("^NOSCRIPT") then
    s:close()
    return nil, err
  end
  s:setkeepalive(60000, 256)
  return v, err
end

local function evalsha(name, key, ...)
  local args = { "EVALSHA", cfg.sha[name], "1", key, ... }
  local v, err = redis(args)
  if v == nil and err and err:find("^NOSCRIPT") then
    args[1], args[2] = "EVAL", cfg.text[name]
    v, err = redis(args)
  end
  return v, err
end

-- --- a minimal HTTP/1.1 client on a kept cosocket --------------------------

local function provider_post(form, dkey)
  local s = ngx.socket.tcp()
  s:settimeout(5000)
  local ok, err = s:connect(cfg.provider_host, cfg.provider_port)
  if not ok then return nil, err end
  local sent
  sent, err = s:send({ "POST /v1/charges HTTP/1.1\r\nHost: ", cfg.provider_hostport,
    "\r\nAuthorization: ", cfg.provider_auth, "\r\nIdempotency-Key: ", dkey,
    "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ",
    #form, "\r\n\r\n", form })
  if not sent then return nil, err end
  local line
  line, err = s:receive("*l")
  if not line then return nil, err end
  local status = tonumber(line:match("^HTTP/1%.%d (%d%d%d)"))
  local len, close = 0, false
  while true do
    line, err = s:receive("*l")
    if not line then return nil, err end
    if line == "" then break end
    local n, v = line:match("^([^:]+):%s*(.-)%s*$")
    if n then
      n = n:lower()
      if n == "content-length" then len = tonumber(v)
      elseif n == "connection" and v:lower() == "close" then close = true end
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

-- --- the endpoint -----------------------------------------------------------

function _M.init(c)
  cfg = c
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
  cfg.provider_hostport = c.provider_host .. ":" .. c.provider_port
  cfg.provider_auth = "Bearer " .. c.provider_api_key
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

function _M.handle()
  if ngx.req.get_method() ~= "POST" then return ngx.exit(405) end
  local h = ngx.req.get_headers()
  local tok = (h["authorization"] or ""):match("^Bearer (.+)$")
  local principal = tok and principals[sha256_hex(tok)]
  if not principal then return ngx.exit(401) end
  local key = h["idempotency-key"]
  if type(key) ~= "string" or #key == 0 or #key > 255 then return ngx.exit(400) end
  ngx.req.read_body()
  local q = cjson.decode(ngx.req.get_body_data() or "")
  if type(q) ~= "table" or type(q.amount) ~= "number" or
      q.amount <= 0 or q.amount % 1 ~= 0 or type(q.currency) ~= "string" or
      #q.currency ~= 3 or type(q.source) ~= "string" or q.source == "" then
    return ngx.exit(400)
  end
  local members = {
    '"amount":' .. string.format("%d", q.amount),
    '"currency":' .. cjson.encode(q.currency),
    '"source":' .. cjson.encode(q.source),
    '"customer":null', '"description":null', '"metadata":{}', '"line_items":[]',
  }
  local canon_inner = table.concat(members, ",")
  local canon = "{" .. canon_inner .. "}"
  local d = {}
  for i = 1, #members do d[i] = fnv1a32_hex(members[i]) end
  local digests = table.concat(d)
  local fp = sha256_hex("POST /charge\n" .. principal .. "\n" .. canon)
  local owner = rand_hex()
  local rkey = PREFIX .. principal .. ":" .. key
  ngx.update_time()
  local now = math.floor(ngx.now() * 1000)
  local r, err = evalsha("claim", rkey, fp, owner, string.format("%d", now),
    CLAIM_TTL_MS, digests)
  if r == nil then return ngx.exit(503) end
  if type(r) == "table" and r[1] == "recorded" then return replay(r) end
  if r ~= "claimed" then return ngx.exit(409) end
  local dkey = "charge_" .. hmac_hex(SECRET, principal .. "\0" .. key .. "\0" .. fp)
  local form = "amount=" .. string.format("%d", q.amount) ..
    "&currency=" .. ngx.escape_uri(q.currency) ..
    "&source=" .. ngx.escape_uri(q.source) ..
    "&metadata[charge_principal]=" .. ngx.escape_uri(principal) ..
    "&metadata[charge_idempotency_key]=" .. ngx.escape_uri(key)
  local status, body = provider_post(form, dkey)
  if status == nil then return ngx.exit(504) end
  local ch = status == 200 and cjson.decode(body)
  if type(ch) ~= "table" or type(ch.id) ~= "string" then return ngx.exit(502) end
  local out = '{"id":' .. cjson.encode(ch.id) .. ',"object":"charge","status":"succeeded",' ..
    canon_inner .. ',"created":' .. string.format("%d", ch.created) ..
    ',"idempotency_key":' .. cjson.encode(key) .. "}"
  ngx.update_time()
  now = math.floor(ngx.now() * 1000)
  local expires = now + RECORD_TTL_MS
  r, err = evalsha("record", rkey, owner, fp, digests, "completed", "201",
    "application/json", "", string.format("%d", RECORD_TTL_MS),
    string.format("%d", now), string.format("%d", expires), "inline", out)
  if r ~= "ok" then return ngx.exit(503) end
  ngx.status = 201
  ngx.header["Content-Type"] = "application/json"
  ngx.header["Cache-Control"] = "no-store"
  ngx.header["X-Request-Id"] = rand_hex()
  ngx.header["Idempotent-Replayed"] = "false"
  ngx.header["Idempotency-Key-Expires"] = ngx.http_time(math.floor(expires / 1000))
  ngx.header["Content-Length"] = #out
  ngx.print(out)
end

return _M
