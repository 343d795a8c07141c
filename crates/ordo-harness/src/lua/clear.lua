-- Clears the in-flight marker if it is still this run's.
--
-- KEYS: in-flight marker, ended runs
-- ARGV: my marker, how long ended runs are remembered (s)
--
-- Returns 1 when cleared, 0 when another run's marker (or none) was there.
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
