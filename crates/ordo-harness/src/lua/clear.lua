-- Clears the in-flight marker if it is still this run's.
--
-- KEYS: in-flight marker
-- ARGV: my marker
--
-- Returns 1 when cleared, 0 when another run's marker (or none) was there.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
