-- record.lua: record the outcome of a claimed attempt (fenced by owner).
-- KEYS[1]  the record
-- ARGV[1]  owner token of this attempt
-- ARGV[2]  fingerprint
-- ARGV[3]  state: 'completed' or 'failed'
-- ARGV[4]  HTTP status
-- ARGV[5]  content type
-- ARGV[6]  Retry-After value, or '' for none
-- ARGV[7]  TTL in milliseconds
-- ARGV[8]  now, Unix milliseconds
-- ARGV[9]  'inline' or 'file'
-- ARGV[10] inline: the body; file: the file name relative to spill_dir
-- ARGV[11] file: body length in bytes   (ignored for inline)
-- ARGV[12] file: hex SHA-256 of the body (ignored for inline)
-- Writes only when the caller still owns the claim or the key has vanished
-- (its claim expired and nobody took it). Returns one of
--   {'ok'}
--   {'recorded', state, status, content_type, retry_after,
--    body, body_file, body_len, body_sha256}
--                  another attempt recorded first: first recording wins
--   {'fenced'}     another attempt holds the claim now; nothing written
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'owner', 'created_ms')
if cur[1] and cur[1] ~= 'in_progress' then
  local r = redis.call('HMGET', key, 'state', 'status', 'content_type',
                       'retry_after', 'body', 'body_file', 'body_len',
                       'body_sha256')
  return {'recorded', r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]}
end
if cur[1] and cur[2] ~= ARGV[1] then
  return {'fenced'}
end
local created = cur[3] or ARGV[8]
redis.call('DEL', key)
redis.call('HSET', key, 'state', ARGV[3], 'fingerprint', ARGV[2],
           'owner', ARGV[1], 'created_ms', created, 'updated_ms', ARGV[8],
           'status', ARGV[4], 'content_type', ARGV[5])
if ARGV[6] ~= '' then
  redis.call('HSET', key, 'retry_after', ARGV[6])
end
if ARGV[9] == 'file' then
  redis.call('HSET', key, 'body_file', ARGV[10], 'body_len', ARGV[11],
             'body_sha256', ARGV[12])
else
  redis.call('HSET', key, 'body', ARGV[10])
end
redis.call('PEXPIRE', key, ARGV[7])
return {'ok'}
