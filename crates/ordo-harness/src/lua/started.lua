-- Records the start of a run in blocking mode (`--blocking-work`): who ran
-- it, under which token, and when, by Redis's clock (ms), so runs of
-- different processes compare on one clock.
--
-- KEYS: the key's started-runs list
-- ARGV: instance, token
--
-- Returns the start time (ms).
local time = redis.call('TIME')
local ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('RPUSH', KEYS[1], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. string.format('%.0f', ms))
return ms
