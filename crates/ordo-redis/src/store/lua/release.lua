-- Releases a lease if it is still held at the expected value.
--
-- KEYS: lease key
-- ARGV: expected value
--
-- Returns 1 when released, 0 when it was no longer held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
