-- Acquires free leases, in KEYS order, until `limit` are held by this call.
--
-- KEYS, two per lease: lease key, generation key
-- ARGV: instance id, lease ttl ms, generation ttl ms, limit
--
-- The fencing token is max(previous generation + 1, server time in µs): it
-- grows at every change of owner, and stays monotonic after the generation
-- key expires or is deleted by a reap, because it is never below the time
-- of the acquisition (so a stalled owner from before a reap can never match
-- a new lease).
--
-- Returns one token per lease: the new token, the token of a lease this
-- instance already holds, or 0 when another instance holds it (or the
-- limit was reached).
local instance, ttl, gen_ttl, limit = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local prefix = instance .. ':'
local tokens = {}
local acquired = 0
for i = 1, #KEYS, 2 do
  local token = 0
  local current = redis.call('GET', KEYS[i])
  if current and string.sub(current, 1, #prefix) == prefix then
    token = tonumber(string.sub(current, #prefix + 1))
  elseif not current and acquired < limit then
    local previous = tonumber(redis.call('GET', KEYS[i + 1]) or '0')
    token = math.max(previous + 1, now_us)
    local text = string.format('%.0f', token)
    redis.call('SET', KEYS[i + 1], text, 'PX', gen_ttl)
    redis.call('SET', KEYS[i], prefix .. text, 'PX', ttl)
    acquired = acquired + 1
  end
  tokens[#tokens + 1] = token
end
return tokens
