-- Prepended to every queue script after common.lua: the partition index of a limited
-- queue's ready jobs and the ghost copies its claims leave (see limits.py).

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
-- were used, or by an earlier version) waits for Python to read its body and hand
-- its facts over (limited_facts.lua): as the field 'n:<id>' of the queue's state hash
-- {base}:limits:<queue>, whose field 'nofacts' counts them. While any waits, the
-- limited read answers "not indexed".

local NOFACTS = 'nofacts'

-- The job `id` of a limited queue, ready without its facts, waits for them.
local function await_facts(queue, id)
  local lk = key('limits', queue)
  if redis.call('HSETNX', lk, 'n:' .. id, '1') == 1 then
    redis.call('HINCRBY', lk, NOFACTS, 1)
  end
end

-- The job `id` waits for its facts no more (they came, or it is no longer ready).
local function stop_awaiting(lk, id)
  if redis.call('HDEL', lk, 'n:' .. id) == 1 and redis.call('HINCRBY', lk, NOFACTS, -1) <= 0 then
    redis.call('HDEL', lk, NOFACTS)
  end
end

-- The index score, as a string: a Lua number would be printed with 14 digits.
local function ready_score(priority, seq)
  local rank = RANK[priority] or #PRIORITIES
  seq = seq or '0'
  if rank == 0 then return seq end
  return rank .. pad(seq, SEQ_DIGITS)
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
