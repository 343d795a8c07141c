-- Acquires free leases, in KEYS order, until `limit` are held by this call.
--
-- KEYS, two per lease: lease key, generation key
-- ARGV: owner identity (`instance:nonce`), instance id, lease ttl ms,
--       generation ttl ms, limit
--
-- A lease value is `identity:token`. The owner part is compared whole (not
-- by prefix), so instance ids containing `:`, or prefixes of each other,
-- never match each other's leases. A lease this very process holds is
-- adopted with its TTL renewed; a lease held under the same instance id by
-- another process (another nonce) is a configuration error the caller
-- reports: two processes must not share an instance id.
--
-- The fencing token is max(previous generation + 1, server time in µs): it
-- grows at every change of owner, and stays monotonic after the generation
-- key expires or is deleted by a reap, because it is never below the time
-- of the acquisition (so a stalled owner from before a reap can never match
-- a new lease).
--
-- Returns one token per lease: the new token, the token of a lease this
-- process already holds, 0 when another instance holds it (or the limit
-- was reached), or -1 when another process with this instance id holds it.
local identity, instance, ttl, gen_ttl, limit = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tokens = {}
local acquired = 0
local same_instance = instance .. ':'
for i = 1, #KEYS, 2 do
  local token = 0
  local current = redis.call('GET', KEYS[i])
  if current then
    local owner, held = string.match(current, '^(.*):(%d+)$')
    if owner == identity then
      redis.call('PEXPIRE', KEYS[i], ttl)
      token = tonumber(held)
    elseif owner and string.sub(owner, 1, #same_instance) == same_instance
        and not string.find(string.sub(owner, #same_instance + 1), ':', 1, true) then
      token = -1
    end
  elseif acquired < limit then
    local previous = tonumber(redis.call('GET', KEYS[i + 1]) or '0')
    token = math.max(previous + 1, now_us)
    local text = string.format('%.0f', token)
    redis.call('SET', KEYS[i + 1], text, 'PX', gen_ttl)
    redis.call('SET', KEYS[i], identity .. ':' .. text, 'PX', ttl)
    acquired = acquired + 1
  end
  tokens[#tokens + 1] = token
end
return tokens
