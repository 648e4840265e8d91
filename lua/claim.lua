-- claim.lua: claim an Idempotency-Key, or report what it already holds.
-- KEYS[1]  the record: <prefix>idem:<principal>:<idempotency-key>
-- ARGV[1]  fingerprint (hex SHA-256 of the canonical request)
-- ARGV[2]  owner token of this attempt
-- ARGV[3]  now, Unix milliseconds
-- ARGV[4]  claim TTL in milliseconds (lock_ttl_s * 1000)
-- Returns one of
--   {'claimed'}                     the caller owns the key now (also when it
--                                   already owned it: a retried claim is safe)
--   {'mismatch'}                    the key holds another fingerprint
--   {'in_progress'}                 another attempt holds the claim
--   {'recorded', state, status, content_type, retry_after,
--    body, body_file, body_len, body_sha256}
--                                   the outcome to replay (absent fields: nil)
-- Arguments are checked before any write, numbers within bounds too: Redis
-- does not roll back a script that fails half-way, and a claim whose PEXPIRE
-- failed would block the key forever.
local MAX_NOW_MS = 1e14        -- year 5138: any sane wall clock
local MAX_TTL_MS = 31536000000 -- one year
local function bounded_int(s, max)
  return s ~= nil and #s <= 15 and string.match(s, '^[1-9][0-9]*$') ~= nil
    and tonumber(s) <= max
end
if #KEYS ~= 1 or #ARGV ~= 4 or ARGV[1] == '' or ARGV[2] == ''
    or not bounded_int(ARGV[3], MAX_NOW_MS)
    or not bounded_int(ARGV[4], MAX_TTL_MS) then
  return redis.error_reply('ERR claim: bad arguments')
end
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'fingerprint', 'owner')
if not cur[1] then
  redis.call('HSET', key, 'state', 'in_progress', 'fingerprint', ARGV[1],
             'owner', ARGV[2], 'created_ms', ARGV[3], 'updated_ms', ARGV[3])
  redis.call('PEXPIRE', key, ARGV[4])
  return {'claimed'}
end
if cur[2] ~= ARGV[1] then
  return {'mismatch'}
end
if cur[1] == 'in_progress' then
  if cur[3] == ARGV[2] then
    return {'claimed'}
  end
  return {'in_progress'}
end
local r = redis.call('HMGET', key, 'state', 'status', 'content_type',
                     'retry_after', 'body', 'body_file', 'body_len',
                     'body_sha256')
return {'recorded', r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]}
