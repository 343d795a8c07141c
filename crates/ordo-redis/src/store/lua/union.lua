#!lua flags=allow-cross-slot-keys,no-writes
-- The members of several sets that one Redis node serves, in one call: the
-- buckets of a category index in the slots of one cluster node, so that
-- discovery costs one call per node and second, whatever the number of
-- slots in use.
--
-- KEYS[1]: one of the sets (a Redis Cluster routes the call by it)
-- ARGV: every set to read, all served by that node
--
-- Like lost.lua, it takes key names in ARGV: a cluster refuses declared
-- keys of several slots in one call; `allow-cross-slot-keys` lets the script
-- read every slot its node serves (a slot that moved fails the call, and the
-- caller groups the sets by node again).
local seen = {}
local members = {}
for i = 1, #ARGV do
  for _, member in ipairs(redis.call('SMEMBERS', ARGV[i])) do
    if not seen[member] then
      seen[member] = true
      members[#members + 1] = member
    end
  end
end
return members
