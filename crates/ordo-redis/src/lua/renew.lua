-- Renews every lease an instance holds, in one call per heartbeat.
--
-- KEYS: lease keys
-- ARGV: ttl ms, then the value expected in each lease key
--
-- Returns the (1-based) positions of the leases that are no longer held.
local lost = {}
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[1])
  else
    lost[#lost + 1] = i
  end
end
return lost
