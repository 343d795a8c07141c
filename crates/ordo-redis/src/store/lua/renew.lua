#!lua flags=allow-cross-slot-keys
-- Renews the leases an instance holds on one Redis node, in one call per
-- heartbeat and 1,000 leases (the caller's chunks: no call's frame grows
-- with the partitions).
--
-- KEYS[1]: one of the lease keys (a Redis Cluster routes the call by it)
-- ARGV: ttl ms, `1` when one command may name keys of many slots (a single
--       Redis; `0` on a Redis Cluster node, where each command must keep to
--       one slot), then a pair per lease: its key and the value expected in
--       it
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
-- The leases' values come in one `MGET` per chunk on a single Redis (a
-- lookup each rather than a command each; a cluster node reads one per
-- `MGET`); only the held ones then get their `PEXPIRE`.
local ttl = ARGV[1]
local chunk = ARGV[2] == '1' and 1000 or 1
local count = (#ARGV - 2) / 2
local lost = {}
for first = 1, count, chunk do
  local last = math.min(first + chunk - 1, count)
  local names = {}
  for i = first, last do
    names[#names + 1] = ARGV[2 * i + 1]
  end
  local values = redis.call('MGET', unpack(names))
  for i = first, last do
    if values[i - first + 1] == ARGV[2 * i + 2] then
      redis.call('PEXPIRE', ARGV[2 * i + 1], ttl)
    else
      lost[#lost + 1] = i
    end
  end
end
return lost
