-- The next held message of a resolved key of a hashed partition, under the
-- fence; when it holds none any more, the key stops holding (its held
-- stream and its member of the holding set go), atomically with the check.
--
-- KEYS: lease key, held stream, holding keys (set), parked keys (hash)
-- ARGV: lease value, key
--
-- Returns {'fenced', holder}, {'parked'} (an operator has not resolved it,
-- or it was parked again), {'entry', {id, {field, value...}}} or {'done'}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
if redis.call('HEXISTS', KEYS[4], ARGV[2]) == 1 then
  return {'parked'}
end
local head = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
if head[1] then
  return {'entry', head[1]}
end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[3], ARGV[2])
return {'done'}
