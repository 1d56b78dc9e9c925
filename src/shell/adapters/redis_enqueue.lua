-- enqueue (upsert by id). ARGV: base, id, body, queue, priority, target, run_ms, run_us,
-- nonce
-- Atomic: the old placement goes and the new one appears in one step, so an upsert
-- never leaves the id in two places (or none), and a claim on the old copy loses
-- its token (its ack then returns 0). `nonce` is fresh per call and kept in the
-- hash (`op`): a re-send of a call that already landed changes nothing, so it cannot
-- pull the job back from a worker that claimed it in between.
local id, nonce = ARGV[2], ARGV[9]
local jk = key('job', id)
if redis.call('HGET', jk, 'op') == nonce then return 1 end
unplace(id, jk)
if place(id, jk, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]) then
  wake(ARGV[4], 1)
end
redis.call('HSET', jk, 'op', nonce)
return 1
