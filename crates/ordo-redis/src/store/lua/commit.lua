-- Applies a handler's Redis effects only while its lease is held at the
-- token it handled the message under: a stalled owner that wakes up
-- mid-handler cannot land an effect after the next owner's.
--
-- Each call carries a fresh commit id. The client may send one call twice
-- (fred resends the commands in flight when a connection drops, not knowing
-- whether they ran), so the marker key remembers the last commit applied
-- under this lease key, with its replies: a call whose id it holds returns
-- those replies again without applying anything. The marker is checked
-- before the fence, since the first run was applied under the lease even if
-- the lease has moved on since.
--
-- A commit made by a handler attempt the partition has moved past (the
-- worker closed it: acknowledged the message, or started another attempt)
-- is refused: it was delayed on its connection past its client's timeout,
-- and applying it now would land it after the effects of later attempts and
-- messages, under the same lease.
--
-- KEYS: lease key, commit marker, attempt sequence, then every key the
--       operations touch (for Redis Cluster routing; the operations name
--       their keys in their arguments)
-- ARGV: lease value, commit id, marker ttl ms, attempt (0: unsequenced),
--       operation count, then per operation: command, argument count,
--       arguments...
--
-- Returns {'fenced', holder}, {'stale', last closed attempt} or
-- {'ok', reply...}.
-- The commands a fenced commit may run: written in from the Rust list
-- (`fence::ALLOWED`) when the script is built, so there is one list.
local allowed = {--[[ALLOWED]]}
local marker = redis.call('GET', KEYS[2])
if marker then
  local last = cmsgpack.unpack(marker)
  if last[1] == ARGV[2] then
    return last[2]
  end
end
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
if attempt_closed(KEYS[3], ARGV[1], ARGV[4]) then
  return {'stale', closed_attempt(KEYS[3], ARGV[1])}
end
-- Validate every operation before applying any, so a bad one applies nothing.
local ops = {}
local at = 6
for _ = 1, tonumber(ARGV[5]) do
  local command, argc = string.upper(ARGV[at]), tonumber(ARGV[at + 1])
  if not allowed[command] then
    return redis.error_reply('ORDO command ' .. command .. ' is not allowed in a fenced commit')
  end
  ops[#ops + 1] = {command, {unpack(ARGV, at + 2, at + 1 + argc)}}
  at = at + 2 + argc
end
local replies = {'ok'}
for _, op in ipairs(ops) do
  replies[#replies + 1] = redis.call(op[1], unpack(op[2]))
end
redis.call('SET', KEYS[2], cmsgpack.pack({ARGV[2], replies}), 'PX', ARGV[3])
return replies
