-- Retires a cold partition: drained by every group on both lanes and idle
-- (no entry added) for at least `idle ms`. Deletes both lanes, every group's
-- per-partition bookkeeping, and the index entry, all at once, so a publish
-- either lands before (and the partition is not drained) or after (and
-- re-creates and re-indexes it).
--
-- KEYS: lease key, primary lane, backfill lane, partition index bucket
--       (in the partition's slot),
--       primary lane's published ids, backfill lane's published ids, the
--       partition's doorbell, then
--       seven per group of ARGV: its halt, lease, generation, commit marker,
--       attempt sequence, failed-attempt counts and (in a hashed partition)
--       holding keys on this partition
-- ARGV: lease value, index member, idle ms, then the groups the caller
--       knows of on the category
--
-- A group on a lane that the caller did not pass means this call cannot
-- name that group's keys: nothing is deleted, and the reply lists every
-- group on the lanes for the caller to try again with.
-- The leases of every group on the partition go too (their owners find
-- themselves fenced and let go); a process manager's lease, which covers
-- several partitions, is the caller's to release.
--
-- Returns {'fenced', holder}, {'busy', ms to wait before trying again},
-- {'groups', group...} or {'reaped'}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
local idle_ms = tonumber(ARGV[3])
local passed = {}
for i = 4, #ARGV do
  passed[ARGV[i]] = 7 + (i - 4) * 7
end
local now = now_ms()
local unknown = false
local seen = {}
for lane = 2, 3 do
  local stream = KEYS[lane]
  if redis.call('EXISTS', stream) == 1 then
    local last = to_map(redis.call('XINFO', 'STREAM', stream))['last-generated-id']
    local quiet = now - parse_id(last)
    if quiet < idle_ms then
      return {'busy', idle_ms - quiet}
    end
    for _, raw in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
      local group = to_map(raw)
      if tonumber(group['pending']) > 0 or group['last-delivered-id'] ~= last then
        return {'busy', idle_ms}
      end
      seen[#seen + 1] = group['name']
      if passed[group['name']] == nil then
        unknown = true
      end
    end
  end
end
if unknown then
  return {'groups', unpack(seen)}
end
-- A halted partition, or a hashed one with keys held aside (parked, or
-- resolved and not drained yet: their messages are out of the lanes),
-- stays until its group's owner has run them.
for _, base in pairs(passed) do
  if redis.call('EXISTS', KEYS[base + 1]) == 1 or redis.call('EXISTS', KEYS[base + 7]) == 1 then
    return {'busy', idle_ms}
  end
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[5], KEYS[6], KEYS[7])
for _, base in pairs(passed) do
  -- The operator action log stays: it is the record of what was decided.
  redis.call('DEL', KEYS[base + 2], KEYS[base + 3], KEYS[base + 4], KEYS[base + 5], KEYS[base + 6])
end
redis.call('SREM', KEYS[4], ARGV[2])
return {'reaped'}
