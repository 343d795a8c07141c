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

local last_ids = {'0-0', '0-0'}
local newest_ms = nil
local exists = false
for lane = 1, 2 do
  local stream = KEYS[2 + lane]
  if redis.call('EXISTS', stream) == 1 then
    exists = true
    local pending = live_entries(stream, group, read_group(group, consumer, count, stream, '0'))
    if #pending > 0 then
      return {'entries', lane, pending, 1}
    end
    local fresh = read_group(group, consumer, count, stream, '>')
    if #fresh > 0 then
      return {'entries', lane, fresh, 0}
    end
    local last = to_map(redis.call('XINFO', 'STREAM', stream))['last-generated-id']
    last_ids[lane] = last
    local ms = parse_id(last)
    if newest_ms == nil or ms > newest_ms then
      newest_ms = ms
    end
  end
end
if not exists then
  return {'gone'}
end
return {'idle', last_ids[1], last_ids[2], now_ms() - newest_ms}
