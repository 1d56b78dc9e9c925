-- claim (dequeue). ARGV: base, queue, token, hi_ms, now_ms, now_us, receipt_ttl_ms,
-- [locked_ms] (now three ways: see `promote` in placement.lua; locked_ms, when given, is
-- the lock time to record instead of now_ms: see `lock_time` in claiming.lua)
-- Atomic: the queue's due parked jobs are promoted (up to CLAIM_PROMOTE_CAP, in
-- promotion order, behind the ready ones), then the pop from a ready list and the
-- entry into the in-flight sets are one step, so a claimed job is never in neither
-- place and a due job is claimable without waiting for a promotion pass.
-- Idempotent by token: a re-send of this call returns what the token holds.
-- Returns {id, body} or nil.
local queue, token, now, ttl = ARGV[2], ARGV[3], ARGV[5], ARGV[7]
local locked = lock_time(ARGV[8], now)
local again = replay(token, ttl, function() return token end)
if again then
  return #again > 0 and again or nil
end
promote(key('scheduled', queue), ARGV[4], now, ARGV[6], CLAIM_PROMOTE_CAP)
for _, priority in ipairs(PRIORITIES) do
  local list = key('queue', queue, priority)
  while true do
    -- Read, then popped once its hash is written: a server out of memory checks a
    -- script's first write only and never refuses a pop, so the claim is refused
    -- rather than a job handed out whose outcome could not be written.
    local id = redis.call('LINDEX', list, 0)
    if not id then break end
    local jk = key('job', id)
    local f = redis.call('HMGET', jk, 'status', 'body', 'part', 'queue', 'priority', 'jtype')
    local live = f[1] == 'ready' and f[2] and f[4] == queue and f[5] == priority
    -- Only a job of a limited queue (`part`) can have ghost copies (see index.lua).
    if live and not (f[3] and unghost(queue, priority, id)) then
      redis.call('HSET', jk, 'status', 'processing', 'token', token, 'locked_at', locked)
      redis.call('LPOP', list)
      redis.call('ZREM', key('ready_at', queue), id)
      -- Indexed (its queue is limited): a claim without limits still takes it out.
      if f[3] then redis.call('ZREM', key('pready', queue, f[3]), pready_member(f[6], id)) end
      redis.call('ZADD', key('inflight'), locked, id)
      redis.call('ZADD', key('inflight', queue), locked, id)
      write_receipt(token, {id}, ttl)
      return {id, f[2]}
    end
    redis.call('LPOP', list)
    if not live and not unghost(queue, priority, id) and not f[2] then
      -- A body-less id is dropped, never run.
      drop_orphan(id)
    end
    -- A hash that exists but is not ready is placed elsewhere; this entry was stray.
  end
end
return nil
