-- Prepended to every queue script by scripts.py, behind the values it renders from
-- the core (PRIORITIES in claim order, RANK of each priority), and followed by
-- index.lua (a limited queue's partition index) and placement.lua (placing, taking
-- out and promoting jobs); the claim scripts have claiming.lua after those. Here: the
-- key names, wake-ups, scheduled members, held sets and the holder's fence, orphans.
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
  local length = 0
  for _ = 1, math.min(n, WAKE_CAP) do
    length = redis.call('LPUSH', k, '1')
  end
  -- Trimmed only when over the cap: most wakes find the list short (one command saved).
  if length > WAKE_CAP then redis.call('LTRIM', k, 0, WAKE_CAP - 1) end
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
