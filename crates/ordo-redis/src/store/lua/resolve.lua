-- An operator's decision on a halted partition's head.
--
-- KEYS: halt key, halted set bucket (in the partition's slot), log stream, primary lane, backfill lane,
--       dead-letter stream, failed-attempt counts
-- ARGV: halted-set member, group, action, operator note, expected head id
--       ('' for whatever head is halted)
--
-- Actions:
--   retry        clear the halt: the owner runs the head again
--   skip         acknowledge the head, then clear the halt
--   dead_letter  copy the head to the dead-letter stream with the error,
--                acknowledge it, then clear the halt
-- Every action is written to the (capped) log stream of the partition.
--
-- The expected head makes the decision land on the message the operator
-- saw, or on nothing: the comparison and the action are one step.
--
-- Returns {'not_halted'}, {'head_changed', halted head id} or {'ok', head id}.
local halt = redis.call('HGETALL', KEYS[1])
if #halt == 0 then
  return {'not_halted'}
end
halt = to_map(halt)
if ARGV[5] ~= '' and ARGV[5] ~= halt['head'] then
  return {'head_changed', halt['head']}
end
local group, action = ARGV[2], ARGV[3]
local stream = KEYS[4]
if halt['lane'] == 'backfill' then
  stream = KEYS[5]
end
local head = halt['head']

if action == 'dead_letter' then
  local entry = redis.call('XRANGE', stream, head, head)
  local fields = {}
  if entry[1] then
    fields = entry[1][2]
  end
  redis.call('XADD', KEYS[6], '*', 'source_id', head, 'group', group, 'lane', halt['lane'],
    'error', halt['error'], 'attempts', halt['attempts'], unpack(fields))
end
if action == 'skip' or action == 'dead_letter' then
  redis.call('XACK', stream, group, head)
  trim_acked(stream)
end
redis.call('XADD', KEYS[3], 'MAXLEN', '~', '100', '*', 'action', action, 'head', head,
  'error', halt['error'], 'attempts', halt['attempts'], 'note', ARGV[4])
-- A retried head gets a fresh retry budget; a removed one needs no count.
redis.call('HDEL', KEYS[7], head)
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return {'ok', head}
