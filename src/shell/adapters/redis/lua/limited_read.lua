-- limited_read: what a claim of a limited queue plans from (or, read-only, what
-- `limit_usage` shows). ARGV: base, queue, hi_ms, now_ms, now_us, per, mode
-- mode 'claim': the queue's due parked jobs are promoted first (as claim_many does),
-- and ghosts are popped from the heads of its lists.
-- mode 'usage': nothing is written; each partition's ready count is returned too.
-- Returns {0} while the queue is not indexed yet, or some of its ready jobs wait for
-- their facts (`await_facts`: run limited_index and limited_facts, then read again),
-- else {1, candidates, running, state, ready, unknown}:
--   candidates: lines "score job_type:id partition", the first `per` entries of each
--     partition's index in claim order (score = rank * 1e15 + seq). They are read from
--     the index alone: every path that moves a job keeps its entry right, and the take
--     checks each planned job against its hash (and drops an entry found stale);
--   running: lines "job_type count partition" over the queue's in-flight jobs (read
--     from the in-flight set and the hashes at this instant, never a kept counter);
--   state: {base}:limits:<queue> as flat field, value (buckets, passes, version `v`);
--   ready (usage only): flat partition, count;
--   unknown: the bodies of in-flight jobs whose hash keeps no facts (claimed before the
--     queue was limited, or placed by an earlier version), for Python to count.
-- The work grows with the partitions holding ready jobs (one range read each) and the
-- jobs in flight, never with the backlog.
local queue, per, mode = ARGV[2], tonumber(ARGV[6]), ARGV[7]
local claim = mode == 'claim'
local lk = key('limits', queue)
local ready_to_read = redis.call('HMGET', lk, 'indexed', NOFACTS)
if ready_to_read[1] ~= '1' or ready_to_read[2] then
  return {0}
end
if claim then
  promote(key('scheduled', queue), ARGV[3], ARGV[4], ARGV[5], CLAIM_PROMOTE_CAP)
  -- A promoted job parked by an earlier version brought no facts.
  if redis.call('HEXISTS', lk, NOFACTS) == 1 then return {0} end
end

-- Drop the ghosts (and strays) among the first TRIM entries of each priority list, so
-- the lists of a queue claimed only under limits do not grow. The leading run of
-- ghosts and strays is popped. Ghosts behind a live job (one a cap or a rate holds at
-- the head while other partitions run) are dropped too: the window is popped and its
-- live jobs pushed back in their order. Every ghost copy of an id comes before its
-- live copy, so the first copies of an id in the window are the ghosts its count
-- says, and an entry behind the first live job that is no ghost is live.
local TRIM = 200
if claim then
  for _, priority in ipairs(PRIORITIES) do
    local gk = ghosts_key(queue, priority)
    local list = key('queue', queue, priority)
    local head = redis.call('EXISTS', gk) == 1 and redis.call('LRANGE', list, 0, TRIM - 1) or {}
    if #head > 0 then
      local counts = redis.call('ZMSCORE', gk, unpack(head))
      local used, live, lead, behind = {}, {}, 0, 0
      for i, id in ipairs(head) do
        if (used[id] or 0) < (tonumber(counts[i]) or 0) then
          used[id] = (used[id] or 0) + 1
          if #live == 0 then lead = i else behind = behind + 1 end
        elseif #live > 0 then
          table.insert(live, id)
        else
          local f = redis.call('HMGET', key('job', id), 'status', 'queue', 'priority', 'body')
          if f[1] == 'ready' and f[2] == queue and f[3] == priority and f[4] then
            table.insert(live, id)
          else
            if not f[4] then drop_orphan(id) end
            lead = i
          end
        end
      end
      if behind > 0 then
        redis.call('LPOP', list, #head)
        local back = {}
        for n = #live, 1, -1 do table.insert(back, live[n]) end
        redis.call('LPUSH', list, unpack(back))
      elseif lead > 0 then
        redis.call('LPOP', list, lead)
      end
      local total = 0
      for id, c in pairs(used) do
        count_ghosts(gk, id, -c)
        total = total + c
      end
      if total > 0 then count_ghosts(gk, GHOSTS_TOTAL, -total) end
    end
  end
end

local candidates, ready = {}, {}
local pk = key('parts', queue)
for _, part in ipairs(redis.call('SMEMBERS', pk)) do
  local zk = key('pready', queue, part)
  local entries = redis.call('ZRANGE', zk, 0, per - 1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    table.insert(candidates, entries[i + 1] .. ' ' .. entries[i] .. ' ' .. part)
  end
  if not claim then
    local size = redis.call('ZCARD', zk)
    if size > 0 then
      table.insert(ready, part)
      table.insert(ready, size)
    end
  elseif #entries == 0 then
    redis.call('SREM', pk, part)
  end
end

local tally, order, unknown = {}, {}, {}
for _, id in ipairs(redis.call('ZRANGE', key('inflight', queue), 0, -1)) do
  local jk = key('job', id)
  local f = redis.call('HMGET', jk, 'status', 'queue', 'part', 'jtype', 'partition',
                       'job_type')
  if f[1] == 'processing' and f[2] == queue then
    local part, jtype = f[3], f[4]
    if not part then part, jtype = f[5], f[6] end
    if not part then
      table.insert(unknown, redis.call('HGET', jk, 'body') or '')
    else
      jtype = jtype or ''
      local k = jtype .. '\n' .. part
      if not tally[k] then
        tally[k] = {jtype, part, 0}
        table.insert(order, k)
      end
      tally[k][3] = tally[k][3] + 1
    end
  end
end
local running = {}
for _, k in ipairs(order) do
  local t = tally[k]
  table.insert(running, table.concat({t[1], t[3], t[2]}, ' '))
end

-- Lines rather than nested arrays: one bulk string is far cheaper for the client to
-- parse than a thousand. A partition is one line and a job type or id has no space.
return {1, table.concat(candidates, '\n'), table.concat(running, '\n'),
        redis.call('HGETALL', lk), ready, unknown}
