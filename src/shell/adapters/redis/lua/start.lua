-- start_claim. ARGV: base, id, old_token, new_token, now_ms
-- Fenced by the prefetched claim's token: swap it for the started one and renew the
-- lease to now, in one step. `new_token` is fresh per call, so a re-send of this call
-- after the swap landed finds it and answers 1 again, and no other call does.
local id, old, new, now = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local jk = key('job', id)
local f = redis.call('HMGET', jk, 'token', 'status', 'queue')
if f[2] ~= 'processing' then return 0 end
if f[1] == new then return 1 end
if f[1] ~= old then return 0 end
redis.call('HSET', jk, 'token', new, 'locked_at', now)
unhold(old, id)
redis.call('ZADD', key('inflight'), now, id)
redis.call('ZADD', key('inflight', f[3]), now, id)
return 1
