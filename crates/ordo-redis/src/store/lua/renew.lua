#!lua flags=allow-cross-slot-keys
-- Renews every lease an instance holds on one Redis node, in one call per
-- heartbeat, whatever the number of leases.
--
-- KEYS[1]: one of the lease keys (a Redis Cluster routes the call by it)
-- ARGV: ttl ms, then a pair per lease: its key and the value expected in it
--
-- Returns the (1-based) positions of the pairs whose lease is no longer held.
--
-- Like acquire, union, publish and ack (the scripts that work per node), it
-- takes key names in ARGV: a Redis Cluster refuses a
-- call whose declared keys span slots (CROSSSLOT), and the leases of one
-- node's partitions sit in as many slots as there are partitions. The
-- `allow-cross-slot-keys` flag lets one call touch every slot its node
-- serves; a key of a slot the node no longer serves (after a failover or a
-- resharding) fails the call, and the caller groups the leases by node again.
local lost = {}
for i = 1, (#ARGV - 1) / 2 do
  local key, expected = ARGV[2 * i], ARGV[2 * i + 1]
  if redis.call('GET', key) == expected then
    redis.call('PEXPIRE', key, ARGV[1])
  else
    lost[#lost + 1] = i
  end
end
return lost
