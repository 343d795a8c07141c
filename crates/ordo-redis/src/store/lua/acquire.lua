#!lua flags=allow-cross-slot-keys
-- Acquires the free leases of one Redis node, in order, until `limit` are
-- newly held by this call, and names the holders of the others for the
-- caller to ask whether they are still alive (`take.lua` then takes over
-- those that are not).
--
-- KEYS[1]: the first lease key (a Redis Cluster routes the call by it)
-- ARGV: owner identity (`instance:nonce`), instance id, limit, then two per
--       lease: lease key, generation key
--
-- Like lost.lua, it takes key names in ARGV: the leases of one node's
-- partitions sit in many slots, which a Redis Cluster refuses as declared
-- keys of one call; `allow-cross-slot-keys` lets the call touch every slot
-- its node serves (a slot that moved fails the call, and the caller groups
-- the leases by node again).
--
-- A lease value is `identity:token`, without a TTL: a lease is held for as
-- long as its holder's member key (`{ordo}:member:<identity>`, renewed by
-- the holder's heartbeat, on another node of a cluster) exists. The owner
-- part is compared whole (not by prefix), so instance ids containing `:`,
-- or prefixes of each other, never match each other's leases. A lease this
-- very process holds is adopted. A lease that has a TTL is an instance of
-- an earlier release's (which renews each lease): it is held until it
-- expires, never asked about as a member (that instance has no member key
-- and would look dead while it runs).
--
-- The fencing token is above the generation key's (written by a release)
-- and never below the server time in µs (`next_token`): it grows at every
-- change of owner, and a stalled owner from before a reap can never match a
-- new lease.
--
-- Returns how many leases this call newly acquired, then per lease: the
-- new token, or the token of a lease this process already holds; 0 when an
-- earlier release's instance holds it (or the limit was reached); -1 when
-- an earlier release's process with this instance id holds it; the lease's
-- value (text) when another member holds it.
local identity, instance, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local answers = {}
local acquired = 0
local same_instance = instance .. ':'
for i = 4, #ARGV, 2 do
  local answer = 0
  local current = redis.call('GET', ARGV[i])
  if current then
    local owner, held = string.match(current, '^(.*):(%d+)$')
    if owner == identity then
      answer = tonumber(held)
    elseif redis.call('PTTL', ARGV[i]) >= 0 then
      if owner and string.sub(owner, 1, #same_instance) == same_instance
          and not string.find(string.sub(owner, #same_instance + 1), ':', 1, true) then
        answer = -1
      end
    else
      answer = current
    end
  elseif acquired < limit then
    answer = take_lease(ARGV[i], ARGV[i + 1], identity, 0)
    acquired = acquired + 1
  end
  answers[#answers + 1] = answer
end
table.insert(answers, 1, acquired)
return answers
