#!lua flags=allow-cross-slot-keys
-- Acquires free leases on one Redis node, in order, until `limit` are
-- newly held by this call.
--
-- KEYS[1]: the first lease key (a Redis Cluster routes the call by it)
-- ARGV: owner identity (`instance:nonce`), instance id, lease ttl ms,
--       generation ttl ms, limit, then two per lease: lease key, generation
--       key
--
-- Like renew.lua, it takes key names in ARGV: the leases of one node's
-- partitions sit in many slots, which a Redis Cluster refuses as declared
-- keys of one call; `allow-cross-slot-keys` lets the call touch every slot
-- its node serves (a slot that moved fails the call, and the caller groups
-- the leases by node again).
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
-- Returns how many leases this call newly acquired, then one token per lease: the new token, the token of a lease this
-- process already holds, 0 when another instance holds it (or the limit
-- was reached), or -1 when another process with this instance id holds it.
local identity, instance, ttl, gen_ttl, limit = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tokens = {}
local acquired = 0
local same_instance = instance .. ':'
for i = 6, #ARGV, 2 do
  local token = 0
  local current = redis.call('GET', ARGV[i])
  if current then
    local owner, held = string.match(current, '^(.*):(%d+)$')
    if owner == identity then
      redis.call('PEXPIRE', ARGV[i], ttl)
      token = tonumber(held)
    elseif owner and string.sub(owner, 1, #same_instance) == same_instance
        and not string.find(string.sub(owner, #same_instance + 1), ':', 1, true) then
      token = -1
    end
  elseif acquired < limit then
    local previous = tonumber(redis.call('GET', ARGV[i + 1]) or '0')
    token = math.max(previous + 1, now_us)
    local text = string.format('%.0f', token)
    redis.call('SET', ARGV[i + 1], text, 'PX', gen_ttl)
    redis.call('SET', ARGV[i], identity .. ':' .. text, 'PX', ttl)
    acquired = acquired + 1
  end
  tokens[#tokens + 1] = token
end
table.insert(tokens, 1, acquired)
return tokens
