-- ack (conditional release). ARGV: base, id, token
-- Atomic: the fence and the delete are one step, so a stale holder (its lease
-- expired and the job was claimed again, or the job was re-enqueued) removes nothing.
local id, token = ARGV[2], ARGV[3]
local jk = key('job', id)
if not held(jk, token) then return 0 end
local queue = redis.call('HGET', jk, 'queue')
redis.call('ZREM', key('inflight'), id)
redis.call('ZREM', key('inflight', queue), id)
redis.call('DEL', jk)
unhold(token, id)
return 1
