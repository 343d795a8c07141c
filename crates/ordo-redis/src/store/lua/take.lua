#!lua flags=allow-cross-slot-keys
-- Takes over leases of one Redis node whose holders' member keys the
-- caller found gone, in order, until `limit` are taken.
--
-- KEYS[1]: the first lease key (a Redis Cluster routes the call by it)
-- ARGV: owner identity (`instance:nonce`), limit, then three per lease:
--       lease key, generation key, the value `acquire.lua` read in it
--
-- A member key is renewed with `PEXPIRE`, which never creates one: once
-- gone, its member is dead for good, so "dead" still holds now. A lease is
-- taken only while it still holds the value read (nobody took it over or
-- released it meanwhile) and has no TTL (a lease with one is an earlier
-- release's instance's, held until it expires). The new token is above the
-- one read and the generation key's (see acquire.lua).
--
-- Returns how many leases this call took, then per lease its new token or
-- 0 (not taken).
local identity, limit = ARGV[1], tonumber(ARGV[2])
local answers = {}
local taken = 0
for i = 3, #ARGV, 3 do
  local answer = 0
  if taken < limit and redis.call('GET', ARGV[i]) == ARGV[i + 2]
      and redis.call('PTTL', ARGV[i]) == -1 then
    local held = tonumber(string.match(ARGV[i + 2], ':(%d+)$') or '0')
    answer = take_lease(ARGV[i], ARGV[i + 1], identity, held)
    taken = taken + 1
  end
  answers[#answers + 1] = answer
end
table.insert(answers, 1, taken)
return answers
