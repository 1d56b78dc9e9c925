-- finish_cancelled: a cancel-requested claim recorded cancelled and released in one step.
-- ARGV: base, id, token, cutoff_ms ('' = none), the record after its id (7 arguments:
-- see `record_at`; it is recorded under `id`), nonce, and for a job others wait for its
-- settle section (see dependents.lua)
-- Fenced like finish (the token and, with a cutoff, "still locked before it"), but not
-- refused by the cancel request it answers: the hash, and the request in it, go with
-- the release. A re-send after its write landed finds the nonce in the record's `op`.
local id, token, cutoff = ARGV[2], ARGV[3], ARGV[4]
local r = record_of(id, 5)
local nonce = ARGV[4 + RECORD_ARGS]
local section = 5 + RECORD_ARGS
local jk = key('job', id)
local f = redis.call('HMGET', jk, 'token', 'status', 'queue')
if f[1] ~= token or f[2] ~= 'processing' then
  return redis.call('HGET', key('store', id), 'op') == nonce and 1 or 0
end
if cutoff ~= '' then
  local locked_at = redis.call('ZSCORE', key('inflight'), id)
  if not locked_at or tonumber(locked_at) >= tonumber(cutoff) then return 0 end
end
local verdict = settle_check(id, section)
if verdict then return verdict end
record(r, 'op', nonce)
settle_after()
redis.call('ZREM', key('inflight'), id)
redis.call('ZREM', key('inflight', f[3]), id)
redis.call('DEL', jk)
unhold(token, id)
return 1
