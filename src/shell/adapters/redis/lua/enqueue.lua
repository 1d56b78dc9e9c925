-- enqueue (upsert by id). ARGV: base, placement (id, body, queue, priority, target,
-- run_ms, run_us, partition, job type: see `placement_at`), nonce
-- Atomic: the old placement goes and the new one appears in one step, so an upsert
-- never leaves the id in two places (or none), and a claim on the old copy loses
-- its token (its ack then returns 0). `nonce` is fresh per call and kept in the
-- hash (`op`): a re-send of a call that already landed changes nothing, so it cannot
-- pull the job back from a worker that claimed it in between.
local p = placement_at(2)
local nonce = ARGV[2 + PLACEMENT_ARGS]
local jk = key('job', p.id)
-- One look answers both: a re-send (its nonce is there) and a new job (no hash: nothing
-- to take away, the common case).
local seen = redis.call('HMGET', jk, 'op', 'status')
if seen[1] == nonce then return 1 end
local fresh = not seen[2]
if not fresh then unplace(p.id, jk) end
place(jk, p, nonce, fresh)
return 1
