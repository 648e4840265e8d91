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
-- ARGV[11] file: body length in bytes   (inline: ignored, may be omitted)
-- ARGV[12] file: hex SHA-256 of the body (inline: ignored, may be omitted)
-- Writes only when the caller still owns the claim or the key has vanished
-- (its claim expired and nobody took it). Returns one of
--   {'ok'}         written; also when this owner's outcome was already
--                  written (a record re-sent after a lost reply)
--   {'mismatch'}   the key now holds another request's fingerprint (the
--                  claim expired and a different request took the key)
--   {'recorded', state, status, content_type, retry_after,
--    body, body_file, body_len, body_sha256}
--                  another attempt recorded first: first recording wins
--   {'fenced'}     another attempt holds the claim now; nothing written
-- Arguments are checked before any write, numbers within bounds too: Redis
-- does not roll back a script that fails half-way, and a record without body
-- or TTL could never replay or would never expire.
local MAX_NOW_MS = 1e14        -- year 5138: any sane wall clock
local MAX_TTL_MS = 31536000000 -- one year
local MAX_RETRY_AFTER_S = 1e9
local MAX_BODY_LEN = 1e13
local function bounded_int(s, max)
  return s ~= nil and #s <= 15 and string.match(s, '^[1-9][0-9]*$') ~= nil
    and tonumber(s) <= max
end
local mode = ARGV[9]
if #KEYS ~= 1 or #ARGV < 10 or #ARGV > 12 or ARGV[1] == '' or ARGV[2] == ''
    or (ARGV[3] ~= 'completed' and ARGV[3] ~= 'failed')
    or not string.match(ARGV[4], '^[1-5][0-9][0-9]$') or ARGV[5] == ''
    or (ARGV[6] ~= '' and not bounded_int(ARGV[6], MAX_RETRY_AFTER_S))
    or not bounded_int(ARGV[7], MAX_TTL_MS)
    or not bounded_int(ARGV[8], MAX_NOW_MS)
    or (mode ~= 'inline' and mode ~= 'file')
    or (mode == 'file' and (#ARGV ~= 12 or ARGV[10] == '' or
        not bounded_int(ARGV[11], MAX_BODY_LEN) or
        not string.match(ARGV[12], '^' .. string.rep('[0-9a-f]', 64) .. '$'))) then
  return redis.error_reply('ERR record: bad arguments')
end
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'state', 'owner', 'created_ms',
                       'fingerprint')
if cur[1] then
  if cur[4] ~= ARGV[2] then
    return {'mismatch'}
  end
  if cur[1] ~= 'in_progress' then
    if cur[2] == ARGV[1] then
      return {'ok'}
    end
    local r = redis.call('HMGET', key, 'state', 'status', 'content_type',
                         'retry_after', 'body', 'body_file', 'body_len',
                         'body_sha256')
    return {'recorded', r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]}
  end
  if cur[2] ~= ARGV[1] then
    return {'fenced'}
  end
end
-- One HSET writes every field: the claim's fields (state, fingerprint,
-- owner, created_ms, updated_ms) are all overwritten, so nothing is deleted.
local f = {'state', ARGV[3], 'fingerprint', ARGV[2], 'owner', ARGV[1],
           'created_ms', cur[3] or ARGV[8], 'updated_ms', ARGV[8],
           'status', ARGV[4], 'content_type', ARGV[5]}
if ARGV[6] ~= '' then
  f[#f + 1] = 'retry_after'; f[#f + 1] = ARGV[6]
end
if mode == 'file' then
  f[#f + 1] = 'body_file'; f[#f + 1] = ARGV[10]
  f[#f + 1] = 'body_len'; f[#f + 1] = ARGV[11]
  f[#f + 1] = 'body_sha256'; f[#f + 1] = ARGV[12]
else
  f[#f + 1] = 'body'; f[#f + 1] = ARGV[10]
end
redis.call('HSET', key, unpack(f))
redis.call('PEXPIRE', key, ARGV[7])
return {'ok'}
