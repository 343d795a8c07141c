#!lua flags=allow-cross-slot-keys,no-writes
-- Re-checks every armed doorbell a waker has on one Redis node, in one
-- call per node and interval, whatever the number of idle partitions: the
-- bounded fallback for a wake-up that never came.
--
-- A partition needs its worker again when its doorbell is gone (a publish
-- rang it, and the ring was lost: the subscription was dropped by a
-- failover or a slot move, or the connection; or the partition was retired,
-- or Redis lost the doorbell) or when one of its lanes has an entry after
-- the id the worker read up to (one added without the publish script, which
-- rings nothing: XADD by hand, a replay tool).
--
-- KEYS[1]: one of the doorbells (a Redis Cluster routes the call by it).
--       Every name travels in ARGV, as in renew.lua: the doorbells of one
--       node sit in as many slots as there are partitions, and the
--       `allow-cross-slot-keys` flag lets one call read every slot its node
--       serves; a name of a slot the node no longer serves fails the call,
--       and the caller groups the doorbells by node again.
-- ARGV: per partition: its doorbell, its lane count, then per lane the
--       lane and the id the worker read it up to
--
-- Returns the (1-based) positions of the partitions that need their worker.
local news = {}
local at, position = 1, 0
while at <= #ARGV do
  position = position + 1
  local doorbell, lanes = ARGV[at], tonumber(ARGV[at + 1])
  local found = redis.call('EXISTS', doorbell) == 0
  for lane = 0, lanes - 1 do
    if found then
      break
    end
    local stream, id = ARGV[at + 2 + 2 * lane], ARGV[at + 3 + 2 * lane]
    found = #redis.call('XREVRANGE', stream, '+', '(' .. id, 'COUNT', 1) > 0
  end
  if found then
    news[#news + 1] = position
  end
  at = at + 2 + 2 * lanes
end
return news
