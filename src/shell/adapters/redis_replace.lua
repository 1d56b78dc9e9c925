-- replace (fenced upsert of a claimed job's successor).
-- ARGV: base, id, token, body, queue, priority, target, run_ms, run_us, nonce
-- Atomic: the successor is written and the claim released in one step, so a retry
-- or requeue is never lost between them, and a stale holder cannot overwrite a job
-- someone else now holds. A re-send of this call after its write landed finds the
-- call's nonce in `op` and answers 1 again, writing nothing; any other call that
-- finds the claim gone answers 0.
local id, token = ARGV[2], ARGV[3]
local jk = key('job', id)
if not held(jk, token) then
  return redis.call('HGET', jk, 'op') == ARGV[10] and 1 or 0
end
-- A cancel request refuses a retry, requeue or hand-back: the job is to be cancelled.
if redis.call('HEXISTS', jk, 'cancel') == 1 then return 0 end
unplace(id, jk)
if place(id, jk, ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]) then
  wake(ARGV[5], 1)
end
redis.call('HSET', jk, 'op', ARGV[10])
return 1
