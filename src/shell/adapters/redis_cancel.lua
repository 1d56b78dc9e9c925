-- cancel (a queued job, no claim holding it). ARGV: base, id, body, status, queue, tenant,
-- nonce
-- Atomic: only while the hash says the job is ready or scheduled, its id leaves that
-- structure, the hash goes, and the cancelled record is written to the store, all in
-- this step; a claim that took the job first wins and this writes nothing. A re-send
-- of this call after its write landed finds the call's nonce in the record's `op` and
-- answers 1 again, writing nothing.
local id = ARGV[2]
local jk = key('job', id)
local status = redis.call('HGET', jk, 'status')
if status ~= 'ready' and status ~= 'scheduled' then
  return redis.call('HGET', key('store', id), 'op') == ARGV[7] and 1 or 0
end
unplace(id, jk)
redis.call('DEL', jk)
record(id, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
redis.call('HSET', key('store', id), 'op', ARGV[7])
return 1
