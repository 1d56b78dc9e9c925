-- finish_cancelled: a cancel-requested claim recorded cancelled and released in one step.
-- ARGV: base, id, token, cutoff_ms ('' = none), body, status, queue, tenant, nonce
-- Fenced like finish (the token and, with a cutoff, "still locked before it"), but not
-- refused by the cancel request it answers: the hash, and the request in it, go with
-- the release. A re-send after its write landed finds the nonce in the record's `op`.
local id, token, cutoff = ARGV[2], ARGV[3], ARGV[4]
local jk = key('job', id)
local f = redis.call('HMGET', jk, 'token', 'status', 'queue')
if f[1] ~= token or f[2] ~= 'processing' then
  return redis.call('HGET', key('store', id), 'op') == ARGV[9] and 1 or 0
end
if cutoff ~= '' then
  local locked_at = redis.call('ZSCORE', key('inflight'), id)
  if not locked_at or tonumber(locked_at) >= tonumber(cutoff) then return 0 end
end
record(id, ARGV[5], ARGV[6], ARGV[7], ARGV[8])
redis.call('HSET', key('store', id), 'op', ARGV[9])
redis.call('ZREM', key('inflight'), id)
redis.call('ZREM', key('inflight', f[3]), id)
redis.call('DEL', jk)
unhold(token, id)
return 1
