-- pending.lua: the index of records whose outcome is unknown, a sorted set
-- of record names scored by when the completer should next ask (Unix ms).
-- KEYS[1]  the index: <prefix>unknown
-- ARGV[1]  'add' (ARGV[2] record name, ARGV[3] score), 'remove' (ARGV[2]
--          record name) or 'due' (ARGV[2] now, ARGV[3] at most this many)
-- A script touches one key (Redis Cluster): the index is kept by the C
-- code with a second command beside record.lua, never by record.lua
-- itself. It is written before an unknown record and cleaned after it
-- settles, so it names every unknown record (and, for a while, some that
-- settled: the completer drops those).
-- Returns 'add', 'remove': 1; 'due': {count, name, name...}, count the
-- whole index's size.
local op, idx = ARGV[1], KEYS[1]
if #KEYS ~= 1 then
  return redis.error_reply('ERR pending: bad arguments')
end
if op == 'add' and #ARGV == 3 and ARGV[2] ~= ''
    and string.find(ARGV[3], '^[1-9]%d*$') and #ARGV[3] <= 15 then
  redis.call('ZADD', idx, ARGV[3], ARGV[2])
  return 1
end
if op == 'remove' and #ARGV == 2 and ARGV[2] ~= '' then
  redis.call('ZREM', idx, ARGV[2])
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
return redis.error_reply('ERR pending: bad arguments')
