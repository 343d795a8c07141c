-- The fenced acknowledgement of a handled held message of a resolved key
-- of a hashed partition: removes it from the key's held stream, closes the
-- attempt (in the key's own sequence), takes what the message applied out
-- of the key's commit marker as ack.lua does, and clears its failure count.
--
-- KEYS: lease key, held stream, the key's attempt sequence, failed-attempt
--       counts, the key's commit marker
-- ARGV: lease value, held id, attempt (0: none to close), sequence ttl ms,
--       the message's id when its runs made fenced commits ('' otherwise)
--
-- Returns {'fenced', holder} or {'ok'}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
redis.call('XDEL', KEYS[2], ARGV[2])
close_attempt(KEYS[3], ARGV[1], ARGV[3], ARGV[4])
forget_applied(KEYS[5], ARGV[5], ARGV[4])
redis.call('HDEL', KEYS[4], ARGV[2])
return {'ok'}
