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
-- A commit made by a handler run of a message (the partition worker's
-- fence) also names the message and its number among the run's commits
-- (1, 2, ...). The marker then keeps, per message until the message's
-- acknowledgement takes it out (ack.lua, ack_held.lua), every commit of it
-- by number with its replies: a run of the message again (after a
-- failover, a lost reply, a failed attempt, an operator's retry) whose
-- commit of the same number finds it there applies nothing and gets the
-- first run's replies. So a message's effect lands once, whoever runs it
-- again under whichever lease. The marker has no TTL while it holds a
-- message's commits; otherwise (a fence built outside the consumer) it
-- expires after `marker ttl`, as before.
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
--       message id ('' when none), the commit's number in the run,
--       operation count, then per operation: command, argument count,
--       arguments...
--
-- The marker: msgpack {last commit id, its replies, {[message id] =
-- {[number] = replies}} of the messages not acknowledged yet}.
--
-- Returns {'fenced', holder}, {'stale', last closed attempt} or
-- {'ok', reply...}.
-- The commands a fenced commit may run: written in from the Rust list
-- (`fence::ALLOWED`) when the script is built, so there is one list.
local allowed = {--[[ALLOWED]]}
local marker = redis.call('GET', KEYS[2])
local last = nil
if marker then
  last = cmsgpack.unpack(marker)
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
local message, number = ARGV[5], ARGV[6]
-- The messages' commits not acknowledged yet (an earlier run's included).
local messages = {}
if last and type(last[3]) == 'table' then
  messages = last[3]
end
if message ~= '' and messages[message] and messages[message][number] then
  return messages[message][number]
end
-- Validate every operation before applying any, so a bad one applies nothing.
local ops = {}
local at = 8
for _ = 1, tonumber(ARGV[7]) do
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
if message ~= '' then
  local commits = messages[message] or {}
  commits[number] = replies
  messages[message] = commits
end
if next(messages) == nil then
  redis.call('SET', KEYS[2], cmsgpack.pack({ARGV[2], replies, messages}), 'PX', ARGV[3])
else
  -- Kept until the messages' acknowledgements take them out (or a reap).
  redis.call('SET', KEYS[2], cmsgpack.pack({ARGV[2], replies, messages}))
end
return replies
