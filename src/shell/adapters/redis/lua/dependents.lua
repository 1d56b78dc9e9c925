-- Prepended, after the queue's and the store's preludes, to every script that ends a
-- job (finish, finish_many, finish_cancelled, cancel) and to the workflow scripts:
-- jobs that wait for other jobs (`core.dependencies`).
--
-- Keys: {base}:edges:<dependent> lists the edges a job waits on, in order, each as
-- the JSON Python wrote ([dependency, on_failure, name]); {base}:dependents:<id> is
-- the set of the jobs waiting for <id>; {base}:waiting:<queue> holds a queue's waiting
-- jobs (scored by enqueue sequence). A waiting job's hash has status 'waiting' and is
-- in no ready list or scheduled set, so no claim or promotion ever meets it.
--
-- No rule lives here. What a dependency's outcome does to the jobs waiting for it is
-- decided in Python by `core.dependencies` (decide_release, settle) from facts it read:
-- the status of each job it looked at, as `status_of` reads it. A script that ends a
-- job receives that decision as a settle section (the facts, then the jobs to release
-- and the records of the jobs to end, the cascade included) and carries it out inside
-- its own fenced write, after checking that its facts still hold: if one changed (an
-- input finished meanwhile, a dependent was already released), it writes nothing and
-- answers STALE, and Python reads and decides again. A dependent that stays rests
-- only on a witness group: one of its inputs seen unfinished is still as seen (see
-- `_Plan` in settling.py). Nothing is counted, so a finish
-- sent twice or refused by its fence cannot move a dependent.
--
-- A script called without a settle section for a job that others wait for writes
-- nothing and answers SETTLE: the one extra cost of a plain finish is the EXISTS.

local SETTLE, STALE = 2, 3

-- A job's status as the facts name it: its hash's place (ready, scheduled, processing,
-- waiting) while queued, else its record's status, else ''.
local function status_of(id)
  local s = redis.call('HGET', key('job', id), 'status')
  if s then return s end
  return redis.call('HGET', key('store', id), 'status') or ''
end

local function has_dependents(id)
  return redis.call('EXISTS', key('dependents', id)) == 1
end

-- The section at ARGV[at] opens with its facts, {n, id, status, ...}, each of which
-- must hold, then its witness groups, {groups, {n, id, status, ...}...}, in each of
-- which one must hold. Do they? And where does the rest of the section start?
local function facts_hold(at)
  local n = tonumber(ARGV[at])
  for i = 1, n do
    if status_of(ARGV[at + 2 * i - 1]) ~= ARGV[at + 2 * i] then return false end
  end
  at = at + 1 + 2 * n
  local groups = tonumber(ARGV[at])
  at = at + 1
  local ok = true
  for _ = 1, groups do
    local size = tonumber(ARGV[at])
    local held_one = false
    for i = 1, size do
      if not held_one and status_of(ARGV[at + 2 * i - 1]) == ARGV[at + 2 * i] then
        held_one = true
      end
    end
    ok = ok and held_one
    at = at + 1 + 2 * size
  end
  return ok, at
end

-- Hold the job `p` (a placement_at table) as waiting: in its queue's waiting set only.
local function hold_waiting(jk, p)
  local seq = redis.call('INCR', key('seq', 'queue'))
  redis.call('SADD', key('queues'), p.queue)
  redis.call('HDEL', jk, 'token', 'locked_at', 'part', 'jtype', 'partition', 'job_type',
             'run_ms', 'run_us', 'seq')
  redis.call('HSET', jk, 'body', p.body, 'status', 'waiting', 'queue', p.queue,
             'priority', p.priority)
  redis.call('ZADD', key('waiting', p.queue), seq, p.id)
end

-- Carry out the settle section whose moves start at ARGV[at] (its facts checked):
-- place each released job ({n, placement...}), then take out and record each ended
-- one ({n, record...}). Each still waits: the facts said so.
local function settle_section(at)
  local released = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, released do
    local p = placement_at(at)
    local jk = key('job', p.id)
    unplace(p.id, jk)
    place(jk, p)
    at = at + PLACEMENT_ARGS
  end
  local ended = tonumber(ARGV[at])
  at = at + 1
  for _ = 1, ended do
    local r = record_at(at)
    local jk = key('job', r.id)
    unplace(r.id, jk)
    redis.call('DEL', jk)
    record(r)
    at = at + RECORD_ARGS
  end
end

-- What a script ending the job `id` does before writing, given its settle section at
-- ARGV[at] (none when ARGV stops before it): nil to go on, or the answer to return
-- having written nothing (SETTLE: decide first; STALE: decide again).
-- `moves` is where the section's moves start, for `settle_after`.
local moves
local function settle_check(id, at)
  if #ARGV < at then
    return has_dependents(id) and SETTLE or nil
  end
  local ok
  ok, moves = facts_hold(at)
  return (not ok) and STALE or nil
end

-- After the script's own write: the section's moves, if it came with one.
local function settle_after()
  if moves then settle_section(moves) end
end
