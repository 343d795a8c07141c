-- Releases a lease if it is still held at the expected value, keeping its
-- token in the generation key for a while, so the next holder's token is
-- above it even if the server clock stepped back.
--
-- KEYS: lease key, generation key
-- ARGV: expected value (`identity:token`), generation ttl ms
--
-- Returns 1 when released, 0 when it was no longer held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local token = string.match(ARGV[1], ':(%d+)$')
  if token then
    redis.call('SET', KEYS[2], token, 'PX', ARGV[2])
  end
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
