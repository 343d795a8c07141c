-- Halts a partition on a poison message, under the fence: records the head
-- and why, and lists the partition as halted.
--
-- The halt closes the attempt that failed last: the same halt arriving
-- again (resent by the client after a reconnect, or delayed on its
-- connection) is refused, so it cannot halt again a partition an operator
-- resolved meanwhile.
--
-- KEYS: lease key, halt key, halted set bucket (in the partition's slot,
--       listed in the halted directory by the caller first), attempt sequence
-- ARGV: lease value, halted-set member, group, category, key, lane, head id,
--       error, attempts, owner, attempt, sequence ttl ms
--
-- Returns {'fenced', holder}, {'stale'} or {'ok', halted at (ms)}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
if attempt_closed(KEYS[4], ARGV[1], ARGV[11]) then
  return {'stale'}
end
close_attempt(KEYS[4], ARGV[1], ARGV[11], ARGV[12])
local at = now_ms()
redis.call('HSET', KEYS[2],
  'group', ARGV[3], 'category', ARGV[4], 'key', ARGV[5], 'lane', ARGV[6], 'head', ARGV[7],
  'error', ARGV[8], 'attempts', ARGV[9], 'owner', ARGV[10], 'at', at)
redis.call('SADD', KEYS[3], ARGV[2])
return {'ok', at}
