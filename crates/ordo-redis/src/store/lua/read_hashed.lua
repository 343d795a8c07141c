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
return read_lanes({KEYS[2], KEYS[3]}, group, consumer, count, function(lane, stream)
  local after = ARGV[4 + lane]
  while true do
    local pending = read_group(group, consumer, count, stream, after)
    if #pending == 0 then
      return {}
    end
    local live = live_entries(stream, group, pending)
    if #live > 0 then
      return live
    end
    after = pending[#pending][1]
  end
end)
