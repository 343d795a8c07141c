-- Takes over a base stream's entries left pending by consumers that have
-- been silent for `min idle ms` (dead instances), and forgets consumers
-- that have nothing pending and have been silent for `forget idle ms`, so
-- consumer names do not accumulate.
--
-- KEYS: stream
-- ARGV: group, consumer, min idle ms, count, forget idle ms
--
-- Returns how many entries were claimed.
local group, consumer = ARGV[1], ARGV[2]
local claimed = redis.call('XAUTOCLAIM', KEYS[1], group, consumer, ARGV[3], '0-0', 'COUNT', ARGV[4], 'JUSTID')
for _, raw in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], group)) do
  local info = to_map(raw)
  if info['name'] ~= consumer and tonumber(info['pending']) == 0 and tonumber(info['idle']) > tonumber(ARGV[5]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], group, info['name'])
  end
end
return #claimed[2]
