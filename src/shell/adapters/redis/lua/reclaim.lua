-- reclaim. ARGV: base, token, cutoff_ms, placement of the job (9 arguments: see
-- `placement_at`), nonce
-- Re-checks the whole reclaim predicate inside the write: the body exists, the claim
-- is still held by this token, and it is still locked before the cutoff. A worker
-- that acked or extended in between wins; a second reclaim of one claim finds the
-- token cleared and does nothing. Only a job whose body exists is requeued.
-- A re-send of this call after its write landed finds the call's nonce in `op` and
-- answers 1 again, writing nothing.
local token, cutoff, p = ARGV[2], tonumber(ARGV[3]), placement_at(4)
local nonce = ARGV[4 + PLACEMENT_ARGS]
local id = p.id
local jk = key('job', id)
local f = redis.call('HMGET', jk, 'body', 'op')
if not f[1] then
  drop_orphan(id)
  return 0
end
if not held(jk, token) then
  return f[2] == nonce and 1 or 0
end
local locked_at = redis.call('ZSCORE', key('inflight'), id)
if not locked_at or tonumber(locked_at) >= cutoff then return 0 end
-- A cancel request refuses the reclaim: the lease keeper records the cancel instead.
if redis.call('HEXISTS', jk, 'cancel') == 1 then return 0 end
unplace(id, jk)
place(jk, p)
redis.call('HSET', jk, 'op', nonce)
return 1
