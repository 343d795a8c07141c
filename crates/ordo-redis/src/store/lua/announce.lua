-- The instance heartbeat of the fair share: announces this instance as a
-- live consumer of each group, prunes instances whose announcement expired,
-- and returns who is live.
--
-- KEYS: one instance sorted set per group
-- ARGV: instance id, ttl ms
--
-- Returns, per group, the live instance ids.
local now = now_ms()
local expiry = now + tonumber(ARGV[2])
local live = {}
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], expiry, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  live[i] = redis.call('ZRANGE', KEYS[i], 0, -1)
end
return live
