-- Prepended to every queue script by redis_queue.py.
--
-- ARGV[1] is the key base, "{prefix}". Every key starts with it, so the whole
-- deployment hashes to one Redis Cluster slot: that is what lets a script touch
-- keys it derives here (a job's queue lists, read from its hash) besides KEYS[1],
-- which is only the routing anchor. Times arrive as arguments from the caller's
-- injected clock; no script reads the server's TIME.
--
-- A job's hash is the truth about where it is: `status` says which structure holds
-- its id (ready list + ready_at zset, scheduled zsets, or in-flight zsets), and
-- `queue`/`priority` name them. Every script keeps the two in step.

local base = ARGV[1]
local PRIORITIES = {'critical', 'high', 'normal', 'low'}
-- Enough wake tokens to rouse a handful of idle workers; more would only make busy
-- workers spin through stale tokens later.
local WAKE_CAP = 16

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

-- Ready: tail of its priority list (FIFO), plus its run_at (µs) for oldest_ready_at.
local function push_ready(id, queue, priority, run_us)
  redis.call('RPUSH', key('queue', queue, priority), id)
  redis.call('ZADD', key('ready_at', queue), run_us, id)
end

-- Remove the id from wherever its hash says it is; the hash itself stays.
local function unplace(id, jk)
  local f = redis.call('HMGET', jk, 'status', 'queue', 'priority')
  local status, queue, priority = f[1], f[2], f[3]
  if status == 'ready' then
    redis.call('LREM', key('queue', queue, priority), 0, id)
    redis.call('ZREM', key('ready_at', queue), id)
  elseif status == 'scheduled' then
    redis.call('ZREM', key('scheduled'), id)
    redis.call('ZREM', key('scheduled', queue), id)
  elseif status == 'processing' then
    redis.call('ZREM', key('inflight'), id)
    redis.call('ZREM', key('inflight', queue), id)
  end
end

-- Write the job unlocked and put it where `target` says ('ready' or 'scheduled').
-- Returns true when it landed on a ready list (the caller then wakes the queue).
local function place(id, jk, body, queue, priority, target, run_ms, run_us)
  redis.call('HSET', jk, 'body', body, 'status', target, 'queue', queue,
             'priority', priority, 'run_ms', run_ms, 'run_us', run_us)
  redis.call('HDEL', jk, 'token', 'locked_at')
  redis.call('SADD', key('queues'), queue)
  if target == 'scheduled' then
    redis.call('ZADD', key('scheduled'), run_ms, id)
    redis.call('ZADD', key('scheduled', queue), run_ms, id)
    return false
  end
  push_ready(id, queue, priority, run_us)
  return true
end

-- An id whose hash (or body) is gone names nothing to run: forget it everywhere it
-- can be, including per-queue sets whose queue we can no longer read from the hash.
-- Only eviction or a hand-made DEL produces one; every script here writes both.
local function drop_orphan(id)
  redis.call('DEL', key('job', id))
  redis.call('ZREM', key('scheduled'), id)
  redis.call('ZREM', key('inflight'), id)
  for _, queue in ipairs(redis.call('SMEMBERS', key('queues'))) do
    redis.call('ZREM', key('scheduled', queue), id)
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
