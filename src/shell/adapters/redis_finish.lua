-- finish: the outcome record and the claim's release in one step.
-- ARGV: base, id, token, body, status, queue, tenant
-- Atomic: fenced by the token like ack; the store record, its indexes and the removal
-- of the job from flight happen together or not at all.
local id, token = ARGV[2], ARGV[3]
local jk = key('job', id)
local f = redis.call('HMGET', jk, 'token', 'status', 'queue')
if f[1] ~= token or f[2] ~= 'processing' then return 0 end
record(id, ARGV[4], ARGV[5], ARGV[6], ARGV[7])
local queue = f[3]
redis.call('ZREM', key('inflight'), id)
redis.call('ZREM', key('inflight', queue), id)
redis.call('DEL', jk)
return 1
