-- Acknowledges entries of a base (non-partitioned) stream and trims what
-- every group has acknowledged.
--
-- KEYS: stream
-- ARGV: group, id...
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
trim_acked(KEYS[1])
return 1
