#!lua flags=allow-cross-slot-keys,no-writes
-- Re-checks every idle partition a waker has armed a doorbell for on one
-- Redis node, in one call per node, interval and 500 idle partitions (the
-- caller's chunks: no call's frame grows with the partitions): the bounded
-- fallback for a wake-up that never came.
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
-- ARGV: `1` when one command may name keys of many slots (a single Redis;
--       `0` on a Redis Cluster node, where each command must keep to one
--       slot), then per partition: its lane count, then per lane the lane
--       and the id the worker read it up to
--
-- Returns the (1-based) positions of the partitions that need their worker,
-- in order.
--
-- One non-blocking `XREAD` per chunk of lanes answers for all of them (a
-- lane with an entry after the given id is in its reply, the others are
-- not): a lookup per lane rather than a command and its reply per lane
-- (on a single Redis; a cluster node reads one lane per `XREAD`). A chunk
-- names a lane once: two groups' workers of one partition read it up to
-- different ids, so the second starts another chunk.
local chunk = ARGV[1] == '1' and 1000 or 1
local news, needs = {}, {}
local lanes, ids, owner, named = {}, {}, {}, {}
local function read_chunk()
  if #lanes == 0 then
    return
  end
  local args = {'COUNT', 1, 'STREAMS'}
  for i = 1, #lanes do
    args[#args + 1] = lanes[i]
  end
  for i = 1, #ids do
    args[#args + 1] = ids[i]
  end
  local reply = redis.call('XREAD', unpack(args))
  if reply then
    for _, stream in ipairs(reply) do
      needs[owner[named[stream[1]]]] = true
    end
  end
  lanes, ids, owner, named = {}, {}, {}, {}
end
local at, position = 2, 0
while at <= #ARGV do
  position = position + 1
  local count = tonumber(ARGV[at])
  for lane = 0, count - 1 do
    local stream = ARGV[at + 1 + 2 * lane]
    if named[stream] ~= nil or #lanes == chunk then
      read_chunk()
    end
    local n = #lanes + 1
    lanes[n], ids[n], owner[n] = stream, ARGV[at + 2 + 2 * lane], position
    named[stream] = n
  end
  at = at + 1 + 2 * count
end
read_chunk()
for p = 1, position do
  if needs[p] then
    news[#news + 1] = p
  end
end
return news
