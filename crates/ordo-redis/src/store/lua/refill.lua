-- The fenced read-back of one key's entries that the owner of a hashed
-- partition read but did not keep (the key's queue was full, so the reader
-- moved on past it): they are delivered and pending, and this finds them
-- again in the lane, in order.
--
-- KEYS: lease key, lane
-- ARGV: lease value, key, after id (exclusive), up to id (inclusive),
--       count (entries of the key to return), scan (entries to look at)
--
-- The lane is looked at in small chunks, so a key with many entries in a
-- row (a partition with one busy key) is found without reading far ahead.
--
-- Returns {'fenced', holder} or {'entries', {{id, {field, value...}}...},
-- the id looked at last ('' when it reached `up to`)}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
local lane, key, after, up_to = KEYS[2], ARGV[2], ARGV[3], ARGV[4]
local count, scan = tonumber(ARGV[5]), tonumber(ARGV[6])
local chunk = math.max(count * 2, 32)
local found = {}
local looked_at = 0
while looked_at < scan do
  local want = math.min(chunk, scan - looked_at)
  local looked = redis.call('XRANGE', lane, '(' .. after, up_to, 'COUNT', want)
  for _, entry in ipairs(looked) do
    after = entry[1]
    local fields = entry[2]
    for i = 1, #fields, 2 do
      if fields[i] == 'key' then
        if fields[i + 1] == key then
          found[#found + 1] = entry
          if #found == count then
            return {'entries', found, entry[1]}
          end
        end
        break
      end
    end
  end
  looked_at = looked_at + #looked
  if #looked < want then
    return {'entries', found, ''}
  end
end
return {'entries', found, after}
