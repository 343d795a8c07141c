#!lua flags=allow-cross-slot-keys,no-writes
-- Re-checks every idle partition a waker has armed a doorbell for on one
-- Redis Cluster node, in one call per node, interval and 500 idle
-- partitions (the caller's chunks: no call's frame grows with the
-- partitions): the bounded fallback for a wake-up that never came. (On a
-- single Redis the caller sends the same lookup as one `XREAD` per 1,000
-- lanes, without a script: a command there may name keys of many slots.)
--
-- A partition needs its worker again when one of its lanes has an entry
-- after the id the worker read it up to: published while nobody listened
-- to its doorbell's ring (the subscription was dropped by a failover or a
-- slot move, or with the connection; the doorbell is gone then), or added
-- without the publish script, which rings nothing (XADD by hand, a replay
-- tool). The doorbell itself is not looked at: every entry a ring stands
-- for is in a lane.
--
-- KEYS[1]: the first lane named in ARGV (the cluster routes the call by
--       it). Every name travels in ARGV, as in lost.lua: the lanes of one
--       node sit in as many slots as there are partitions, and the
--       `allow-cross-slot-keys` flag lets one call read every slot its node
--       serves, one slot per command; a name of a slot the node no longer
--       serves fails the call, and the caller groups the partitions by node
--       again.
-- ARGV: per partition: its lane count, then per lane the lane and the id
--       the worker read it up to
--
-- Returns the (1-based) positions of the partitions that need their worker,
-- in order. A non-blocking `XREAD COUNT 1` of a lane from the id answers
-- exactly "an entry after it".
local news = {}
local at, position = 1, 0
while at <= #ARGV do
  position = position + 1
  local count = tonumber(ARGV[at])
  for lane = 0, count - 1 do
    if redis.call('XREAD', 'COUNT', 1, 'STREAMS', ARGV[at + 1 + 2 * lane], ARGV[at + 2 + 2 * lane]) then
      news[#news + 1] = position
      break
    end
  end
  at = at + 1 + 2 * count
end
return news
