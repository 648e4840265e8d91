-- claim.lua: claim an Idempotency-Key, or report what it already holds.
-- KEYS[1]  the record: <prefix>idem:<principal>:<idempotency-key>
-- ARGV[1]  fingerprint (hex SHA-256 of the canonical request)
-- ARGV[2]  owner token of this attempt
-- ARGV[3]  now, Unix milliseconds
-- ARGV[4]  claim TTL in milliseconds (lock_ttl_s * 1000)
-- ARGV[5]  per-parameter digests of the request (stored, never compared here)
-- Returns one of
--   'claimed'                       the caller owns the key now (also when it
--                                   already owned it: a retried claim is safe)
--   {'mismatch', digests}           the key holds another fingerprint; digests
--                                   are its stored param_digests (nil if none)
--   {'resumed', created_ms, quiet_ms, probe_lte}
--                                   the key holds an outcome 'unknown' (the
--                                   provider's answer never came) and the
--                                   caller took it over: it owns the record
--                                   for the claim TTL (lease_ms) and asks the
--                                   provider again with the same downstream
--                                   key; the record's own TTL is kept.
--                                   created_ms: the first claim's; quiet_ms:
--                                   the latest moment an earlier attempt may
--                                   have sent to the provider (the last
--                                   unknown recorded by an attempt that may
--                                   have sent, sent_ms, else updated_ms, or
--                                   the end of a lease that lapsed
--                                   unrecorded); probe_lte: where the
--                                   next read of the list goes on from
--                                   ('0': the top)
--   {'in_progress', created_ms}     another attempt holds the claim, made then
--                                   (or holds the lease on an unknown
--                                   record, taken then)
--   {'recorded', state, status, content_type, retry_after,
--    body, body_file, body_len, body_sha256, expires_ms}
--                                   the outcome to replay (absent fields: nil)
-- Cost (Redis CPU grows with every command, every field, every library
-- call and every table a script returns): a fresh claim is EXISTS, HSET,
-- PEXPIRE and answers a plain string; a replay is EXISTS and one HMGET of
-- exactly the fields it returns. Arguments are checked before any write,
-- numbers within bounds too: Redis does not roll back a script that fails
-- half-way, and a claim whose PEXPIRE failed would block the key forever.
local MAX_NOW_MS = 9e13        -- year 4821
local MAX_TTL_MS = 31536000000 -- one year
-- Numbers: digits only, no leading zero (the pattern), then the bounds
-- (the arithmetic runs only on digits).
local find = string.find
local now, ttl = ARGV[3], ARGV[4]
if #KEYS ~= 1 or #ARGV ~= 5 or ARGV[1] == '' or ARGV[2] == ''
    or ARGV[5] == '' or #now > 15 or not find(now, '^[1-9]%d*$')
    or now + 0 > MAX_NOW_MS or #ttl > 15 or not find(ttl, '^[1-9]%d*$')
    or ttl + 0 > MAX_TTL_MS then
  return redis.error_reply('ERR claim: bad arguments')
end
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then
  redis.call('HSET', key, 'state', 'in_progress', 'fingerprint', ARGV[1],
             'owner', ARGV[2], 'created_ms', ARGV[3], 'param_digests', ARGV[5])
  redis.call('PEXPIRE', key, ttl)
  return 'claimed'
end
local r = redis.call('HMGET', key, 'state', 'fingerprint', 'status',
                     'content_type', 'retry_after', 'body', 'body_file',
                     'body_len', 'body_sha256', 'expires_ms')
if r[2] ~= ARGV[1] then
  return {'mismatch', redis.call('HGET', key, 'param_digests')}
end
if r[1] == 'in_progress' then
  local c = redis.call('HMGET', key, 'owner', 'created_ms')
  if c[1] == ARGV[2] then
    return 'claimed'
  end
  return {'in_progress', c[2]}
end
if r[1] == 'unknown' then
  -- not settled: whoever asks again owns it for a lease, one at a time
  local c = redis.call('HMGET', key, 'owner', 'lease_ms', 'created_ms',
                       'updated_ms', 'sent_ms', 'probe_lte')
  local quiet = c[5] or c[4] or c[3]
  local lte = c[6] or '0'
  if c[1] == ARGV[2] then
    return {'resumed', c[3], quiet, lte}
  end
  if c[2] and c[2] + 0 > now + 0 then
    return {'in_progress', tostring(c[2] - ttl)}
  end
  if c[2] and quiet and c[2] + 0 > quiet + 0 then
    quiet = c[2] -- a lease that lapsed before its holder recorded
    lte = '0'   -- what was read before it proves nothing after it
  end
  redis.call('HSET', key, 'owner', ARGV[2], 'lease_ms', tostring(now + ttl))
  return {'resumed', c[3], quiet, lte}
end
return {'recorded', r[1], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10]}
