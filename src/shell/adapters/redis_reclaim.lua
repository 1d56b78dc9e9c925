-- reclaim. ARGV: base, id, token, cutoff_ms, body, queue, priority, target, run_ms, run_us,
-- nonce
-- Re-checks the whole reclaim predicate inside the write: the body exists, the claim
-- is still held by this token, and it is still locked before the cutoff. A worker
-- that acked or extended in between wins; a second reclaim of one claim finds the
-- token cleared and does nothing. Only a job whose body exists is requeued.
-- A re-send of this call after its write landed finds the call's nonce in `op` and
-- answers 1 again, writing nothing.
local id, token, cutoff = ARGV[2], ARGV[3], tonumber(ARGV[4])
local jk = key('job', id)
local f = redis.call('HMGET', jk, 'body', 'op')
if not f[1] then
  drop_orphan(id)
  return 0
end
if not held(jk, token) then
  return f[2] == ARGV[11] and 1 or 0
end
local locked_at = redis.call('ZSCORE', key('inflight'), id)
if not locked_at or tonumber(locked_at) >= cutoff then return 0 end
-- A cancel request refuses the reclaim: the lease keeper records the cancel instead.
if redis.call('HEXISTS', jk, 'cancel') == 1 then return 0 end
unplace(id, jk)
if place(id, jk, ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]) then
  wake(ARGV[6], 1)
end
redis.call('HSET', jk, 'op', ARGV[11])
return 1
