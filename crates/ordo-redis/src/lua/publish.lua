-- Publishes a batch of messages, each atomically with its index entry, so a
-- publish can never interleave with a reap of the same partition.
--
-- KEYS, three per publication: stream, partition index, group registry
-- ARGV, three per publication: index member ('' when not partitioned),
--       type name, envelope JSON
--
-- A stream that does not exist yet gets a consumer group at id 0 for every
-- registered group before the entry is added, so no group can miss an entry
-- that another group acknowledged and trimmed before it first read the
-- stream.
--
-- Returns {'ok', id...} or, when an XADD failed, {'error', published, message}.
local ids = {'ok'}
for i = 0, #KEYS / 3 - 1 do
  local stream, index, registry = KEYS[3 * i + 1], KEYS[3 * i + 2], KEYS[3 * i + 3]
  local member, type_name, envelope = ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[3 * i + 3]
  if redis.call('EXISTS', stream) == 0 then
    for _, group in ipairs(redis.call('SMEMBERS', registry)) do
      redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
    end
  end
  local id = redis.pcall('XADD', stream, '*', 'type', type_name, 'envelope', envelope)
  if type(id) == 'table' and id.err then
    return {'error', i, id.err}
  end
  if member ~= '' then
    redis.call('SADD', index, member)
  end
  ids[#ids + 1] = id
end
return ids
