-- finish: the outcome record and the claim's release in one step.
-- ARGV: base, id, token, body, status, queue, tenant
-- Atomic: fenced by the token like ack; the store record, its indexes and the removal
-- of the job from flight happen together or not at all.
local id, token = ARGV[2], ARGV[3]
local jk = key('job', id)
if not held(jk, token) then return 0 end
record(id, ARGV[4], ARGV[5], ARGV[6], ARGV[7])
local queue = redis.call('HGET', jk, 'queue')
redis.call('ZREM', key('inflight'), id)
redis.call('ZREM', key('inflight', queue), id)
redis.call('DEL', jk)
return 1
