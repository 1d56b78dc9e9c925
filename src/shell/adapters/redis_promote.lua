-- promote_due. ARGV: base, now_ms, limit
-- Atomic: each due job leaves the scheduled sets and joins its ready list in the
-- same step, so no crash (of this caller or the server, replaying the AOF) finds it
-- in neither place, and of two concurrent promoters only the one whose ZREM
-- removed the entry moves it. The body is not touched: the job is claimable as
-- written. Returns how many moved.
local due = redis.call('ZRANGEBYSCORE', key('scheduled'), '-inf', ARGV[2],
                       'LIMIT', 0, tonumber(ARGV[3]))
local moved = 0
local woken = {}
for _, id in ipairs(due) do
  if redis.call('ZREM', key('scheduled'), id) == 1 then
    local jk = key('job', id)
    local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'run_us', 'body')
    if f[1] == 'scheduled' and f[5] then
      redis.call('ZREM', key('scheduled', f[2]), id)
      redis.call('HSET', jk, 'status', 'ready')
      push_ready(id, f[2], f[3], f[4])
      woken[f[2]] = (woken[f[2]] or 0) + 1
      moved = moved + 1
    elseif not f[5] then
      drop_orphan(id)
    end
  end
end
for queue, n in pairs(woken) do
  wake(queue, n)
end
return moved
