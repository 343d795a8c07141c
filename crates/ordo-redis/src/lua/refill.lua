-- The fenced read-back of one key's entries that the owner of a hashed
-- partition read but did not keep (the key's queue was full, so the reader
-- moved on past it): they are delivered and pending, and this finds them
-- again in the lane, in order.
--
-- KEYS: lease key, lane
-- ARGV: lease value, key, after id (exclusive), up to id (inclusive),
--       count (entries of the key to return), scan (entries to look at)
--
-- Returns {'fenced', holder} or {'entries', {{id, {field, value...}}...},
-- the id looked at last ('' when it reached `up to`)}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
local lane, key, after, up_to = KEYS[2], ARGV[2], ARGV[3], ARGV[4]
local count, scan = tonumber(ARGV[5]), tonumber(ARGV[6])
local found = {}
local looked = redis.call('XRANGE', lane, '(' .. after, up_to, 'COUNT', scan)
for _, entry in ipairs(looked) do
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
if #looked < scan then
  return {'entries', found, ''}
end
return {'entries', found, looked[#looked][1]}
