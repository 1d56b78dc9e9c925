-- reclaim. ARGV: base, id, token, cutoff_ms, body, queue, priority, target, run_ms, run_us
-- (body '' = return the stored job to ready as it is: abandoned() does that for a body
-- that does not decode, so the next claimer meets it as a BadClaim and dead-letters it)
-- Re-checks the whole reclaim predicate inside the write: the body exists, the claim
-- is still held by this token, and it is still locked before the cutoff. A worker
-- that acked or extended in between wins; a second reclaim of one claim finds the
-- token cleared and does nothing. Only a job whose body exists is requeued.
local id, token, cutoff = ARGV[2], ARGV[3], tonumber(ARGV[4])
local jk = key('job', id)
if not redis.call('HGET', jk, 'body') then
  drop_orphan(id)
  return 0
end
if not held(jk, token) then return 0 end
local locked_at = redis.call('ZSCORE', key('inflight'), id)
if not locked_at or tonumber(locked_at) >= cutoff then return 0 end
local body, queue, priority, target, run_ms, run_us =
  ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
if body == '' then
  local f = redis.call('HMGET', jk, 'body', 'queue', 'priority', 'run_ms', 'run_us')
  body, queue, priority, target = f[1], f[2], f[3], 'ready'
  run_ms, run_us = f[4] or '0', f[5] or '0'
end
unplace(id, jk)
if place(id, jk, body, queue, priority, target, run_ms, run_us) then
  wake(queue, 1)
end
return 1
