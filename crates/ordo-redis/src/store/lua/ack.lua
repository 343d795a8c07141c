#!lua flags=allow-cross-slot-keys
-- The fenced acknowledgement of handled entries: of one partition lane, or
-- of many partitions' lanes at once (group commit: the acknowledgements that
-- partition workers have in flight at the same moment travel in one call).
-- Each acknowledgement is checked against its own lease and done or refused
-- on its own: a stale one never fails the others of its call.
--
-- KEYS[1]: the lease key of the first acknowledgement (a Redis Cluster
--          routes the call by it)
-- ARGV: attempt sequence ttl ms, then per acknowledgement, in one of two
--       forms named by its first argument, whose second character is 1 to
--       trim the lane (else 0):
--       's0'/'s1' (short: no attempt to close, no commit to forget, no
--       failed attempts on record): lease key, lease value, acknowledged
--       lane, primary lane, group, the number of ids, id...
--       'f0'/'f1' (full): lease key, lease value, acknowledged lane,
--       primary lane, attempt sequence, commit marker, the handled
--       message's id when its runs made fenced commits ('' otherwise),
--       failed-attempt counts, group, attempt of the handled message
--       (closed by the acknowledgement; 0 when it sent no fenced command),
--       1 when the ids have failed attempts on record (else 0), the number
--       of ids, id...
--       (An argument costs Redis about as much as a short command's
--       parsing: most acknowledgements take the short form.)
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
local n = #ARGV
while at <= n do
  local form, lease, value, lane, primary = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3], ARGV[at + 4]
  local full = string.sub(form, 1, 1) == 'f'
  local trim = string.sub(form, 2, 2) == '1'
  local sequence, marker, message, failures, group, attempt, had_failures
  if full then
    sequence, marker, message, failures = ARGV[at + 5], ARGV[at + 6], ARGV[at + 7], ARGV[at + 8]
    group, attempt, had_failures = ARGV[at + 9], ARGV[at + 10], ARGV[at + 11]
    at = at + 12
  else
    group = ARGV[at + 5]
    at = at + 6
  end
  local first = at + 1
  local last = at + tonumber(ARGV[at])
  at = last + 1
  local fenced = fence(lease, value)
  if fenced then
    out[#out + 1] = fenced[1]
    out[#out + 1] = fenced[2]
  else
    redis.call('XACK', lane, group, unpack(ARGV, first, last))
    if full then
      close_attempt(sequence, value, attempt, ttl)
      forget_applied(marker, message, ttl)
      if had_failures == '1' then
        redis.call('HDEL', failures, unpack(ARGV, first, last))
      end
    end
    -- Trimming reads every group's position (XINFO GROUPS, XPENDING per
    -- group, XTRIM): about half the cost of an acknowledgement. The worker
    -- asks for it with the last acknowledgement of each read batch, not
    -- after every message; until then at most one read batch of
    -- acknowledged entries stays in the stream.
    if trim then
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
