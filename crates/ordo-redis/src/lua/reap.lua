-- Retires a cold partition: drained by every group on both lanes and idle
-- (no entry added) for at least `idle ms`. Deletes both lanes, every group's
-- per-partition bookkeeping, and the index entry, all at once, so a publish
-- either lands before (and the partition is not drained) or after (and
-- re-creates and re-indexes it).
--
-- KEYS: lease key, primary lane, backfill lane, partition index
-- ARGV: lease value, index member, idle ms, partition tag (the primary
--       lane's name, the hash tag of its bookkeeping keys)
--
-- The leases of every group on the partition go too (their owners find
-- themselves fenced and let go); a process manager's lease, which covers
-- several partitions, is the caller's to release.
--
-- Returns {'fenced', holder}, {'busy', ms to wait before trying again} or
-- {'reaped'}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
local idle_ms, tag = tonumber(ARGV[3]), ARGV[4]
local now = now_ms()
local groups = {}
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
      groups[group['name']] = true
    end
  end
end
for group in pairs(groups) do
  if redis.call('EXISTS', '{' .. tag .. '}:halt:' .. group) == 1 then
    return {'busy', idle_ms}
  end
end
redis.call('DEL', KEYS[2], KEYS[3], '{' .. KEYS[2] .. '}:published', '{' .. KEYS[3] .. '}:published')
for group in pairs(groups) do
  local base = '{' .. tag .. '}:'
  -- The operator action log stays: it is the record of what was decided.
  redis.call('DEL', base .. 'lease:' .. group, base .. 'gen:' .. group, base .. 'commit:' .. group,
    base .. 'seq:' .. group, base .. 'attempts:' .. group)
end
redis.call('SREM', KEYS[4], ARGV[2])
return {'reaped'}
