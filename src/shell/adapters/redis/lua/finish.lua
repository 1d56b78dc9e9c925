-- finish: the outcome record and the claim's release in one step.
-- ARGV: base, id, token, cutoff_ms ('' = none), record (8 arguments: see `record_at`),
-- nonce, and for a job others wait for its settle section (see dependents.lua)
-- Atomic: fenced by the token like ack and, with a cutoff, by "still locked before
-- the cutoff" (a lease keeper dead-lettering an abandoned claim loses to a holder
-- that renewed since); the store record, its indexes and the removal of the job from
-- flight happen together or not at all. The record's id differs from `id` only for a
-- payload that does not decode to a job with that id.
-- A re-send of this call after its write landed finds the call's nonce in the
-- record's `op` and answers 1 again, writing nothing.
local id, token, cutoff, r = ARGV[2], ARGV[3], ARGV[4], record_at(5)
local nonce = ARGV[5 + RECORD_ARGS]
local section = 6 + RECORD_ARGS
local jk = key('job', id)
local f = redis.call('HMGET', jk, 'token', 'status', 'queue')
if f[1] ~= token or f[2] ~= 'processing' then
  return redis.call('HGET', key('store', r.id), 'op') == nonce and 1 or 0
end
-- A cancel request refuses every outcome but the cancel (finish_cancelled.lua).
if redis.call('HEXISTS', jk, 'cancel') == 1 then return 0 end
if cutoff ~= '' then
  local locked_at = redis.call('ZSCORE', key('inflight'), id)
  if not locked_at or tonumber(locked_at) >= tonumber(cutoff) then return 0 end
end
local verdict = settle_check(r.id, section)
if verdict then return verdict end
record(r, 'op', nonce)
settle_after()
local queue = f[3]
redis.call('ZREM', key('inflight'), id)
redis.call('ZREM', key('inflight', queue), id)
redis.call('DEL', jk)
unhold(token, id)
return 1
