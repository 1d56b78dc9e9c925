-- cancel (a queued job, no claim holding it). ARGV: base, the cancelled record (8
-- arguments: see `record_at`), nonce, and for a job others wait for its settle section
-- (see dependents.lua)
-- Atomic: only while the hash says the job is ready, scheduled or waiting, its id leaves that
-- structure, the hash goes, and the cancelled record is written to the store, all in
-- this step; a claim that took the job first wins and this writes nothing. A re-send
-- of this call after its write landed finds the call's nonce in the record's `op` and
-- answers 1 again, writing nothing.
local r = record_at(2)
local nonce = ARGV[2 + RECORD_ARGS]
local section = 3 + RECORD_ARGS
local id = r.id
local jk = key('job', id)
local status = redis.call('HGET', jk, 'status')
if status ~= 'ready' and status ~= 'scheduled' and status ~= 'waiting' then
  return redis.call('HGET', key('store', id), 'op') == nonce and 1 or 0
end
local verdict = settle_check(id, section)
if verdict then return verdict end
unplace(id, jk)
redis.call('DEL', jk)
record(r, 'op', nonce)
settle_after()
return 1
