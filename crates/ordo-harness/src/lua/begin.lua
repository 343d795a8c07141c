-- The start of a handler run: checks that the run's lease is still held,
-- detects an overlapping run of the same key, counts the start and marks
-- this run as the one in flight.
--
-- KEYS: in-flight marker, the partition's lease, overlap counter,
--       starts hash, overlap log, stale-start counter, ended runs
-- ARGV: my marker (`{token}:{run id}`), seq
--
-- A begin of a run that has ended already is a copy that reached Redis
-- late (its connection held it past the client's timeout; the client
-- retried on another connection and the run went on): it changes nothing.
--
-- A run whose own lease is no longer held (a stale owner, invoked or
-- resumed after losing the partition) does not start: it is counted as a
-- stale start and leaves the marker alone. Its effects would be refused by
-- the fence anyway.
--
-- A marker left by another run counts as an overlap only if that run's
-- lease is still the partition's lease: the marker's token is the token the
-- lease holds now. A marker of an owner whose lease expired or was
-- superseded (it crashed, or stalled and was fenced) is stale: the new owner
-- taking over is the contract, not an overlap.
--
-- Returns 0 (started), 1 (started, overlapping another run), 2 (stale) or
-- 3 (late copy of a run that ended).
local mine, seq = ARGV[1], ARGV[2]
if redis.call('SISMEMBER', KEYS[7], mine) == 1 then
  return 3
end
local lease = redis.call('GET', KEYS[2])
local lease_token = lease and string.match(lease, ':(%d+)$')
if lease_token ~= string.match(mine, '^(%d+):') then
  redis.call('INCR', KEYS[6])
  return 2
end
local overlap = 0
local theirs = redis.call('GET', KEYS[1])
if theirs and theirs ~= mine and string.match(theirs, '^(%d+):') == lease_token then
  overlap = 1
  redis.call('INCR', KEYS[3])
  redis.call('RPUSH', KEYS[5], theirs .. ' vs ' .. mine)
end
redis.call('SET', KEYS[1], mine)
redis.call('HINCRBY', KEYS[4], seq, 1)
return overlap
