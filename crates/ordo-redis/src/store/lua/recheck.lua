#!lua flags=allow-cross-slot-keys,no-writes
-- Re-checks every idle partition a waker has armed a doorbell for on one
-- Redis node, in one call per node and interval, whatever the number of
-- idle partitions: the bounded fallback for a wake-up that never came.
--
-- A partition needs its worker again when one of its lanes has an entry
-- after the id the worker read it up to: published while nobody listened
-- to its doorbell's ring (the subscription was dropped by a failover or a
-- slot move, or with the connection; the doorbell is gone then), or added
-- without the publish script, which rings nothing (XADD by hand, a replay
-- tool). The doorbell itself is not looked at: every entry a ring stands
-- for is in a lane.
--
-- KEYS[1]: the first lane named in ARGV (a Redis Cluster routes the call
--       by it). Every name travels in ARGV, as in renew.lua: the lanes of
--       one node sit in as many slots as there are partitions, and the
--       `allow-cross-slot-keys` flag lets one call read every slot its node
--       serves; a name of a slot the node no longer serves fails the call,
--       and the caller groups the partitions by node again.
-- ARGV: per partition: its lane count, then per lane the lane and the id
--       the worker read it up to
--
-- Returns the (1-based) positions of the partitions that need their worker.
local news = {}
local at, position = 1, 0
while at <= #ARGV do
  position = position + 1
  local lanes = tonumber(ARGV[at])
  for lane = 0, lanes - 1 do
    local stream, id = ARGV[at + 1 + 2 * lane], ARGV[at + 2 + 2 * lane]
    if #redis.call('XREVRANGE', stream, '+', '(' .. id, 'COUNT', 1) > 0 then
      news[#news + 1] = position
      break
    end
  end
  at = at + 1 + 2 * lanes
end
return news
