-- Applies a handler's Redis effects only while its lease is held at the
-- token it handled the message under: a stalled owner that wakes up
-- mid-handler cannot land an effect after the next owner's.
--
-- KEYS: lease key, then every key the operations touch (for Redis Cluster
--       routing; the operations name their keys in their arguments)
-- ARGV: lease value, operation count, then per operation: command,
--       argument count, arguments...
--
-- Returns {'fenced', holder} or {'ok', reply...}.
local allowed = {
  SET = true, DEL = true, UNLINK = true, EXPIRE = true, PEXPIRE = true, PERSIST = true,
  INCR = true, INCRBY = true, DECR = true, DECRBY = true, APPEND = true,
  HSET = true, HDEL = true, HINCRBY = true,
  SADD = true, SREM = true, ZADD = true, ZREM = true, ZINCRBY = true,
  RPUSH = true, LPUSH = true, LTRIM = true, XADD = true, XTRIM = true,
}
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
-- Validate every operation before applying any, so a bad one applies nothing.
local ops = {}
local at = 3
for _ = 1, tonumber(ARGV[2]) do
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
return replies
