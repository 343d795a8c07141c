-- The next held message of a resolved key of a hashed partition, under the
-- fence; when it holds none any more, the key stops holding (its held
-- stream and its member of the holding set go), atomically with the check.
--
-- Each call is an attempt of the key (numbered like its handler attempts,
-- in the key's own attempt sequence) and, like park.lua, halt.lua and
-- commit.lua, a call of an attempt closed already is refused: a copy that
-- reached Redis late (delayed on one connection past its client's timeout,
-- after the client asked again and went on). Ending the holding closes the
-- call's attempt; acknowledging the held message it answered (ack_held.lua)
-- closes it too. Without the guard, a late copy landing once the held
-- stream is empty would end the holding while the owner moves the key's
-- next message into the held stream (hold.lua): a held stream nobody
-- lists, whose message the next owner would never run.
--
-- KEYS: lease key, held stream, holding keys (set), parked keys (hash),
--       the key's attempt sequence
-- ARGV: lease value, key, attempt, sequence ttl ms
--
-- Returns {'fenced', holder}, {'stale'} (the attempt is closed: only an
-- earlier copy of the same call, which ended the holding, can have closed
-- it while its caller waits), {'parked'} (an operator has not resolved it,
-- or it was parked again), {'entry', {id, {field, value...}}} or {'done'}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
if attempt_closed(KEYS[5], ARGV[1], ARGV[3]) then
  return {'stale'}
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
close_attempt(KEYS[5], ARGV[1], ARGV[3], ARGV[4])
return {'done'}
