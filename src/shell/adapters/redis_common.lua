-- Prepended to every queue script by redis_queue.py.
--
-- ARGV[1] is the key base, "{prefix}". Every key starts with it, so the whole
-- deployment hashes to one Redis Cluster slot: that is what lets a script touch
-- keys it derives here (a job's queue lists, read from its hash) besides KEYS[1],
-- which is only the routing anchor. Times arrive as arguments from the caller's
-- clock; no script reads the server's TIME (see `server_time` in redis_queue.py for
-- how callers agree on one clock).
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
local PRIORITIES = {'critical', 'high', 'normal', 'low'}
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

-- Ready: tail of its priority list (FIFO), plus its run_at (µs) for oldest_ready_at.
local function push_ready(id, queue, priority, run_us)
  redis.call('RPUSH', key('queue', queue, priority), id)
  redis.call('ZADD', key('ready_at', queue), run_us, id)
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
  local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'run_us', 'seq', 'token')
  local status, queue, priority = f[1], f[2], f[3]
  if status == 'ready' then
    redis.call('LREM', key('queue', queue, priority), 0, id)
    redis.call('ZREM', key('ready_at', queue), id)
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

-- Write the job unlocked and put it where `target` says ('ready' or 'scheduled').
-- Every placement takes the next enqueue sequence number: promotion breaks run_at
-- ties by it. Returns true when the queue's idle workers should wake (the caller
-- then wakes them): always, since a parked job changes how long they may sleep
-- before it comes due, and an idle worker sleeps until the next `run_at`.
local function place(id, jk, body, queue, priority, target, run_ms, run_us)
  local seq = tostring(redis.call('INCR', key('seq', 'queue')))
  redis.call('HSET', jk, 'body', body, 'status', target, 'queue', queue,
             'priority', priority, 'run_ms', run_ms, 'run_us', run_us, 'seq', seq)
  redis.call('HDEL', jk, 'token', 'locked_at')
  redis.call('SADD', key('queues'), queue)
  if target == 'scheduled' then
    local member = sched_member(id, run_us, seq)
    redis.call('ZADD', key('scheduled'), run_ms, member)
    redis.call('ZADD', key('scheduled', queue), run_ms, member)
    return true
  end
  push_ready(id, queue, priority, run_us)
  return true
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
  local moved, woken = 0, {}
  for i = 1, #due, 2 do
    local member = due[i]
    if member_due(member, due[i + 1], now_ms, now_us)
        and redis.call('ZREM', from, member) == 1 then
      local id = member_id(member)
      local jk = key('job', id)
      local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'run_us', 'body')
      if not f[5] then
        drop_orphan(id, member)
      else
        redis.call('ZREM', key('scheduled'), member)
        redis.call('ZREM', key('scheduled', f[2]), member)
        -- A hash that is not scheduled is placed elsewhere; the entry was stray.
        if f[1] == 'scheduled' then
          redis.call('HSET', jk, 'status', 'ready')
          push_ready(id, f[2], f[3], f[4])
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
