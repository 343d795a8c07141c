-- The fenced read of one hashed partition (many keys, each in order): the
-- lease holder's next entries, with a cursor per lane so that the owner
-- reads ahead while earlier entries are still being handled.
--
-- KEYS: lease key, primary lane, backfill lane
-- ARGV: lease value, group, consumer, count, primary cursor, backfill cursor
--
-- A lane's cursor is an entry id while the owner reads back the pending
-- entries it took over (a previous owner's unacknowledged entries, read
-- after that id), and '>' once it has read them all: from then on only new
-- entries. Every owner reads as the same consumer name, as in read.lua.
--
-- Returns one of:
--   {'fenced', current holder}
--   {'entries', lane (1 primary, 2 backfill), {{id, {field, value...}}...},
--    1 when they were pending else 0, primary cursor, backfill cursor}
--   {'idle', primary last id, backfill last id, ms since the last entry}
--   {'gone'}  (neither lane exists: the partition was reaped)
local lease, group, consumer, count = KEYS[1], ARGV[2], ARGV[3], ARGV[4]
local fenced = fence(lease, ARGV[1])
if fenced then
  return fenced
end
local cursors = {ARGV[5], ARGV[6]}

local last_ids = {'0-0', '0-0'}
local newest_ms = nil
local exists = false
for lane = 1, 2 do
  local stream = KEYS[1 + lane]
  if redis.call('EXISTS', stream) == 1 then
    exists = true
    while cursors[lane] ~= '>' do
      local pending = read_group(group, consumer, count, stream, cursors[lane])
      if #pending == 0 then
        cursors[lane] = '>'
      else
        cursors[lane] = pending[#pending][1]
        local live = live_entries(stream, group, pending)
        if #live > 0 then
          return {'entries', lane, live, 1, cursors[1], cursors[2]}
        end
      end
    end
    local fresh = read_group(group, consumer, count, stream, '>')
    if #fresh > 0 then
      return {'entries', lane, fresh, 0, cursors[1], cursors[2]}
    end
    local last = to_map(redis.call('XINFO', 'STREAM', stream))['last-generated-id']
    last_ids[lane] = last
    local ms = parse_id(last)
    if newest_ms == nil or ms > newest_ms then
      newest_ms = ms
    end
  end
end
if not exists then
  return {'gone'}
end
return {'idle', last_ids[1], last_ids[2], now_ms() - newest_ms}
