-- Records (or clears) that a handler is paused on this instance by its
-- circuit breaker: one hash per group, one field per paused instance, so
-- `ordo status` and health can tell. The pausing instance refreshes its
-- record while it stays paused; a record not refreshed within its TTL
-- (its instance stopped or resumed without clearing it) is removed by the
-- next write, and ignored by readers until then.
--
-- KEYS: the group's paused hash
-- ARGV: instance id, record ('<since ms> <failed probes> <reason>', or ''
--       to clear), ttl ms
--
-- Returns the number of paused instances left.
local now = now_ms()
local ttl = tonumber(ARGV[3])
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], (now + ttl) .. ' ' .. ARGV[2])
end
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local expiry = tonumber(string.match(fields[i + 1], '^(%d+) '))
  if expiry == nil or expiry <= now then
    redis.call('HDEL', KEYS[1], fields[i])
  end
end
local left = redis.call('HLEN', KEYS[1])
if left > 0 and ARGV[2] ~= '' then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return left
