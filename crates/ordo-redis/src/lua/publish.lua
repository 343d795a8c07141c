-- Publishes a batch of messages, each atomically with its index entry, so a
-- publish can never interleave with a reap of the same partition.
--
-- KEYS, four per publication: stream, partition index, group registry,
--       position key of the publication's position scope
-- ARGV, four per publication: index member ('' when not partitioned),
--       type name, envelope JSON, position ('' when it has none)
--
-- A publication with a position (from the PostgreSQL outbox's relay) is
-- added only when its position is above the scope's last published one,
-- which is then raised to it: re-publishing is a no-op, and positions of a
-- scope only go up (see ordo_core::broker::POSITION_SCOPE_METADATA).
--
-- A stream that does not exist yet gets a consumer group at id 0 for every
-- registered group before the entry is added, so no group can miss an entry
-- that another group acknowledged and trimmed before it first read the
-- stream.
--
-- Returns {'ok', id...} or, when an XADD failed, {'error', published, message}.
local ids = {'ok'}
for i = 0, #KEYS / 4 - 1 do
  local stream, index, registry, position_key = KEYS[4 * i + 1], KEYS[4 * i + 2], KEYS[4 * i + 3], KEYS[4 * i + 4]
  local member, type_name, envelope, position = ARGV[4 * i + 1], ARGV[4 * i + 2], ARGV[4 * i + 3], ARGV[4 * i + 4]
  if position ~= '' and tonumber(redis.call('GET', position_key) or '0') >= tonumber(position) then
    -- Already published (by this relay before a crash, or by another one).
    ids[#ids + 1] = ''
  else
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
  if position ~= '' then
    redis.call('SET', position_key, position)
  end
  ids[#ids + 1] = id
  end
end
return ids
