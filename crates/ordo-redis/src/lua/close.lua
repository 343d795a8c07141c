-- Closes a handler attempt before the next one starts, under the fence: a
-- command of the closed attempt that reaches Redis late is refused from now
-- on (see commit.lua). Also confirms the lease, so a stale owner never runs
-- a message again while the new owner may run it.
--
-- KEYS: lease key, attempt sequence
-- ARGV: lease value, attempt, sequence ttl ms
--
-- Returns {'fenced', holder} or {'ok'}.
local fenced = fence(KEYS[1], ARGV[1])
if fenced then
  return fenced
end
close_attempt(KEYS[2], ARGV[1], ARGV[2], ARGV[3])
return {'ok'}
