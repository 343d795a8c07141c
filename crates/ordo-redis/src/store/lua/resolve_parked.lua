-- An operator's decision on a parked key of a hashed partition: on the head
-- of the key's held messages (the poison message).
--
-- KEYS: parked keys (hash), halted set bucket (in the partition's slot),
--       log stream, the key's held stream, dead-letter stream, failed-attempt
--       counts
-- ARGV: halted-set member (the parked hash's name), group, action, operator
--       note, expected head id ('' for whatever head is parked), key
--
-- Actions (as resolve.lua's, on the held head):
--   retry        unpark: the owner runs the head again, then the key's
--                other held messages, then its newer ones
--   skip         delete the head from the held messages, then unpark
--   dead_letter  copy the head to the dead-letter stream with the error,
--                delete it from the held messages, then unpark
-- Every action is written to the (capped) log stream of the partition.
--
-- Returns {'not_halted'}, {'head_changed', parked head id} or {'ok', head id}.
local key = ARGV[6]
local raw = redis.call('HGET', KEYS[1], key)
if not raw then
  return {'not_halted'}
end
local record = cjson.decode(raw)
local head = record['head']
if ARGV[5] ~= '' and ARGV[5] ~= head then
  return {'head_changed', head}
end
local group, action = ARGV[2], ARGV[3]
if action == 'dead_letter' then
  local entry = redis.call('XRANGE', KEYS[4], head, head)
  local fields = {}
  if entry[1] then
    local held = entry[1][2]
    for i = 1, #held, 2 do
      if held[i] ~= 'lane' and held[i] ~= 'source_id' then
        fields[#fields + 1] = held[i]
        fields[#fields + 1] = held[i + 1]
      end
    end
  end
  redis.call('XADD', KEYS[5], '*', 'source_id', record['source_id'], 'group', group, 'lane', record['lane'],
    'error', record['error'], 'attempts', record['attempts'], unpack(fields))
end
if action == 'skip' or action == 'dead_letter' then
  redis.call('XDEL', KEYS[4], head)
end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', '100', '*', 'action', action, 'key', key, 'head', head,
  'error', record['error'], 'attempts', record['attempts'], 'note', ARGV[4])
-- A retried head gets a fresh retry budget; a removed one needs no count.
redis.call('HDEL', KEYS[6], head)
redis.call('HDEL', KEYS[1], key)
if redis.call('HLEN', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[1])
end
return {'ok', head}
