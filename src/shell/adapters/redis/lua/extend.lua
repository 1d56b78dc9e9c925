-- extend (heartbeat). ARGV: base, id, token, now_ms
-- Fenced like ack: only the current holder renews the lease.
local id, token, now = ARGV[2], ARGV[3], ARGV[4]
local jk = key('job', id)
if not held(jk, token) then return 0 end
local queue = redis.call('HGET', jk, 'queue')
redis.call('HSET', jk, 'locked_at', now)
redis.call('ZADD', key('inflight'), now, id)
redis.call('ZADD', key('inflight', queue), now, id)
return 1
