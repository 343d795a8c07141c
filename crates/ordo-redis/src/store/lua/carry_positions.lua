-- Carries last published positions (see publish.lua) over to another
-- name, keeping the higher position of each: what `repartition` does for
-- every key of a category, so a relay that re-publishes rows it published
-- under the old partitioning (killed before marking them) finds them
-- published under the new one too.
--
-- KEYS[1]: the position key under the new partitioning: a string (a
--       partition of one key) or a hash with one field per key (a hashed
--       partition).
-- ARGV: field, value pairs: the field '' for a string key, else the key;
--       the value as publish.lua records it (`<position>/<epoch>` or
--       `<position>`).
--
-- Returns how many positions were raised.
local function seq(value)
  if not value then
    return -1
  end
  local slash = string.find(value, '/', 1, true)
  if slash then
    value = string.sub(value, 1, slash - 1)
  end
  return tonumber(value) or -1
end
local raised = 0
for i = 1, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  local current
  if field == '' then
    current = redis.call('GET', KEYS[1])
  else
    current = redis.call('HGET', KEYS[1], field)
  end
  if seq(value) > seq(current) then
    if field == '' then
      redis.call('SET', KEYS[1], value)
    else
      redis.call('HSET', KEYS[1], field, value)
    end
    raised = raised + 1
  end
end
return raised
