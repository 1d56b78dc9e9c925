-- extend (heartbeat). ARGV: base, id, token, now_ms[, progress note]
-- Fenced like ack: only the current holder renews the lease. A progress note (the
-- running attempt's newest report, text made in Python) is stored with the renewal.
local id, token, now, note = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local jk = key('job', id)
if not held(jk, token) then return 0 end
local queue = redis.call('HGET', jk, 'queue')
if note then
  redis.call('HSET', jk, 'locked_at', now, 'progress', note)
else
  redis.call('HSET', jk, 'locked_at', now)
end
redis.call('ZADD', key('inflight'), now, id)
redis.call('ZADD', key('inflight', queue), now, id)
return 1
