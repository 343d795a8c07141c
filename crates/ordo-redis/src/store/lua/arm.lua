-- Arms a partition's doorbell for a waiting worker, unless an entry arrived
-- after what the worker read: then nothing is armed and the worker reads
-- again. The check and the arming are one step, so a publish lands either
-- before (and is seen here) or after (and rings the doorbell).
--
-- A partition the worker read and whose lanes are gone was retired since
-- (by this worker after it stopped waiting, or by another group's owner):
-- nothing is armed either, since a doorbell armed after the retirement
-- would stay for good unless the key is published again. The worker reads
-- again and finds the partition gone.
--
-- Once armed, a lane with nothing pending in the worker's group drops the
-- group's consumer (it holds nothing then; the next read creates it again):
-- an emptied lane's `MEMORY USAGE` is 664 bytes instead of 936 with its
-- group's consumer (`used_memory` falls by about 110 bytes per idle
-- partition and group). Only with nothing pending: deleting a consumer
-- deletes its pending entries.
--
-- KEYS: the partition's doorbell, then its lanes
-- ARGV: '1' when the worker read the partition (it existed then), else '0'
--       (a process manager's partition not created yet); then the id each
--       lane was read up to; then the worker's group and its consumer name
--
-- Returns 1 when a lane has an entry after its id or the partition was
-- retired, else 0 (armed).
for i = 2, #KEYS do
  if #redis.call('XREVRANGE', KEYS[i], '+', '(' .. ARGV[i], 'COUNT', 1) > 0 then
    return 1
  end
end
if ARGV[1] == '1' and redis.call('EXISTS', unpack(KEYS, 2)) == 0 then
  return 1
end
redis.call('SET', KEYS[1], '1')
local group, consumer = ARGV[#KEYS + 1], ARGV[#KEYS + 2]
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    -- A lane without the group (it joins at the lane's next publish)
    -- answers an error: nothing to drop there.
    local pending = redis.pcall('XPENDING', KEYS[i], group)
    if type(pending) == 'table' and pending[1] == 0 then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[i], group, consumer)
    end
  end
end
return 0
