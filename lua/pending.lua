-- pending.lua: the index of records whose outcome is unknown, a sorted set
-- of record names scored by when the completer should next ask (Unix ms),
-- and beside it the same names scored by when each was first named
-- (Unix ms, Redis's clock): how long the oldest has been unknown.
-- KEYS[1]  the index: <prefix>unknown
-- ARGV[1]  'add' (ARGV[2] record name, ARGV[3] score), 'remove' (ARGV[2]
--          record name), 'due' (ARGV[2] now, ARGV[3] at most this many) or
--          'oldest'
-- A script touches one key (Redis Cluster): the index is kept by the C
-- code with a second command beside record.lua, never by record.lua
-- itself. It is written before an unknown record and cleaned after it
-- settles, so it names every unknown record (and, for a while, some that
-- settled: the completer drops those). The second set is named so that
-- it hashes to the index's own cluster slot: the index's hash tag + ':since'
-- when its name has one, else '{' .. index .. '}:since'; an index name
-- with a '}' but no hash tag has no such name, and no second set.
-- Returns 'add', 'remove': 1; 'due': {count, name, name...}, count the
-- whole index's size; 'oldest': {count, first_ms} (first_ms nil when none
-- or no second set).
local op, idx = ARGV[1], KEYS[1]
if #KEYS ~= 1 then
  return redis.error_reply('ERR pending: bad arguments')
end
local since
local open = string.find(idx, '{', 1, true)
local close = open and string.find(idx, '}', open + 1, true)
if open and close and close > open + 1 then
  since = idx .. ':since'
elseif not string.find(idx, '}', 1, true) then
  since = '{' .. idx .. '}:since'
end
if op == 'add' and #ARGV == 3 and ARGV[2] ~= ''
    and string.find(ARGV[3], '^[1-9]%d*$') and #ARGV[3] <= 15 then
  redis.call('ZADD', idx, ARGV[3], ARGV[2])
  if since then
    local t = redis.call('TIME')
    redis.call('ZADD', since, 'NX',
               string.format('%.0f', t[1] * 1000 + math.floor(t[2] / 1000)),
               ARGV[2])
  end
  return 1
end
if op == 'remove' and #ARGV == 2 and ARGV[2] ~= '' then
  redis.call('ZREM', idx, ARGV[2])
  if since then
    redis.call('ZREM', since, ARGV[2])
  end
  return 1
end
if op == 'due' and #ARGV == 3 and string.find(ARGV[2], '^[1-9]%d*$')
    and #ARGV[2] <= 15 and string.find(ARGV[3], '^[1-9]%d*$')
    and #ARGV[3] <= 4 then
  local due = redis.call('ZRANGEBYSCORE', idx, '-inf', ARGV[2], 'LIMIT', 0,
                         ARGV[3])
  table.insert(due, 1, redis.call('ZCARD', idx))
  return due
end
if op == 'oldest' and #ARGV == 1 then
  local first = since and redis.call('ZRANGE', since, 0, 0, 'WITHSCORES')
  return {redis.call('ZCARD', idx), first and first[2] or false}
end
return redis.error_reply('ERR pending: bad arguments')
