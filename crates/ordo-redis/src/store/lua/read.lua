-- The fenced read of one partition: the lease holder's next batch, pending
-- entries first (a previous owner's unacknowledged entries: the reclaim),
-- then new ones; the primary lane before the backfill lane.
--
-- KEYS: lease key, halt key, primary lane, backfill lane
-- ARGV: lease value, group, consumer, count
--
-- Every owner reads as the same consumer name, so the group's pending list
-- is the partition's: a new owner takes over the previous owner's pending
-- entries by reading them here, under its lease, and nothing accumulates
-- per generation. A stale owner is refused before it can read anything.
--
-- Returns one of:
--   {'fenced', current holder}
--   {'halted', head id}
--   {'entries', lane (1 primary, 2 backfill), {{id, {field, value...}}...},
--    1 when they were pending (delivered before, not acknowledged) else 0}
--   {'idle', primary last id, backfill last id, ms since the last entry}
--   {'gone'}  (neither lane exists: the partition was reaped)
local lease, halt, group, consumer, count = KEYS[1], KEYS[2], ARGV[2], ARGV[3], ARGV[4]
local fenced = fence(lease, ARGV[1])
if fenced then
  return fenced
end
local head = redis.call('HGET', halt, 'head')
if head then
  return {'halted', head}
end

return read_lanes({KEYS[3], KEYS[4]}, group, consumer, count, function(_, stream)
  return live_entries(stream, group, read_group(group, consumer, count, stream, '0'))
end)
