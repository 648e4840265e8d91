-- webhook.lua: what the provider's webhook route reads and writes beside
-- the record scripts (docs/API.md, section 17.5). One key per call (Redis Cluster).
-- KEYS[1]  'peek': a record; the others: an event, <prefix>event:<id>
-- ARGV[1]  the operation:
--   'peek'               reads the record, writes nothing: {state,
--                        status, content_type, retry_after, body,
--                        body_file, body_len, body_sha256, expires_ms (a
--                        settled record's fields in record.lua's order),
--                        fingerprint, request}; state nil when there is
--                        no record
--   'begin', lease_ms    claims the event for this delivery: SET NX with
--                        the value 'processing' for lease_ms. 'new', or
--                        {'seen', value}: 'processing' (another delivery
--                        is at it) or what the event came to
--   'done', result, ttl_ms
--                        the event came to result: kept ttl_ms, so a
--                        redelivery within it changes nothing. 1
--   'forget'             the delivery could not decide (it answered 503,
--                        the provider delivers again): the claim goes,
--                        unless the event was decided meanwhile. 1
local op, key = ARGV[1], KEYS[1]
local D = '^[1-9]%d*$'
if #KEYS ~= 1 then
  return redis.error_reply('ERR webhook: bad arguments')
end
if op == 'peek' and #ARGV == 1 then
  return redis.call('HMGET', key, 'state', 'status', 'content_type',
                    'retry_after', 'body', 'body_file', 'body_len',
                    'body_sha256', 'expires_ms', 'fingerprint', 'request')
end
if op == 'begin' and #ARGV == 2 and string.find(ARGV[2], D)
    and #ARGV[2] <= 12 then
  if redis.call('SET', key, 'processing', 'NX', 'PX', ARGV[2]) then
    return 'new'
  end
  return {'seen', redis.call('GET', key)}
end
if op == 'done' and #ARGV == 3 and ARGV[2] ~= '' and ARGV[2] ~= 'processing'
    and string.find(ARGV[3], D) and #ARGV[3] <= 12 then
  redis.call('SET', key, ARGV[2], 'PX', ARGV[3])
  return 1
end
if op == 'forget' and #ARGV == 1 then
  if redis.call('GET', key) == 'processing' then
    redis.call('DEL', key)
  end
  return 1
end
return redis.error_reply('ERR webhook: bad arguments')
