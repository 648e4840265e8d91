-- lookup.lua: what a record says about itself, without its body or owner.
-- KEYS[1]  the record
-- Reads only: never creates a key, never changes a TTL.
-- Returns {state, created_ms, updated_ms, expires_ms, status, pttl}: state
-- nil when there is no record (pttl is then -2); absent fields nil.
if #KEYS ~= 1 or #ARGV ~= 0 then
  return redis.error_reply('ERR lookup: bad arguments')
end
local r = redis.call('HMGET', KEYS[1], 'state', 'created_ms', 'updated_ms',
                     'expires_ms', 'status')
r[6] = redis.call('PTTL', KEYS[1])
return r
