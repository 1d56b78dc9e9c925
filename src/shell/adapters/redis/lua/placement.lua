-- Prepended to every queue script after common.lua and index.lua: placing a job (ready
-- or parked), taking it out of wherever it is, and promoting due parked jobs.

-- Ready: tail of its priority list (FIFO), plus its run_at (µs) for oldest_ready_at,
-- plus the partition index when the queue is limited (the one extra command an
-- ordinary queue pays per ready placement is the SISMEMBER). `part` and `jtype` are
-- the job's facts; nil when its hash has none (see `await_facts` in index.lua).
local function push_ready(id, queue, priority, run_us, seq, part, jtype)
  redis.call('RPUSH', key('queue', queue, priority), id)
  redis.call('ZADD', key('ready_at', queue), run_us, id)
  if is_limited(queue) then
    if part then
      index_ready(id, key('job', id), queue, priority, seq, part, jtype)
    else
      await_facts(queue, id)
    end
  end
end

-- Remove the id from wherever its hash says it is; the hash itself stays.
local function unplace(id, jk)
  local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'run_us', 'seq', 'token',
                       'part', 'jtype')
  local status, queue, priority = f[1], f[2], f[3]
  if status == 'ready' then
    redis.call('LREM', key('queue', queue, priority), 0, id)
    redis.call('ZREM', key('ready_at', queue), id)
    if f[7] then
      redis.call('ZREM', key('pready', queue, f[7]), pready_member(f[8], id))
      -- The LREM took the id's ghost copies with it.
      local gk = ghosts_key(queue, priority)
      local ghosts = redis.call('ZSCORE', gk, id)
      if ghosts then
        redis.call('ZREM', gk, id)
        count_ghosts(gk, GHOSTS_TOTAL, -tonumber(ghosts))
      end
    end
  elseif status == 'scheduled' then
    local member = sched_member(id, f[4], f[5])
    redis.call('ZREM', key('scheduled'), member, id)
    redis.call('ZREM', key('scheduled', queue), member, id)
  elseif status == 'processing' then
    redis.call('ZREM', key('inflight'), id)
    redis.call('ZREM', key('inflight', queue), id)
    unhold(f[6], id)
  elseif status == 'waiting' then
    redis.call('ZREM', key('waiting', queue), id)
  end
end

-- The placement arguments (Python's `arguments.placement`) from ARGV[at] on: id, body,
-- queue, priority, target ('ready' or 'scheduled'), run_ms, run_us, and the job's
-- facts, partition and job type.
local PLACEMENT_ARGS = 9
local function placement_at(at)
  return {id = ARGV[at], body = ARGV[at + 1], queue = ARGV[at + 2], priority = ARGV[at + 3],
          target = ARGV[at + 4], run_ms = ARGV[at + 5], run_us = ARGV[at + 6],
          part = ARGV[at + 7], jtype = ARGV[at + 8]}
end

-- Write the job unlocked and put it where `p.target` says (`p`: a placement_at table).
-- Every placement takes the next enqueue sequence number: promotion breaks run_at
-- ties by it. Then the queue's idle workers are woken: also for a parked job, which
-- changes how long they may sleep before it comes due. `op` (optional) is the
-- enqueue's nonce, kept in the hash; `fresh` says the caller found no hash for the
-- job, so no field of an earlier placement is left to take away.
local function place(jk, p, op, fresh)
  local id, queue = p.id, p.queue
  local seq = tostring(redis.call('INCR', key('seq', 'queue')))
  redis.call('SADD', key('queues'), queue)
  local fields = {'body', p.body, 'status', p.target, 'queue', queue, 'priority', p.priority,
                  'run_ms', p.run_ms, 'run_us', p.run_us, 'seq', seq}
  local parked = p.target == 'scheduled'
  if parked then
    fields[#fields + 1] = 'partition'
    fields[#fields + 1] = p.part
    fields[#fields + 1] = 'job_type'
    fields[#fields + 1] = p.jtype
  end
  if op then
    fields[#fields + 1] = 'op'
    fields[#fields + 1] = op
  end
  redis.call('HSET', jk, unpack(fields))
  if parked then
    -- `part` and `jtype` name an index entry, which a parked job has none of.
    if not fresh then redis.call('HDEL', jk, 'token', 'locked_at', 'part', 'jtype') end
    local member = sched_member(id, p.run_us, seq)
    redis.call('ZADD', key('scheduled'), p.run_ms, member)
    redis.call('ZADD', key('scheduled', queue), p.run_ms, member)
  else
    if not fresh then
      redis.call('HDEL', jk, 'token', 'locked_at', 'part', 'jtype', 'partition', 'job_type')
    end
    push_ready(id, queue, p.priority, p.run_us, seq, p.part, p.jtype)
  end
  wake(queue, 1)
end

-- Is this scheduled member due? New members carry run_at in µs (compared as padded
-- digit strings, exact at any size); a bare-id member from an earlier version only
-- has its score, run_at in ms rounded up, due once it is <= now in ms rounded down.
local function member_due(member, score, now_ms, now_us)
  local run_us = string.match(member, '^(%d+):')
  if run_us then
    return run_us <= now_us
  end
  return tonumber(score) <= tonumber(now_ms)
end

-- Move due parked jobs from the scheduled set `from` (the global one, or one queue's)
-- to their ready lists, in promotion order (run_at, then enqueue sequence), each
-- behind the jobs already ready at its priority; at most `limit` are looked at.
-- Each move is guarded by its ZREM, so of concurrent promoters only one moves a job,
-- and it leaves the schedule and joins a list in this same script: no crash finds
-- it in neither place. The body is not touched. ARGS: hi_ms = now in ms rounded up
-- (no due member scores above it), now_ms rounded down, now_us as 18 digits.
local function promote(from, hi_ms, now_ms, now_us, limit)
  local due = redis.call('ZRANGEBYSCORE', from, '-inf', hi_ms, 'WITHSCORES', 'LIMIT', 0, limit)
  -- A promoted job queues behind the jobs already ready: a fresh seq says so, as the
  -- other backends number it, and keeps `seq` in list order for the partition index.
  -- One INCRBY for the batch (numbers of jobs not moved are skipped, harmlessly),
  -- before any other write: a server out of memory checks a script's first write
  -- only, and refuses an INCRBY (never a ZREM), so the promotion, and the claim it
  -- opens, are refused whole.
  local moved, woken, seq = 0, {}, nil
  if #due > 0 then
    seq = redis.call('INCRBY', key('seq', 'queue'), #due / 2) - #due / 2
  end
  for i = 1, #due, 2 do
    local member = due[i]
    if member_due(member, due[i + 1], now_ms, now_us)
        and redis.call('ZREM', from, member) == 1 then
      local id = member_id(member)
      local jk = key('job', id)
      local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'run_us', 'body',
                           'partition', 'job_type')
      if not f[5] then
        drop_orphan(id, member)
      else
        redis.call('ZREM', key('scheduled'), member)
        redis.call('ZREM', key('scheduled', f[2]), member)
        -- A hash that is not scheduled is placed elsewhere; the entry was stray.
        if f[1] == 'scheduled' then
          seq = seq + 1
          local digits = string.format('%d', seq)
          redis.call('HSET', jk, 'status', 'ready', 'seq', digits)
          push_ready(id, f[2], f[3], f[4], digits, f[6], f[7])
          woken[f[2]] = (woken[f[2]] or 0) + 1
          moved = moved + 1
        end
      end
    end
  end
  for queue, n in pairs(woken) do
    wake(queue, n)
  end
  return moved
end
