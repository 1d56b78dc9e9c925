-- claim (dequeue). ARGV: base, queue, token, now_ms
-- Atomic: the pop from a ready list and the entry into the in-flight sets are one
-- step, so a claimed job is never in neither place. Returns {id, body} or nil.
local queue, token, now = ARGV[2], ARGV[3], ARGV[4]
for _, priority in ipairs(PRIORITIES) do
  local list = key('queue', queue, priority)
  while true do
    local id = redis.call('LPOP', list)
    if not id then break end
    local jk = key('job', id)
    local f = redis.call('HMGET', jk, 'status', 'body')
    if f[1] == 'ready' and f[2] then
      redis.call('ZREM', key('ready_at', queue), id)
      redis.call('HSET', jk, 'status', 'processing', 'token', token, 'locked_at', now)
      redis.call('ZADD', key('inflight'), now, id)
      redis.call('ZADD', key('inflight', queue), now, id)
      return {id, f[2]}
    end
    if not f[2] then
      -- A body-less id is dropped, never run.
      drop_orphan(id)
    end
    -- A hash that exists but is not ready is placed elsewhere; this entry was stray.
  end
end
return nil
