-- release.lua: give up a claim that has not called the provider.
-- KEYS[1]  the record
-- ARGV[1]  owner token of this attempt
-- Deletes the record only while it is in_progress and owned by the caller.
-- Returns 1 when released, 0 otherwise.
if #KEYS ~= 1 or #ARGV ~= 1 or ARGV[1] == '' then
  return redis.error_reply('ERR release: bad arguments')
end
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'owner')
if cur[1] == 'in_progress' and cur[2] == ARGV[1] then
  redis.call('DEL', key)
  return 1
end
return 0
