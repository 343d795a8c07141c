#!lua flags=allow-cross-slot-keys
-- Publishes a batch of messages, each atomically with its index entry, so a
-- publish can never interleave with a reap of the same partition.
--
-- KEYS[1]: the first publication's stream (a Redis Cluster routes the call
--       by it). Every name travels in ARGV, like in lost.lua: on a
--       cluster one call publishes everything of the batch one node serves,
--       which sits in many slots, and a cluster refuses declared keys of
--       several slots in one call; the `allow-cross-slot-keys` flag lets the
--       call touch every slot of its node.
-- ARGV: dedup window ms (0: off), dedup cap per stream, the number of
--       streams of the call, the call's one producer ('' when its
--       publications are laid out in full), then ten per stream (each
--       named once per call): stream, partition index bucket, group
--       registry, the stream's set of recently published message ids, its
--       producer hash, the category's joining marker (set while a new
--       group joins its existing lanes), position key of its position scope, the
--       partition's doorbell, index member ('' when not partitioned), the
--       doorbell channel of its slot (a channel, not a key); then ten per
--       publication: the number of its stream (from 1), type name,
--       envelope JSON, message id, position ('' when it has none), the key
--       when the partition is hashed ('' otherwise), the identity of the
--       position's history (the outbox's epoch, '' when none), the
--       producer id ('' when none), the publication's sequence in it, and
--       the sequence of the producer's publication before it to the same
--       stream when that one was sent without waiting for its reply (0:
--       none). With the call's one producer given, six per publication
--       instead (every one is deduplicated by that producer's sequence, and
--       has no message id, position or epoch to send): the number of its
--       stream, type name, envelope JSON, the key when the partition is
--       hashed ('' otherwise), its sequence, and the sequence before it.
--       For a partition, the bucket, registry and marker are the copies in
--       the partition's own slot, so a stream's names share one slot.
--
-- Every stream is read (EXISTS) before anything is written: on a cluster,
-- a stream of a slot this node no longer serves (after a failover or a
-- resharding) fails the call there, with nothing written, and the caller
-- groups what it publishes by node again.
--
-- Every registered group exists on the stream before the entry is added: a
-- new stream gets them all at id 0, and while a group is joining the
-- category (its joining marker exists) an existing stream that lacks one (a
-- lane created between the joining group's passes over the lanes) gets it
-- at id 0, so no group can miss an entry published after it registered,
-- whatever the lane, even if another group acknowledges and trims it first.
--
-- Idempotent twice over:
-- * a publication with a position (from the PostgreSQL outbox's relay) is
--   added only when its position is above the scope's last published one,
--   which is then raised to it: re-publishing is a no-op, and positions of a
--   scope only go up (see ordo_core::broker::POSITION_SCOPE_METADATA). A
--   scope is one key's lane: a hashed partition holds many keys, so its
--   position key is a hash with one field per key. The last position is
--   kept as `<position>/<epoch>` (`<position>` when the publication had no
--   epoch, as before epochs): a position at or below the last one *of
--   another epoch* is not a duplicate but a position of another history of
--   the outbox (a restored database); the call stops there with
--   {'conflict', published, recorded}, nothing of it or after it written,
--   and the relay keeps the row pending (ordo_core::broker::Refusal). A
--   position above the last one is published under its own epoch whatever
--   the last one's;
-- * a publication with a producer (the in-memory outbox's rows: producer
--   id, sequence = row id; ordo_core::contract::broker::ProducerSequence)
--   is appended only when its sequence is above the producer's last one
--   appended to the stream, kept in the stream's producer hash (producer
--   → `<sequence>:<ms appended>`), as Kafka's idempotent producer does:
--   a resend after a lost reply, or a late request, is a no-op. The
--   producer sends each stream's publications in sequence order from its
--   first one not known to be appended, so a sequence at or below the
--   last is always one already appended (ordo-model publish checks it).
--   It may send a call before the previous one is answered (pipelined):
--   then each publication names the one before it (`prev`), and when the
--   producer's last appended sequence is below it, that one is not in the
--   stream (its call failed, or has not landed): the call stops there with
--   {'gap', published}, nothing of it or after it written, and the producer
--   sends it again after the one before;
--   The last sequences are read once per stream and producer and call,
--   and recorded once, after the call's appends, whatever stops it; the
--   hash expires `window` ms after the stream's last publish with a
--   producer, and when it holds more than `cap` producers, those that
--   appended nothing for `window` ms go;
-- * any other publication: within the window, a message id already
--   appended to the stream in the last `window` ms (at most `cap` ids per
--   stream are kept) is not appended again, so a publish retried after
--   its reply was lost (a timeout, a Redis restart, another node's
--   failure in the same batch) does not duplicate it. The id set is the
--   costliest part of a publish (a ZADD and its trimming per message), so
--   a publication with a position or a producer skips it.
--
-- An appended entry rings the partition's doorbell when a waker armed it
-- (its worker waits for exactly this): the doorbell is deleted and its name
-- published on the slot's channel, once per arming.
--
-- Returns {'ok', appended, duplicates, new_partitions} (how many of each; the last:
-- partitions the call added to the index, for the caller to say so to
-- discovery, see `{<category>}:__index_version__`); when an XADD
-- failed,
-- {'error', published, message}; on a position of another history,
-- {'conflict', published, the scope's recorded `<position>/<epoch>`}; when
-- a publication's `prev` is not in its stream, {'gap', published}.
local window, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = nil
if window > 0 then
  now = now_ms()
end
local call_producer = ARGV[4]
local compact = call_producer ~= ''
local per_stream = 10
local per = compact and 6 or 10
local streams = tonumber(ARGV[3])
local header = 4
local first = header + per_stream * streams
local count = (#ARGV - first) / per
-- A recorded last position: `<position>/<epoch>`, or `<position>` alone.
local function parse_position(recorded)
  if not recorded then
    return 0, nil
  end
  local slash = string.find(recorded, '/', 1, true)
  if slash then
    return tonumber(string.sub(recorded, 1, slash - 1)), string.sub(recorded, slash + 1)
  end
  return tonumber(recorded), nil
end
-- Whether each stream exists, by number: read before any write, then kept
-- up to date (only this script creates a stream meanwhile).
local exists = {}
for s = 1, streams do
  exists[s] = redis.call('EXISTS', ARGV[header + 1 + per_stream * (s - 1)]) == 1
end
-- Each producer's last sequence in each stream (by number, then producer):
-- read at its first use in the call, raised by every append.
local last_seq = {}
-- What this call appended with a producer: hash → {producer → sequence},
-- recorded at the end.
local to_record = {}
local function last_of(s, producers, producer)
  local of = last_seq[s]
  if of == nil then
    of = {}
    last_seq[s] = of
  end
  local last = of[producer]
  if last == nil then
    local recorded = redis.call('HGET', producers, producer)
    last = recorded and tonumber(string.match(recorded, '^%d+')) or 0
    of[producer] = last
  end
  return last
end
local function record()
  for producers, last in pairs(to_record) do
    local added = 0
    for producer, seq in pairs(last) do
      added = added + redis.call('HSET', producers, producer, string.format('%d:%d', seq, now))
    end
    if added > 0 and redis.call('HLEN', producers) > cap then
      -- Producers that appended nothing within the window go (a live
      -- producer's field stays: it may still resend).
      local fields = redis.call('HGETALL', producers)
      for f = 1, #fields, 2 do
        local at_ms = tonumber(string.match(fields[f + 1], ':(%d+)$'))
        if at_ms and at_ms < now - window then
          redis.call('HDEL', producers, fields[f])
        end
      end
    end
    redis.call('PEXPIRE', producers, window)
  end
end
local appended, duplicates, new_partitions = 0, 0, 0
local trimmed = {}
local rung = {}
local indexed = {}
local joining_now = {}
local function body()
  for i = 0, count - 1 do
    local at = first + per * i
    local s = tonumber(ARGV[at + 1])
    local named = header + per_stream * (s - 1)
    local stream, index, registry, recent, producers, joining, position_key, doorbell, member, channel =
      ARGV[named + 1], ARGV[named + 2], ARGV[named + 3], ARGV[named + 4], ARGV[named + 5], ARGV[named + 6],
      ARGV[named + 7], ARGV[named + 8], ARGV[named + 9], ARGV[named + 10]
    local type_name, envelope, message_id, position, key, epoch, producer, seq, prev
    if compact then
      type_name, envelope, message_id, position, key, epoch, producer, seq, prev =
        ARGV[at + 2], ARGV[at + 3], '', '', ARGV[at + 4], '', call_producer,
        tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])
    else
      type_name, envelope, message_id, position, key, epoch, producer, seq, prev =
        ARGV[at + 2], ARGV[at + 3], ARGV[at + 4], ARGV[at + 5], ARGV[at + 6], ARGV[at + 7], ARGV[at + 8],
        tonumber(ARGV[at + 9]), tonumber(ARGV[at + 10])
    end
    local by_producer = window > 0 and position == '' and producer ~= ''
    local by_id = window > 0 and position == '' and producer == ''
    local recorded, last_position, last_epoch = nil, 0, nil
    if position ~= '' then
      if key == '' then
        recorded = redis.call('GET', position_key)
      else
        recorded = redis.call('HGET', position_key, key)
      end
      last_position, last_epoch = parse_position(recorded)
    end
    if position ~= '' and last_position >= tonumber(position)
        and epoch ~= '' and last_epoch and last_epoch ~= epoch then
      -- Another history's position: neither a duplicate nor publishable.
      return {'conflict', i, recorded}
    elseif position ~= '' and last_position >= tonumber(position) then
      -- Already published (by this relay before a crash, or by another one).
      duplicates = duplicates + 1
    elseif by_producer and seq <= last_of(s, producers, producer) then
      duplicates = duplicates + 1
    elseif by_producer and last_of(s, producers, producer) < prev then
      -- The publication before it is not in the stream.
      return {'gap', i}
    -- Recorded first (one command checks and records); taken back if the
    -- XADD fails, so a failed publish is never taken for a done one.
    elseif by_id and redis.call('ZADD', recent, 'NX', now, message_id) == 0 then
      duplicates = duplicates + 1
    else
      if not exists[s] then
        for _, group in ipairs(redis.call('SMEMBERS', registry)) do
          create_group(stream, group, true)
        end
      else
        if joining_now[joining] == nil then
          joining_now[joining] = redis.call('EXISTS', joining) == 1
        end
        if joining_now[joining] then
          local registered = redis.call('SCARD', registry)
          local groups = redis.call('XINFO', 'GROUPS', stream)
          if #groups < registered then
            local present = {}
            for _, raw in ipairs(groups) do
              present[to_map(raw)['name']] = true
            end
            for _, group in ipairs(redis.call('SMEMBERS', registry)) do
              if not present[group] then
                create_group(stream, group, false)
              end
            end
          end
        end
      end
      local id
      if key == '' then
        id = redis.pcall('XADD', stream, '*', 'type', type_name, 'envelope', envelope)
      else
        id = redis.pcall('XADD', stream, '*', 'type', type_name, 'key', key, 'envelope', envelope)
      end
      if type(id) == 'table' and id.err then
        if by_id then
          redis.call('ZREM', recent, message_id)
        end
        return {'error', i, id.err}
      end
      exists[s] = true
      if by_producer then
        last_seq[s][producer] = seq
        local of_stream = to_record[producers]
        if of_stream == nil then
          of_stream = {}
          to_record[producers] = of_stream
        end
        of_stream[producer] = seq
      end
      -- Once per stream and call (its index entry and member never change).
      if member ~= '' and not indexed[s] then
        indexed[s] = true
        new_partitions = new_partitions + redis.call('SADD', index, member)
      end
      -- Once per doorbell and call: nothing can arm it during the script.
      if not rung[doorbell] then
        rung[doorbell] = true
        if redis.call('DEL', doorbell) == 1 then
          redis.call('SPUBLISH', channel, doorbell)
        end
      end
      if position ~= '' then
        local value = position
        if epoch ~= '' then
          value = position .. '/' .. epoch
        end
        if key == '' then
          redis.call('SET', position_key, value)
        else
          redis.call('HSET', position_key, key, value)
        end
      end
      if by_id and not trimmed[s] then
        -- Expired and surplus ids go once per stream and call.
        trimmed[s] = true
        redis.call('ZREMRANGEBYSCORE', recent, '-inf', now - window)
        redis.call('ZREMRANGEBYRANK', recent, 0, -cap - 1)
        redis.call('PEXPIRE', recent, window)
      end
      appended = appended + 1
    end
  end
  return {'ok', appended, duplicates, new_partitions}
end
-- Whatever stops the call (a failed XADD, a conflict, an error of Redis's
-- such as a slot moved mid-call), what it appended is recorded.
local ok, reply = pcall(body)
record()
if ok then
  return reply
elseif type(reply) == 'table' and reply.err then
  return reply
end
return redis.error_reply(tostring(reply))
