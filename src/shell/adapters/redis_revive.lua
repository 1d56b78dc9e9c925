-- revive (an operator's retry of a dead letter).
-- ARGV: base, dead_id, id, body, queue, priority, target, run_ms, run_us, status, tenant,
-- nonce
-- Atomic: only while the store still records dead_id as failed, the fresh job is
-- upserted into the queue (unlocked, ready or parked) and recorded in the store, both
-- in this step. Two operators reviving one dead letter: the second finds it no longer
-- failed and writes nothing. A re-send of this call after its write landed finds the
-- call's nonce in the record's `op` and answers 1 again, writing nothing.
local dead, id, body, queue = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('HGET', key('store', dead), 'status') ~= 'failed' then
  return redis.call('HGET', key('store', id), 'op') == ARGV[12] and 1 or 0
end
local jk = key('job', id)
unplace(id, jk)
if place(id, jk, body, queue, ARGV[6], ARGV[7], ARGV[8], ARGV[9]) then
  wake(queue, 1)
end
record(id, body, ARGV[10], queue, ARGV[11])
redis.call('HSET', key('store', id), 'op', ARGV[12])
return 1
