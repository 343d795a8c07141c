#!lua flags=allow-cross-slot-keys
-- The fenced acknowledgement of handled entries: of one partition lane, or
-- of many partitions' lanes at once (group commit: the acknowledgements that
-- partition workers have in flight at the same moment travel in one call).
-- Each acknowledgement is checked against its own lease and done or refused
-- on its own: a stale one never fails the others of its call.
--
-- KEYS[1]: the lease key of the first acknowledgement (a Redis Cluster
--          routes the call by it)
-- ARGV: attempt sequence ttl ms, then per acknowledgement:
--       lease key, lease value, acknowledged lane, primary lane, attempt
--       sequence, commit marker, the handled message's id when its runs
--       made fenced commits ('' otherwise), failed-attempt counts, group,
--       attempt of the handled
--       message (closed by the acknowledgement; 0 when it sent no fenced
--       command), 1 when the ids have failed attempts on record (else 0),
--       1 to trim the lane (else 0), the number of ids, id...
--
-- Like the renewal and acquisition scripts, it takes key names in ARGV: one
-- node's partitions sit in as many slots as there are partitions, a Redis
-- Cluster refuses declared keys of several slots (CROSSSLOT), and the
-- `allow-cross-slot-keys` flag lets one call touch every slot its node
-- serves. The caller groups acknowledgements by node; a key of a slot the
-- node no longer serves fails the call (the ones before it stay done:
-- acknowledging again is harmless), and the caller groups them again.
--
-- Returns two values per acknowledgement, in order: 'ok' and 1 when the
-- primary lane has entries this group has not handled yet (so that the
-- owner of a partition checks its primary lane before each backfill entry
-- without an extra round trip), else 0; or 'fenced' and the current holder
-- ('' when none).
--
-- The acknowledgement takes what the message's commits applied out of the
-- commit marker: it is kept there until now, so that a run of the message
-- again applies nothing twice (commit.lua), and once acknowledged it never
-- runs again. It takes out that message's only, so a late copy of it never
-- touches another's; the marker then keeps the last commit's replies, for
-- a resend of it, for the attempt sequence's ttl.
local ttl = ARGV[1]
local out = {}
local at = 2
while at <= #ARGV do
  local lease, value, lane, primary = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local sequence, marker, message = ARGV[at + 4], ARGV[at + 5], ARGV[at + 6]
  local failures, group = ARGV[at + 7], ARGV[at + 8]
  local attempt, had_failures, trim = ARGV[at + 9], ARGV[at + 10], ARGV[at + 11]
  local first = at + 13
  local last = at + 12 + tonumber(ARGV[at + 12])
  at = last + 1
  local fenced = fence(lease, value)
  if fenced then
    out[#out + 1] = fenced[1]
    out[#out + 1] = fenced[2]
  else
    redis.call('XACK', lane, group, unpack(ARGV, first, last))
    close_attempt(sequence, value, attempt, ttl)
    forget_applied(marker, message, ttl)
    if had_failures == '1' then
      redis.call('HDEL', failures, unpack(ARGV, first, last))
    end
    -- Trimming reads every group's position (XINFO GROUPS, XPENDING per
    -- group, XTRIM): about half the cost of an acknowledgement. The worker
    -- asks for it with the last acknowledgement of each read batch, not
    -- after every message; until then at most one read batch of
    -- acknowledged entries stays in the stream.
    if trim == '1' then
      trim_acked(lane)
    end
    local waiting = 0
    if lane ~= primary and has_unread(primary, group) then
      waiting = 1
    end
    out[#out + 1] = 'ok'
    out[#out + 1] = waiting
  end
end
return out
