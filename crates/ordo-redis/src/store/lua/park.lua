-- Parks one key of a hashed partition on a poison message, under the fence:
-- records why, moves the message out of its lane into the key's held
-- stream (unless it is held already: a resolved key's held message failed
-- again), and lists the partition's parked keys for operators. The key's
-- later messages follow it there (hold.lua) until an operator resolves it;
-- every other key of the partition keeps flowing, and the lane can be
-- trimmed past the parked key.
--
-- Like halt.lua, it closes the attempt that failed last (in the key's own
-- attempt sequence): the same park arriving again is refused.
--
-- KEYS: lease key, parked keys (hash), holding keys (set), held stream,
--       halted set bucket (in the partition's slot, listed in the halted
--       directory by the caller first), the key's attempt sequence, the
--       lane, failed-attempt counts
-- ARGV: lease value, key, group, entry id, error, attempts, owner,
--       halted-set member, attempt, sequence ttl ms, 1 when the entry is
--       held already (else 0), lane name, then the entry's fields (name,
--       value, ...)
--
-- The park record (JSON): the held id of the head, its lane and id there,
-- the error, the attempts, the owner and when (ms).
--
-- Returns {'fenced', holder}, {'stale'} or {'ok', held id of the head}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
if attempt_closed(KEYS[6], ARGV[1], ARGV[9]) then
  return {'stale'}
end
close_attempt(KEYS[6], ARGV[1], ARGV[9], ARGV[10])
local key, group, id, lane = ARGV[2], ARGV[3], ARGV[4], ARGV[12]
local head, source_id = id, id
if ARGV[11] == '0' then
  head = redis.call('XADD', KEYS[4], '*', 'lane', lane, 'source_id', id, unpack(ARGV, 13))
  redis.call('XACK', KEYS[7], group, id)
else
  local held = redis.call('XRANGE', KEYS[4], id, id)
  if held[1] then
    local fields = to_map(held[1][2])
    lane, source_id = fields['lane'] or lane, fields['source_id'] or id
  end
end
-- A resolved head (retried) starts with a fresh retry budget.
redis.call('HDEL', KEYS[8], id)
local record = cjson.encode({
  head = head, lane = lane, source_id = source_id, error = ARGV[5],
  attempts = tonumber(ARGV[6]), owner = ARGV[7], at = now_ms(),
})
redis.call('HSET', KEYS[2], key, record)
redis.call('SADD', KEYS[3], key)
redis.call('SADD', KEYS[5], ARGV[8])
return {'ok', head}
