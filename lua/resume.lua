-- resume.lua: the completer takes over a record whose outcome is unknown.
-- KEYS[1]  the record
-- ARGV[1]  owner token of the completer's attempt
-- ARGV[2]  now, Unix milliseconds
-- ARGV[3]  lease in milliseconds (lock_ttl_s * 1000)
-- The same take-over as a retry's claim.lua finding 'unknown', without the
-- fingerprint (the completer has only the key): the caller owns the record
-- until now + lease (lease_ms) and asks the provider again with the same
-- downstream key; the record's own TTL is kept. Returns one of
--   {'resumed', fingerprint, param_digests, request, created_ms, quiet_ms,
--    probe_lte}
--                          quiet_ms as claim.lua's: the latest moment an
--                          earlier attempt may have sent to the provider;
--                          probe_lte as claim.lua's
--   {'leased', lease_ms}   a retry or another completer holds it
--   {'settled', state}     not unknown (any more): state, or nil if absent
if #KEYS ~= 1 or #ARGV ~= 3 or ARGV[1] == ''
    or not string.find(ARGV[2], '^[1-9]%d*$') or #ARGV[2] > 15
    or not string.find(ARGV[3], '^[1-9]%d*$') or #ARGV[3] > 15 then
  return redis.error_reply('ERR resume: bad arguments')
end
local key = KEYS[1]
local r = redis.call('HMGET', key, 'state', 'owner', 'lease_ms',
                     'fingerprint', 'param_digests', 'request', 'created_ms',
                     'updated_ms', 'sent_ms', 'probe_lte')
if r[1] ~= 'unknown' then
  return {'settled', r[1]}
end
if r[2] ~= ARGV[1] and r[3] and r[3] + 0 > ARGV[2] + 0 then
  return {'leased', r[3]}
end
local quiet = r[9] or r[8] or r[7]
local lte = r[10] or '0'
if r[2] ~= ARGV[1] and r[3] and quiet and r[3] + 0 > quiet + 0 then
  quiet = r[3] -- a lease that lapsed before its holder recorded
  lte = '0'   -- what was read before it proves nothing after it
end
redis.call('HSET', key, 'owner', ARGV[1],
           'lease_ms', tostring(ARGV[2] + ARGV[3]))
return {'resumed', r[4], r[5], r[6], r[7], quiet, lte}
