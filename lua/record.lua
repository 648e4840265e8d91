-- record.lua: record the outcome of a claimed attempt (fenced by owner).
-- KEYS[1]  the record
-- ARGV[1]  owner token of this attempt
-- ARGV[2]  fingerprint
-- ARGV[3]  per-parameter digests (written only if the claim has vanished)
-- ARGV[4]  state: 'completed', 'failed' or 'unknown' (the provider's
--          outcome is ambiguous: not settled; a retry or the completer
--          takes the record over, see claim.lua and resume.lua)
-- ARGV[5]  HTTP status
-- ARGV[6]  content type
-- ARGV[7]  Retry-After value, or '' for none
-- ARGV[8]  TTL in milliseconds
-- ARGV[9]  now, Unix milliseconds (file mode: at or before the file's write)
-- ARGV[10] expires_ms: now + TTL (stored, so every replay names the same
--          expiry; passed in because formatting a Lua number costs more)
-- ARGV[11] 'inline' or 'file'
-- ARGV[12] inline: the body; file: the file name relative to spill_dir
-- ARGV[13] file: body length in bytes   (inline: ignored, may be omitted)
--          unknown (inline only): the request's canonical parameters,
--          kept so that the completer can ask the provider again
-- ARGV[14] file: hex SHA-256 of the body (inline: ignored, may be omitted)
--          unknown (optional): sent_ms, the latest an attempt of the record
--          may have sent (a read-only probe keeps the earlier one; absent:
--          now); claim.lua and resume.lua take it as the quiet point
-- ARGV[15] unknown (optional): probe_lte, where the next read of the
--          provider's list goes on from (its created[lte], the provider's
--          Unix seconds: the part above was read and proven empty); '0':
--          none, the next read starts at the top
-- Writes only when the caller still owns the claim (or the lease on an
-- unknown record) or the key has vanished (its claim expired and nobody
-- took it). A settled record (completed, failed) never changes again.
-- Returns one of
--   'ok'           written; also when this owner's outcome was already
--                  written (a record re-sent after a lost reply)
--   {'mismatch', digests}
--                  the key now holds another request's fingerprint (the
--                  claim expired and a different request took the key);
--                  digests: its stored param_digests (nil if none)
--   {'recorded', state, status, content_type, retry_after,
--    body, body_file, body_len, body_sha256, expires_ms}
--                  another attempt recorded first: first recording wins
--   {'fenced', created_ms}
--                  another attempt holds the claim (made then); nothing
--                  written
-- Arguments are checked before any write, numbers within bounds too: Redis
-- does not roll back a script that fails half-way, and a record without body
-- or TTL could never replay or would never expire.
local MAX_NOW_MS = 9e13        -- year 4821
local MAX_TTL_MS = 31536000000 -- one year
local MAX_RETRY_AFTER_S = 1e9
local MAX_BODY_LEN = 1e13
-- Numbers: digits only, no leading zero (the pattern), then the bounds
-- (the arithmetic runs only on digits). Every library call costs: the
-- checks are inline, with string.find held in a local.
local find = string.find
local mode, status, retry = ARGV[11], ARGV[5], ARGV[7]
local ttl, now, expires = ARGV[8], ARGV[9], ARGV[10]
local D = '^[1-9]%d*$'
local unknown = ARGV[4] == 'unknown'
if #KEYS ~= 1 or #ARGV < 12 or #ARGV > 15 or ARGV[1] == '' or ARGV[2] == ''
    or ARGV[3] == ''
    or (ARGV[4] ~= 'completed' and ARGV[4] ~= 'failed' and not unknown)
    or (unknown and (mode ~= 'inline' or #ARGV < 13 or ARGV[13] == ''
        or (#ARGV >= 14 and (#ARGV[14] > 15 or not find(ARGV[14], D)
            or ARGV[14] + 0 > now + 0))
        or (#ARGV == 15 and (#ARGV[15] > 15
            or not find(ARGV[15], '^%d+$')))))
    or not find(status, '^[1-5]%d%d$') or ARGV[6] == ''
    or (retry ~= '' and (#retry > 15 or not find(retry, D) or
        retry + 0 > MAX_RETRY_AFTER_S))
    or #ttl > 15 or not find(ttl, D) or ttl + 0 > MAX_TTL_MS
    or #now > 15 or not find(now, D) or now + 0 > MAX_NOW_MS
    or #expires > 15 or not find(expires, D) or expires + 0 ~= now + ttl
    or (mode ~= 'inline' and mode ~= 'file')
    or (mode == 'file' and (#ARGV ~= 14 or ARGV[12] == '' or
        #ARGV[13] > 15 or not find(ARGV[13], D) or
        ARGV[13] + 0 > MAX_BODY_LEN or #ARGV[14] ~= 64 or
        find(ARGV[14], '[^0-9a-f]'))) then
  return redis.error_reply('ERR record: bad arguments')
end
local key = KEYS[1]
-- Only the claim's owner may write. A token is written together with its
-- attempt's fingerprint, so the owner's own claim needs no fingerprint
-- check; the other cases are rare and read what they answer with.
local cur = redis.call('HMGET', key, 'state', 'owner')
local open = cur[1] == 'in_progress' or cur[1] == 'unknown'
if cur[2] == ARGV[1] then
  if not open then
    return 'ok'
  end
  if retry == '' and mode == 'inline' and cur[1] == 'in_progress' then
    -- the common case, without building a table: the claim's fingerprint,
    -- owner, created_ms and param_digests stay as they are
    redis.call('HSET', key, 'state', ARGV[4], 'updated_ms', now,
               'expires_ms', expires, 'status', status,
               'content_type', ARGV[6], 'body', ARGV[12])
    redis.call('PEXPIRE', key, ttl)
    return 'ok'
  end
elseif cur[1] then
  if redis.call('HGET', key, 'fingerprint') ~= ARGV[2] then
    return {'mismatch', redis.call('HGET', key, 'param_digests')}
  end
  if not open then
    local r = redis.call('HMGET', key, 'state', 'status', 'content_type',
                         'retry_after', 'body', 'body_file', 'body_len',
                         'body_sha256', 'expires_ms')
    return {'recorded', r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9]}
  end
  return {'fenced', redis.call('HGET', key, 'created_ms')}
end
local f = {'state', ARGV[4], 'updated_ms', now, 'expires_ms', expires,
           'status', status, 'content_type', ARGV[6]}
if not cur[1] then
  -- the claim vanished (expired, nobody took the key): written whole,
  -- created now
  f[#f + 1] = 'fingerprint'; f[#f + 1] = ARGV[2]
  f[#f + 1] = 'owner'; f[#f + 1] = ARGV[1]
  f[#f + 1] = 'created_ms'; f[#f + 1] = now
  f[#f + 1] = 'param_digests'; f[#f + 1] = ARGV[3]
end
if retry ~= '' then
  f[#f + 1] = 'retry_after'; f[#f + 1] = retry
end
if cur[1] == 'unknown' then
  -- written again over an unknown outcome: its answer, its lease and what
  -- was kept to ask the provider again go (the new ones are written below)
  redis.call('HDEL', key, 'request', 'lease_ms', 'retry_after', 'body',
             'body_file', 'body_len', 'body_sha256', 'sent_ms', 'probe_lte')
end
if unknown then
  f[#f + 1] = 'request'; f[#f + 1] = ARGV[13]
  f[#f + 1] = 'sent_ms'; f[#f + 1] = ARGV[14] or now
  if ARGV[15] and ARGV[15] ~= '0' then
    f[#f + 1] = 'probe_lte'; f[#f + 1] = ARGV[15]
  end
end
if mode == 'file' then
  f[#f + 1] = 'body_file'; f[#f + 1] = ARGV[12]
  f[#f + 1] = 'body_len'; f[#f + 1] = ARGV[13]
  f[#f + 1] = 'body_sha256'; f[#f + 1] = ARGV[14]
else
  f[#f + 1] = 'body'; f[#f + 1] = ARGV[12]
end
redis.call('HSET', key, unpack(f))
if mode == 'file' then
  -- A spilled body's record expires ttl after its file was written (now is
  -- taken then), not after it landed: a record landing late (a stalled
  -- responder, a reply lost and re-sent) must not outlive its file, which
  -- the spill collector removes ttl + lock_ttl_s after the file's mtime.
  redis.call('PEXPIREAT', key, expires)
else
  redis.call('PEXPIRE', key, ttl)
end
return 'ok'
