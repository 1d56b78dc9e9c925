-- request_cancel (a claimed job). ARGV: base, id, requested_at_ms
-- Only while the job is in flight, its hash gets a `cancel` field: every outcome
-- script of its holder (finish, finish_many, replace, reclaim) then refuses to write,
-- and the holder records the cancel (redis_finish_cancelled.lua), which deletes the
-- hash and the mark with it. Idempotent: a second request keeps the first's time.
local id = ARGV[2]
local jk = key('job', id)
if redis.call('HGET', jk, 'status') ~= 'processing' then return 0 end
redis.call('HSETNX', jk, 'cancel', ARGV[3])
return 1
