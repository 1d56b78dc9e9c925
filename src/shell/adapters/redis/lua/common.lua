-- Prepended to every queue script by scripts.py, behind the values it renders from
-- the core (PRIORITIES in claim order, RANK of each priority).
--
-- ARGV[1] is the key base, "{prefix}". Every key starts with it, so the whole
-- deployment hashes to one Redis Cluster slot: that is what lets a script touch
-- keys it derives here (a job's queue lists, read from its hash) besides KEYS[1],
-- which is only the routing anchor. Times arrive as arguments from the caller's
-- clock; no script reads the server's TIME (see `server_time` in reads.py for how
-- callers agree on one clock). A job's facts (its partition and job type) arrive as
-- arguments too, computed in Python from the core: no script decodes a body to work
-- out a rule.
--
-- A job's hash is the truth about where it is: `status` says which structure holds
-- its id (ready list + ready_at zset, scheduled zsets, or in-flight zsets), and
-- `queue`/`priority` name them. Every script keeps the two in step.
--
-- Scheduled members. The scheduled zsets are scored by run_at in ms (rounded up),
-- and Redis orders equal scores by member. A member is therefore
-- "<run_us, 18 digits>:<seq, 20 digits>:<id>", so that within one millisecond jobs
-- sort by exact run_at and then by the enqueue sequence (`seq` in the hash, from the
-- {base}:seq:queue counter): the core's promotion order. A member that is a bare id
-- was written by an earlier version (its hash has no `seq`); it is still found,
-- promoted and removed, ordered among its millisecond's peers by id.

local base = ARGV[1]
-- Enough wake tokens to rouse a handful of idle workers; more would only make busy
-- workers spin through stale tokens later.
local WAKE_CAP = 16
-- Due parked jobs a claim promotes before it pops: enough to keep up with any
-- schedule a worker fleet can drain, few enough that one claim stays cheap.
local CLAIM_PROMOTE_CAP = 100

local function key(...)
  return base .. ':' .. table.concat({...}, ':')
end

local function wake(queue, n)
  local k = key('wake', queue)
  for _ = 1, math.min(n, WAKE_CAP) do
    redis.call('LPUSH', k, '1')
  end
  redis.call('LTRIM', k, 0, WAKE_CAP - 1)
end

local function pad(digits, width)
  return string.rep('0', width - #digits) .. digits
end

local function sched_member(id, run_us, seq)
  if not seq then return id end
  return pad(run_us, 18) .. ':' .. pad(seq, 20) .. ':' .. id
end

local function member_id(member)
  return string.match(member, '([^:]*)$')
end

-- Limited queues (fair shares, caps, rates: see limits.py). A queue whose limits are
-- in use is a member of {base}:limited, and each of its ready jobs is also in the zset
-- {base}:pready:<queue>:<partition> as "<job type>:<id>" (`pready_member`; a job type
-- has no ':'), scored by priority rank * 1e15 + seq (an integer below 2^53, exact in a
-- double), so a claim reads the first jobs of each partition in claim order from the
-- index alone, without walking the backlog; {base}:parts:<queue> names the partitions.
-- The hash keeps the job's `part` and `jtype` (its facts, as the placement gave them)
-- to find its entry and for the running counts: `part` set means "indexed". Every path
-- that takes a ready job out removes its entry (the claim scripts, `unplace`, the
-- limited take); one left behind anyway (a hash deleted by hand) is dropped by the
-- limited take, which checks each job it planned against its hash.
--
-- A parked job keeps its facts as `partition` and `job_type` until it is promoted. A
-- ready job of a limited queue found without facts (placed before its queue's limits
-- were used, or by an earlier version) waits in the set {base}:nofacts:<queue> for
-- Python to read its body and hand its facts over (limited_facts.lua); until that set
-- is empty the limited read answers "not indexed".

-- The index score, as a string: a Lua number would be printed with 14 digits.
local function ready_score(priority, seq)
  local rank = RANK[priority] or #PRIORITIES
  seq = seq or '0'
  if rank == 0 then return seq end
  return rank .. pad(seq, 15)
end

local function pready_member(jtype, id)
  return (jtype or '') .. ':' .. id
end

-- Index a ready job of a limited queue under its partition `part`, as `jtype`.
local function index_ready(id, jk, queue, priority, seq, part, jtype)
  redis.call('HSET', jk, 'part', part, 'jtype', jtype)
  redis.call('ZADD', key('pready', queue, part), ready_score(priority, seq),
             pready_member(jtype, id))
  redis.call('SADD', key('parts', queue), part)
end

-- Ghosts. A limited take claims jobs from anywhere in their priority lists, and taking
-- one out of the middle of a long list (LREM) costs a scan up to it. So the take
-- leaves the id where it is, a ghost copy, counted in the zset
-- {base}:ghosts:<queue>:<priority> (member: id -> its ghost copies in that list;
-- member '#': all of them, which `counts` subtracts from the list's length). A
-- placement appends, so every ghost copy of an id comes before its live copy: whoever
-- pops an id that has ghosts in that list holds a ghost copy, drops it and counts one
-- fewer (`unghost`). The limited read pops the ghosts that reach the head of a list.
local GHOSTS_TOTAL = '#'
local function ghosts_key(queue, priority)
  return key('ghosts', queue, priority)
end

local function count_ghosts(gk, member, delta)
  local left = tonumber(redis.call('ZINCRBY', gk, delta, member))
  if left <= 0 then redis.call('ZREM', gk, member) end
end

-- True when the copy of `id` just popped from (queue, priority)'s list was a ghost (it
-- is then counted off); false for a live or stray copy.
local function unghost(queue, priority, id)
  local gk = ghosts_key(queue, priority)
  if not redis.call('ZSCORE', gk, id) then return false end
  count_ghosts(gk, id, -1)
  count_ghosts(gk, GHOSTS_TOTAL, -1)
  return true
end

-- Membership of {base}:limited, asked once per queue per script (a promotion moves
-- many jobs of one queue). No script both joins a queue to it and places jobs.
local limited_queues = {}
local function is_limited(queue)
  local known = limited_queues[queue]
  if known == nil then
    known = redis.call('SISMEMBER', key('limited'), queue) == 1
    limited_queues[queue] = known
  end
  return known
end

-- Ready: tail of its priority list (FIFO), plus its run_at (µs) for oldest_ready_at,
-- plus the partition index when the queue is limited (the one extra command an
-- ordinary queue pays per ready placement is the SISMEMBER). `part` and `jtype` are
-- the job's facts; nil when its hash has none (see above).
local function push_ready(id, queue, priority, run_us, seq, part, jtype)
  redis.call('RPUSH', key('queue', queue, priority), id)
  redis.call('ZADD', key('ready_at', queue), run_us, id)
  if is_limited(queue) then
    if part then
      index_ready(id, key('job', id), queue, priority, seq, part, jtype)
    else
      redis.call('SADD', key('nofacts', queue), id)
    end
  end
end

-- Held sets. Each claim_many call keeps {base}:held:<token_base>, a set of the ids it
-- claimed, and a member means exactly this: the job's hash is processing under the
-- token token_base .. ':' .. id, with no cancel request. finish_many then fences a
-- whole batch with one SMISMEMBER instead of reading every job's hash. So every script
-- that ends or changes such a claim takes the id out (`unhold`): ack, finish,
-- finish_many, finish_cancelled, start, request_cancel, and `unplace` for upsert,
-- replace, reclaim and revive. A set whose claims are all gone is gone too. Only
-- membership is trusted: an id missing from its set (a claim taken by an earlier
-- version, or one started under a plain token) is fenced by its hash as before.
local function held_key(token)
  local token_base = token and string.match(token, '^(p%-[^:]+):')
  return token_base and key('held', token_base)
end

local function unhold(token, id)
  local hk = held_key(token)
  if hk then redis.call('SREM', hk, id) end
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
-- changes how long they may sleep before it comes due.
local function place(jk, p)
  local id, queue = p.id, p.queue
  local seq = tostring(redis.call('INCR', key('seq', 'queue')))
  redis.call('SADD', key('queues'), queue)
  if p.target == 'scheduled' then
    redis.call('HSET', jk, 'body', p.body, 'status', p.target, 'queue', queue,
               'priority', p.priority, 'run_ms', p.run_ms, 'run_us', p.run_us, 'seq', seq,
               'partition', p.part, 'job_type', p.jtype)
    -- `part` and `jtype` name an index entry, which a parked job has none of.
    redis.call('HDEL', jk, 'token', 'locked_at', 'part', 'jtype')
    local member = sched_member(id, p.run_us, seq)
    redis.call('ZADD', key('scheduled'), p.run_ms, member)
    redis.call('ZADD', key('scheduled', queue), p.run_ms, member)
  else
    redis.call('HSET', jk, 'body', p.body, 'status', p.target, 'queue', queue,
               'priority', p.priority, 'run_ms', p.run_ms, 'run_us', p.run_us, 'seq', seq)
    redis.call('HDEL', jk, 'token', 'locked_at', 'part', 'jtype', 'partition', 'job_type')
    push_ready(id, queue, p.priority, p.run_us, seq, p.part, p.jtype)
  end
  wake(queue, 1)
end

-- An id whose hash (or body) is gone names nothing to run: forget it everywhere it
-- can be, including per-queue sets whose queue we can no longer read from the hash.
-- Only eviction or a hand-made DEL produces one; every script here writes both.
-- `member` is its scheduled-set member when the caller met it there.
local function drop_orphan(id, member)
  member = member or id
  redis.call('DEL', key('job', id))
  redis.call('ZREM', key('scheduled'), member, id)
  redis.call('ZREM', key('inflight'), id)
  for _, queue in ipairs(redis.call('SMEMBERS', key('queues'))) do
    redis.call('ZREM', key('scheduled', queue), member, id)
    redis.call('ZREM', key('inflight', queue), id)
    redis.call('ZREM', key('ready_at', queue), id)
  end
end

-- The fence of every claim holder's write: the hash still carries this token and
-- is still processing.
local function held(jk, token)
  local f = redis.call('HMGET', jk, 'token', 'status')
  return f[1] == token and f[2] == 'processing'
end

-- Members (or score-member pairs) go to one command per key (`k`; nil for a command
-- whose arguments are all keys), in chunks that stay well under Lua's limit on
-- unpacked arguments.
local CHUNK = 1000
local function call_many(command, k, args)
  for i = 1, #args, CHUNK do
    local last = math.min(i + CHUNK - 1, #args)
    if k then
      redis.call(command, k, unpack(args, i, last))
    else
      redis.call(command, unpack(args, i, last))
    end
  end
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
  -- One INCRBY for the batch (numbers of jobs not moved are skipped, harmlessly).
  local moved, woken, seq = 0, {}, nil
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
          if not seq then
            seq = redis.call('INCRBY', key('seq', 'queue'), #due / 2) - #due / 2
          end
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

-- The lock time a claim records: `now_ms`, or `locked_ms` when the caller gives one.
-- A claim sent behind a blocking wait (RedisJobQueue.wait_and_dequeue) runs when the
-- wait ends, which the caller cannot know; it gives the moment the wait is due to end
-- at the latest, so a claim taken early in the wait is reclaimed late, not early.
local function lock_time(locked_ms, now_ms)
  if locked_ms and locked_ms ~= '' then return locked_ms end
  return now_ms
end

-- A claim call's receipt: the ids it took, kept for `ttl_ms` under its token so that
-- a re-send of the same call (its reply was lost to a dropped connection) returns
-- those claims instead of taking more. ttl_ms '0' = the caller never re-sends.
local function receipt_key(token)
  return key('receipt', token)
end

local function write_receipt(token, ids, ttl_ms)
  if ttl_ms ~= '0' and #ids > 0 then
    redis.call('SET', receipt_key(token), table.concat(ids, ','), 'PX', ttl_ms)
  end
end

-- A batch of claims under `token_base` leaves the queue's ready_at set for the
-- in-flight sets (`flight`: score, id pairs), joins the batch's held set, and is
-- named by its receipt: the common end of claim_many and a limited take.
local function hold_batch(queue, token_base, taken, flight, ttl_ms)
  if #taken == 0 then return end
  call_many('ZREM', key('ready_at', queue), taken)
  call_many('ZADD', key('inflight'), flight)
  call_many('ZADD', key('inflight', queue), flight)
  call_many('SADD', key('held', token_base), taken)
  write_receipt(token_base, taken, ttl_ms)
end

-- The {id, body} pairs (flat) that a re-sent claim's receipt names and `token_of(id)`
-- still holds; nil when there is no receipt (the call is new, or took nothing).
local function replay(token, ttl_ms, token_of)
  if ttl_ms == '0' then return nil end
  local ids = redis.call('GET', receipt_key(token))
  if not ids then return nil end
  local out = {}
  for id in string.gmatch(ids, '[^,]+') do
    local jk = key('job', id)
    local f = redis.call('HMGET', jk, 'token', 'status', 'body')
    if f[1] == token_of(id) and f[2] == 'processing' and f[3] then
      table.insert(out, id)
      table.insert(out, f[3])
    end
  end
  return out
end
