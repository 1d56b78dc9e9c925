-- request_cancel (a claimed job). ARGV: base, id, requested_at_ms
-- Only while the job is in flight, its hash gets a `cancel` field: every outcome
-- script of its holder (finish, finish_many, replace, reclaim) then refuses to write,
-- and the holder records the cancel (finish_cancelled.lua), which deletes the
-- hash and the mark with it. Idempotent: a second request keeps the first's time.
local id = ARGV[2]
local jk = key('job', id)
local f = redis.call('HMGET', jk, 'status', 'token')
if f[1] ~= 'processing' then return 0 end
redis.call('HSETNX', jk, 'cancel', ARGV[3])
-- Its holder's finish_many must now read the hash, and find the request.
unhold(f[2], id)
return 1
