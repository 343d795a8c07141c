-- The fenced acknowledgement of handled entries of one lane, with trimming
-- at the end of each batch.
--
-- KEYS: lease key, acknowledged lane, primary lane, attempt sequence,
--       failed-attempt counts
-- ARGV: lease value, group, attempt of the handled message (closed by the
--       acknowledgement; 0 when it sent no fenced command), sequence ttl ms,
--       1 when the ids have failed attempts on record (else 0), id...
--
-- Returns {'fenced', holder} or {'ok', primary_waiting}: whether the primary
-- lane has entries this group has not handled yet, so that the owner of a
-- partition checks its primary lane before each backfill entry without an
-- extra round trip.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
local group = ARGV[2]
redis.call('XACK', KEYS[2], group, unpack(ARGV, 6))
close_attempt(KEYS[4], ARGV[1], ARGV[3], ARGV[4])
if ARGV[5] == '1' then
  redis.call('HDEL', KEYS[5], unpack(ARGV, 6))
end
-- Trimming reads every group's position (XINFO GROUPS, XPENDING per group,
-- XTRIM): about half the cost of this script. Do it once this group has
-- acknowledged everything it was delivered (the end of a read batch), not
-- after every message; until then at most one read batch of acknowledged
-- entries stays in the stream.
if redis.call('XPENDING', KEYS[2], group)[1] == 0 then
  trim_acked(KEYS[2])
end
local waiting = 0
if KEYS[2] ~= KEYS[3] and has_unread(KEYS[3], group) then
  waiting = 1
end
return {'ok', waiting}
