-- Arms a partition's doorbell for a waiting worker, unless an entry arrived
-- after what the worker read: then nothing is armed and the worker reads
-- again. The check and the arming are one step, so a publish lands either
-- before (and is seen here) or after (and rings the doorbell).
--
-- KEYS: the partition's doorbell, then its lanes
-- ARGV: the id each lane was read up to
--
-- Returns 1 when a lane has an entry after its id, else 0 (armed).
for i = 2, #KEYS do
  if #redis.call('XREVRANGE', KEYS[i], '+', '(' .. ARGV[i - 1], 'COUNT', 1) > 0 then
    return 1
  end
end
redis.call('SET', KEYS[1], '1')
return 0
