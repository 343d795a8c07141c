-- The start of a handler run: counts the start, detects an overlapping run
-- of the same key, and marks this run as the one in flight.
--
-- KEYS: in-flight marker, the partition's lease, overlap counter,
--       starts hash, overlap log
-- ARGV: my marker (`{token}:{run id}`), seq
--
-- A marker left by another run counts as an overlap only if that run's
-- lease is still the partition's lease: the marker's token is the token
-- the lease holds now. A marker of an owner whose lease expired or was
-- superseded (it crashed, or stalled and was fenced) is stale: the new
-- owner taking over is the contract, not an overlap.
--
-- Returns 1 when an overlap was detected, else 0.
local mine, seq = ARGV[1], ARGV[2]
local overlap = 0
local theirs = redis.call('GET', KEYS[1])
if theirs and theirs ~= mine then
  local their_token = string.match(theirs, '^(%d+):')
  local lease = redis.call('GET', KEYS[2])
  local lease_token = lease and string.match(lease, ':(%d+)$')
  if their_token and their_token == lease_token then
    overlap = 1
    redis.call('INCR', KEYS[3])
    redis.call('RPUSH', KEYS[5], theirs .. ' vs ' .. mine)
  end
end
redis.call('SET', KEYS[1], mine)
redis.call('HINCRBY', KEYS[4], seq, 1)
return overlap
