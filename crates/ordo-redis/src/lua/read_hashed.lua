-- The fenced read of one hashed partition (many keys, each in order): the
-- lease holder's next entries, read ahead while earlier entries are still
-- being handled.
--
-- KEYS: lease key, primary lane, backfill lane
-- ARGV: lease value, group, consumer, count, then per lane (primary,
--       backfill) the id of the last entry the owner got from it ('0'
--       when none yet)
--
-- Pending entries after the owner's last one come first: a previous
-- owner's unacknowledged entries (the reclaim, from '0'), and entries a
-- read of this owner delivered without the owner getting them (its reply
-- lost with a timeout, or the read run twice by a client that resent it
-- after a reconnect). Only then new entries. Every owner reads as the same
-- consumer name, as in read.lua.
--
-- That also makes a read the client sends twice (it resends the commands
-- in flight when a connection drops) return the same entries: the second
-- run finds the first run's entries pending after the same id.
--
-- Returns one of:
--   {'fenced', current holder}
--   {'entries', lane (1 primary, 2 backfill), {{id, {field, value...}}...},
--    1 when they were pending else 0}
--   {'idle', primary last id, backfill last id, ms since the last entry}
--   {'gone'}  (neither lane exists: the partition was reaped)
local lease, group, consumer, count = KEYS[1], ARGV[2], ARGV[3], ARGV[4]
local fenced = fence(lease, ARGV[1])
if fenced then
  return fenced
end
local last_ids = {'0-0', '0-0'}
local newest_ms = nil
local exists = false
for lane = 1, 2 do
  local stream = KEYS[1 + lane]
  if redis.call('EXISTS', stream) == 1 then
    exists = true
    local after = ARGV[4 + lane]
    while true do
      local pending = read_group(group, consumer, count, stream, after)
      if #pending == 0 then
        break
      end
      local live = live_entries(stream, group, pending)
      if #live > 0 then
        return {'entries', lane, live, 1}
      end
      after = pending[#pending][1]
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
