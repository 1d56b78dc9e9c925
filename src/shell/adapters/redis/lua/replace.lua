-- replace (fenced upsert of a claimed job's successor).
-- ARGV: base, token, placement of the successor (9 arguments: see `placement_at`),
-- nonce
-- Atomic: the successor is written and the claim released in one step, so a retry
-- or requeue is never lost between them, and a stale holder cannot overwrite a job
-- someone else now holds. A re-send of this call after its write landed finds the
-- call's nonce in `op` and answers 1 again, writing nothing; any other call that
-- finds the claim gone answers 0.
local token, p = ARGV[2], placement_at(3)
local nonce = ARGV[3 + PLACEMENT_ARGS]
local id = p.id
local jk = key('job', id)
if not held(jk, token) then
  return redis.call('HGET', jk, 'op') == nonce and 1 or 0
end
-- A cancel request refuses a retry, requeue or hand-back: the job is to be cancelled.
if redis.call('HEXISTS', jk, 'cancel') == 1 then return 0 end
unplace(id, jk)
place(jk, p)
redis.call('HSET', jk, 'op', nonce)
return 1
