-- Halts a partition on a poison message, under the fence: records the head
-- and why, and lists the partition as halted.
--
-- KEYS: lease key, halt key, halted set
-- ARGV: lease value, halted-set member, group, category, key, lane, head id,
--       error, attempts, owner
--
-- Returns {'fenced', holder} or {'ok', halted at (ms)}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
local at = now_ms()
redis.call('HSET', KEYS[2],
  'group', ARGV[3], 'category', ARGV[4], 'key', ARGV[5], 'lane', ARGV[6], 'head', ARGV[7],
  'error', ARGV[8], 'attempts', ARGV[9], 'owner', ARGV[10], 'at', at)
redis.call('SADD', KEYS[3], ARGV[2])
return {'ok', at}
