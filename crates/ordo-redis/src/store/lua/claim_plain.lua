-- Takes over a base stream's entries left pending by dead instances (whose
-- announcement in the group's instance set has expired), and forgets dead
-- consumers that have nothing pending and have been silent for `forget idle
-- ms`, so consumer names do not accumulate. A live instance's entries are
-- never taken, however long it takes to work through its batch.
--
-- KEYS: stream
-- ARGV: group, consumer, count, forget idle ms, then the group's instance
--       set as the caller read it: name, announcement expiry (ms), ...
--
-- The instance set is read by the caller and passed in: on Redis Cluster
-- it lives in another slot than the stream (often on another node), which
-- one call cannot touch. An announcement renewed after that read only
-- makes its instance look dead for this pass if its previous one had
-- expired: it was dead then.
--
-- Returns how many entries were claimed.
local group, consumer, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local expiries = {}
for i = 5, #ARGV, 2 do
  expiries[ARGV[i]] = tonumber(ARGV[i + 1])
end
local claimed = 0
for _, raw in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], group)) do
  local info = to_map(raw)
  local name = info['name']
  local expiry = expiries[name]
  local live = expiry and expiry > now
  if name ~= consumer and not live then
    if tonumber(info['pending']) > 0 and claimed < count then
      local args = {KEYS[1], group, consumer, 0}
      for _, pending in ipairs(redis.call('XPENDING', KEYS[1], group, '-', '+', count - claimed, name)) do
        args[#args + 1] = pending[1]
      end
      if #args > 4 then
        claimed = claimed + #args - 4
        args[#args + 1] = 'JUSTID'
        redis.call('XCLAIM', unpack(args))
      end
    elseif tonumber(info['pending']) == 0 and tonumber(info['idle']) > tonumber(ARGV[4]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], group, name)
    end
  end
end
return claimed
