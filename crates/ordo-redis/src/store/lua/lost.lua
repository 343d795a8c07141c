#!lua flags=allow-cross-slot-keys
-- Finds which of the leases an owner believes it holds on one Redis node
-- are no longer held, in one call per 1,000 leases (the caller's chunks: no
-- call's frame grows with the partitions). Nothing is renewed: a lease has
-- no TTL, its holder's member key is what lives or expires.
--
-- KEYS[1]: one of the lease keys (a Redis Cluster routes the call by it)
-- ARGV: `1` when one command may name keys of many slots (a single Redis;
--       `0` on a Redis Cluster node, where each command must keep to one
--       slot), then a pair per lease: its key and the value expected in it
--
-- Returns the (1-based) positions of the pairs whose lease is no longer
-- held.
--
-- Like acquire, union, publish and ack (the scripts that work per node), it
-- takes key names in ARGV: a Redis Cluster refuses a call whose declared
-- keys span slots (CROSSSLOT), and the leases of one node's partitions sit
-- in as many slots as there are partitions. The `allow-cross-slot-keys`
-- flag lets one call touch every slot its node serves; a key of a slot the
-- node no longer serves (after a failover or a resharding) fails the call,
-- and the caller groups the leases by node again. The leases' values come
-- in one `MGET` per chunk on a single Redis (a cluster node reads one per
-- `MGET`).
local chunk = ARGV[1] == '1' and 1000 or 1
local count = (#ARGV - 1) / 2
local lost = {}
for first = 1, count, chunk do
  local last = math.min(first + chunk - 1, count)
  local names = {}
  for i = first, last do
    names[#names + 1] = ARGV[2 * i]
  end
  local values = redis.call('MGET', unpack(names))
  for i = first, last do
    if values[i - first + 1] ~= ARGV[2 * i + 1] then
      lost[#lost + 1] = i
    end
  end
end
return lost
