-- Moves messages of a parked (or resolved, not yet drained) key of a hashed
-- partition out of a lane into the key's held stream, behind what it holds
-- already, under the fence: the key's messages keep their order, and the
-- lane can be trimmed past them.
--
-- KEYS: lease key, held stream, lane
-- ARGV: lease value, group, lane name, then per entry: id, field count,
--       fields (name, value, ...)
--
-- An entry no longer pending in the lane is held already (this call ran
-- before and its reply was lost): it is not held twice.
--
-- Returns {'fenced', holder} or {'ok'}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
local group, lane = ARGV[2], ARGV[3]
local at = 4
while at <= #ARGV do
  local id, count = ARGV[at], tonumber(ARGV[at + 1])
  if #redis.call('XPENDING', KEYS[3], group, id, id, 1) > 0 then
    redis.call('XADD', KEYS[2], '*', 'lane', lane, 'source_id', id, unpack(ARGV, at + 2, at + 1 + count))
    redis.call('XACK', KEYS[3], group, id)
  end
  at = at + 2 + count
end
return {'ok'}
