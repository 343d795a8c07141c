-- Helpers shared by Ordo's scripts; prepended to each script that needs them.

-- "ms-seq" -> ms, seq
local function parse_id(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end

local function id_less(a, b)
  local am, as = parse_id(a)
  local bm, bs = parse_id(b)
  return am < bm or (am == bm and as < bs)
end

-- The server clock in milliseconds (scripts replicate by effects, so TIME is allowed).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The fencing token of a lease taken now, above `previous` (the token it
-- held, or its generation key's): max(previous + 1, server time in µs), as
-- text. It grows at every change of owner, and stays monotonic once the
-- generation key has expired or been reaped, being never below the time of
-- the take.
local function next_token(previous)
  local t = redis.call('TIME')
  return string.format('%.0f', math.max(previous + 1, tonumber(t[1]) * 1000000 + tonumber(t[2])))
end

-- Takes lease `key` for `identity`, without a TTL (it is held while that
-- member's key exists), at the next token above `held` (the token in the
-- value it replaces, 0 for a free lease) and its generation key's; returns
-- the token.
local function take_lease(key, generation_key, identity, held)
  local generation = tonumber(redis.call('GET', generation_key) or '0')
  local token = next_token(math.max(held, generation))
  redis.call('SET', key, identity .. ':' .. token)
  return tonumber(token)
end

-- Creates consumer group `group` on `stream`, reading from its start (id
-- 0), and the stream too, empty, when `mkstream` is true: the one way scripts
-- create a group, the same as `groups::create` (src/groups.rs) outside them.
local function create_group(stream, group, mkstream)
  if mkstream then
    redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  else
    redis.call('XGROUP', 'CREATE', stream, group, '0')
  end
end

-- The entries `consumer` of `group` reads from `stream` (XREADGROUP:
-- after id `from` of its pending entries, or `>` for new ones), creating the
-- group at id 0 when the stream lacks it (a lane created before the group
-- registered).
local function read_group(group, consumer, count, stream, from)
  local reply = redis.pcall('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', stream, from)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 7) ~= 'NOGROUP' then
      error(reply.err)
    end
    create_group(stream, group, false)
    reply = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', stream, from)
  end
  if not reply then
    return {}
  end
  return reply[1][2]
end

-- Pending entries deleted from the stream (by XDEL or a manual trim) cannot
-- be handled: `entries` without them, acknowledged so they do not hold the
-- lane.
local function live_entries(stream, group, entries)
  local out = {}
  for _, entry in ipairs(entries) do
    if entry[2] then
      out[#out + 1] = entry
    else
      redis.call('XACK', stream, group, entry[1])
    end
  end
  return out
end

-- XINFO replies are flat name/value arrays.
local function to_map(flat)
  local map = {}
  for i = 1, #flat, 2 do
    map[flat[i]] = flat[i + 1]
  end
  return map
end

-- The read of a partition's lanes (`lanes`: primary, backfill) by
-- `group`'s `consumer`, as read.lua and read_hashed.lua reply: for each lane
-- that exists, in order, `pending(lane, stream)` (entries delivered before,
-- to hand out again; {} when none), then new ones; when neither gives
-- anything, {'idle', last ids, ms since the newest entry}, or {'gone'} when
-- no lane exists.
local function read_lanes(lanes, group, consumer, count, pending)
  local last_ids = {'0-0', '0-0'}
  local newest_ms = nil
  for lane, stream in ipairs(lanes) do
    if redis.call('EXISTS', stream) == 1 then
      local entries = pending(lane, stream)
      if #entries > 0 then
        return {'entries', lane, entries, 1}
      end
      local fresh = read_group(group, consumer, count, stream, '>')
      if #fresh > 0 then
        return {'entries', lane, fresh, 0}
      end
      local last = to_map(redis.call('XINFO', 'STREAM', stream))['last-generated-id']
      last_ids[lane] = last
      local ms = parse_id(last)
      if newest_ms == nil or ms > newest_ms then
        newest_ms = ms
      end
    end
  end
  if newest_ms == nil then
    return {'gone'}
  end
  return {'idle', last_ids[1], last_ids[2], now_ms() - newest_ms}
end

-- The fence: nil when `lease_key` holds `expected`, else the reply that
-- tells the caller it lost the lease (with the current holder, if any).
local function fence(lease_key, expected)
  local current = redis.call('GET', lease_key)
  if current ~= expected then
    return {'fenced', current or ''}
  end
  return nil
end

-- The id right after `id` (same millisecond, next sequence), or nil when
-- its sequence is too large for Lua's numbers to count on.
local function next_id(id)
  local dash = string.find(id, '-', 1, true)
  local seq = tonumber(string.sub(id, dash + 1))
  if seq == nil or seq >= 9007199254740991 then
    return nil
  end
  return string.sub(id, 1, dash - 1) .. '-' .. string.format('%.0f', seq + 1)
end

-- Removes the entries of `stream` that every consumer group has
-- acknowledged: everything below the first entry a group has pending, or,
-- when the group furthest behind has nothing pending, everything up to its
-- last delivered entry, that one included. A drained stream is left empty
-- (it keeps its last id: `XINFO STREAM` shows it), so an idle partition
-- holds no entry, and no stream node, in Redis.
local function trim_acked(stream)
  local min_needed = nil
  local keep = false
  for _, raw in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local group = to_map(raw)
    local needed = group['last-delivered-id']
    local pending = tonumber(group['pending']) > 0
    if pending then
      needed = redis.call('XPENDING', stream, group['name'])[2]
    end
    if min_needed == nil or id_less(needed, min_needed) then
      min_needed = needed
      keep = pending
    elseif needed == min_needed and pending then
      keep = true
    end
  end
  if min_needed == nil or min_needed == '0-0' then
    return
  end
  if not keep then
    min_needed = next_id(min_needed) or min_needed
  end
  redis.call('XTRIM', stream, 'MINID', min_needed)
end

-- Whether `group` has entries of `stream` it has not read yet (or unacked ones).
local function has_unread(stream, group)
  if redis.call('EXISTS', stream) == 0 then
    return false
  end
  local last = to_map(redis.call('XINFO', 'STREAM', stream))['last-generated-id']
  for _, raw in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local info = to_map(raw)
    if info['name'] == group then
      return tonumber(info['pending']) > 0 or info['last-delivered-id'] ~= last
    end
  end
  return redis.call('XLEN', stream) > 0
end


-- The attempt sequence of a lease, one string `{closed attempt}:{lease
-- value}`: the last handler attempt the holder of that lease value closed.

-- Takes what message `message` applied out of the commit marker
-- `marker_key` (see commit.lua): it is acknowledged, it never runs again.
-- With its last message the marker gets back a TTL (`ttl` ms): it still
-- answers a resend of the last commit delayed on its connection.
local function forget_applied(marker_key, message, ttl)
  if message == '' then
    return
  end
  local raw = redis.call('GET', marker_key)
  if not raw then
    return
  end
  local marker = cmsgpack.unpack(raw)
  local messages = marker[3]
  if type(messages) ~= 'table' or messages[message] == nil then
    return
  end
  messages[message] = nil
  if next(messages) == nil then
    redis.call('SET', marker_key, cmsgpack.pack(marker), 'PX', ttl)
  else
    redis.call('SET', marker_key, cmsgpack.pack(marker))
  end
end

-- The last attempt closed by the holder of `lease_value` (0 when none).
local function closed_attempt(sequence_key, lease_value)
  local held = redis.call('GET', sequence_key)
  if not held then
    return 0
  end
  local closed, value = string.match(held, '^(%d+):(.*)$')
  if value ~= lease_value then
    return 0
  end
  return tonumber(closed)
end

-- Whether attempt `attempt` of the holder of `lease_value` is closed
-- already. Attempt 0 is unsequenced (a fence built outside the consumer)
-- and never closed.
local function attempt_closed(sequence_key, lease_value, attempt)
  attempt = tonumber(attempt)
  return attempt ~= 0 and closed_attempt(sequence_key, lease_value) >= attempt
end

-- Closes every attempt up to `attempt` of the holder of `lease_value`: a
-- command of those attempts that reaches Redis late (delayed on one
-- connection past its client's timeout) is refused from now on. Kept for
-- `ttl` ms after the last change (a lease TTL multiple: a command cannot
-- stay in flight that long). Returns whether this call closed `attempt`
-- (false when it was closed already).
local function close_attempt(sequence_key, lease_value, attempt, ttl)
  attempt = tonumber(attempt)
  if attempt == 0 or closed_attempt(sequence_key, lease_value) >= attempt then
    return false
  end
  redis.call('SET', sequence_key, string.format('%.0f', attempt) .. ':' .. lease_value, 'PX', ttl)
  return true
end
