-- Closes a failed handler attempt, under the fence: a command of the closed
-- attempt that reaches Redis late is refused from now on (see commit.lua),
-- and the failure is counted with the pending entry, so whoever handles
-- the entry next (after a stop during the backoff, or a failover) goes on
-- with the retry budget that is left rather than a fresh one. It is counted
-- only by the call that closes the attempt: the same close arriving again
-- (resent after a lost reply, or late) counts nothing. A transient failure
-- (an outage) closes its attempt with no entry id: nothing is counted.
--
-- KEYS: lease key, attempt sequence, failed-attempt counts
-- ARGV: lease value, attempt, sequence ttl ms, entry id ('' to count nothing)
--
-- Returns {'fenced', holder} or {'ok', failed attempts of the entry}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
local closed = close_attempt(KEYS[2], ARGV[1], ARGV[2], ARGV[3])
local failed = 0
if ARGV[4] ~= '' then
  if closed then
    failed = redis.call('HINCRBY', KEYS[3], ARGV[4], 1)
  else
    failed = tonumber(redis.call('HGET', KEYS[3], ARGV[4]) or '0')
  end
end
return {'ok', failed}
