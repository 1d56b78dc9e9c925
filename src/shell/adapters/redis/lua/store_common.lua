-- Prepended to every store script by scripts.py, behind the values it renders from
-- the core (FINISH_COUNT_KEEP_S).
--
-- ARGV[1] is the key base, "{prefix}" (one Cluster slot for the deployment; KEYS[1]
-- is only the routing anchor). A record is a hash {base}:store:<id>; the indexes are
-- zsets scored by a record sequence, so the newest record sorts last and
-- ZREVRANGE reads newest first. Re-recording a job moves it to the newest place. A
-- record's facts (its job type, the minute its finish counts in, its finish time in
-- µs) arrive with it, computed in Python: no script decodes a body or parses a date.

local base = ARGV[1]

local function key(...)
  return base .. ':' .. table.concat({...}, ':')
end

-- The zsets a record with this status and tenant ('' = none) belongs to.
-- Failed records are the dead letters: {base}:dead, {base}:dead:tenant:<t>.
local function status_key(status, tenant)
  local name = (status == 'failed') and 'dead' or ('history:' .. status)
  if tenant ~= '' then
    return key(name, 'tenant', tenant)
  end
  return key(name)
end

-- A status's index of one queue or one job type: {base}:dead:queue:<q>,
-- {base}:history:completed:type:<t>, ...
local function status_by(status, what, name)
  local prefix = (status == 'failed') and 'dead' or ('history:' .. status)
  return key(prefix, what, name)
end

-- `jtype` is false for a record written before records were indexed by type.
local function index_keys(status, tenant, queue, jtype)
  local keys = {key('history'), status_key(status, tenant)}
  if tenant ~= '' then
    table.insert(keys, key('history', 'tenant', tenant))
    table.insert(keys, status_key(status, ''))
  end
  if queue then
    table.insert(keys, status_by(status, 'queue', queue))
  end
  if jtype and jtype ~= '' then
    table.insert(keys, status_by(status, 'type', jtype))
  end
  return keys
end

-- Completed and failed records per minute finished: {base}:finished:<YYYYMMDDHHMM>,
-- fields `completed` and `failed`. `minute` is the minute a record counts in, as Python
-- works it out from the core ('' for a record that is not counted: neither completed
-- nor failed, or without a finish time); each counter lives FINISH_COUNT_KEEP_S after
-- its last count (relative to the server's clock, so a record finished at any time is
-- counted while it is fresh). A record going (pruned, purged, re-recorded) takes
-- itself off its minute while that counter lives; an expired counter is not brought
-- back.
local function count_finished(status, minute, delta)
  if not minute or minute == '' then return end
  local k = key('finished', minute)
  if delta > 0 then
    redis.call('HINCRBY', k, status, delta)
    redis.call('EXPIRE', k, FINISH_COUNT_KEEP_S)
  elseif redis.call('HEXISTS', k, status) == 1 then
    if redis.call('HINCRBY', k, status, delta) <= 0 then
      redis.call('HDEL', k, status)
    end
  end
end

-- Dead letters per queue, kept beside the index so count_dead need not scan.
local function count_dead(queue, tenant, delta)
  local counters = {key('dead_counts')}
  if tenant ~= '' then
    table.insert(counters, key('dead_counts', 'tenant', tenant))
  end
  for _, k in ipairs(counters) do
    if redis.call('HINCRBY', k, queue, delta) <= 0 then
      redis.call('HDEL', k, queue)
    end
  end
end

-- Tell the callers waiting for job `id` (`Runtime.result`) that a record of it was
-- written. Each waiting process registered its inbox's name in {base}:waiters:<id>
-- (finishes.py); each inbox gets the job's id, a newline, then the record's body (the
-- id alone when the whole would pass CARRIED_MAX_BYTES, rendered from finishes.py), and
-- lives INBOX_KEEP_MS after its newest message. A final record ends the wait, so it
-- takes the registrations with it; one a wait left behind expires on its own.
local function tell_waiters(id, body, status)
  local wk = key('waiters', id)
  local inboxes = redis.call('SMEMBERS', wk)
  if #inboxes == 0 then return end
  if #id + 1 + #body > CARRIED_MAX_BYTES then body = '' end
  local message = id .. '\n' .. body
  for _, inbox in ipairs(inboxes) do
    local ik = key('inbox', inbox)
    redis.call('RPUSH', ik, message)
    redis.call('PEXPIRE', ik, INBOX_KEEP_MS)
  end
  if FINAL[status] then redis.call('DEL', wk) end
end

-- Remove the record `id` (if any) from every index and counter; returns its status.
local function unindex(id)
  local f = redis.call('HMGET', key('store', id), 'status', 'queue', 'tenant', 'type', 'minute')
  local status, queue, tenant = f[1], f[2], f[3]
  if not status then return false end
  for _, k in ipairs(index_keys(status, tenant, queue, f[4])) do
    redis.call('ZREM', k, id)
  end
  if status == 'failed' then
    count_dead(queue, tenant, -1)
  end
  count_finished(status, f[5], -1)
  return status
end

-- The record arguments (Python's `arguments.record_args`) from ARGV[at] on: id, body,
-- status, queue, tenant ('' = none), and the record's facts: job type, counted minute
-- ('' = not counted), finish time in µs ('' = none). `record_of` reads them after the
-- id, for a record the caller names.
local RECORD_ARGS = 8
local function record_of(id, at)
  return {id = id, body = ARGV[at], status = ARGV[at + 1], queue = ARGV[at + 2],
          tenant = ARGV[at + 3], jtype = ARGV[at + 4], minute = ARGV[at + 5],
          finished_us = ARGV[at + 6]}
end

local function record_at(at)
  return record_of(ARGV[at], at + 1)
end

-- Upsert the record `r` (a record_at table) and its indexes; a failed record counts as
-- a dead letter. `...`: more field, value pairs to write into the record's hash.
local function record(r, ...)
  local id, status, queue, tenant = r.id, r.status, r.queue, r.tenant
  unindex(id)
  local seq = redis.call('INCR', key('seq', 'store'))
  redis.call('HSET', key('store', id), 'body', r.body, 'status', status, 'queue', queue,
             'tenant', tenant, 'seq', seq, 'type', r.jtype, 'minute', r.minute,
             'finished_us', r.finished_us, ...)
  for _, k in ipairs(index_keys(status, tenant, queue, r.jtype)) do
    redis.call('ZADD', k, seq, id)
  end
  if status == 'failed' then
    count_dead(queue, tenant, 1)
  end
  count_finished(status, r.minute, 1)
  -- The record rides along to the callers waiting for it, so that they need not read
  -- it back.
  tell_waiters(id, r.body, status)
  return seq
end

-- Whether a job still queued (waiting, ready, parked or in flight: its hash exists)
-- depends on `id`: a prune and a purge then keep `id`'s record, which that job's
-- release reads (a record gone reads as unfinished: it would wait for ever) and its
-- handler's inputs too.
local function needed_by_queued(id)
  for _, dependent in ipairs(redis.call('SMEMBERS', key('dependents', id))) do
    if redis.call('EXISTS', key('job', dependent)) == 1 then return true end
  end
  return false
end

-- What a deleted record (pruned, purged) leaves of workflows. A job in no workflow
-- lets go of its edges and of the set of jobs that waited for it at once. A member
-- counts down its workflow's {base}:workflow_left:<wid> (written with the workflow);
-- the last one takes every member's edges, set and member key, and the workflow's
-- document. A workflow written before that count existed is kept whole.
local function let_go_of_record(id)
  local mk = key('member', id)
  local workflow = redis.call('GET', mk)
  if not workflow then
    redis.call('DEL', key('edges', id), key('dependents', id))
    return
  end
  local lk = key('workflow_left', workflow)
  if redis.call('EXISTS', lk) == 0 or redis.call('DECR', lk) > 0 then return end
  local workflow_doc = redis.call('GET', key('workflow', workflow))
  if workflow_doc then
    for _, pair in ipairs(cjson.decode(workflow_doc).names) do
      local m = pair[2]
      redis.call('DEL', key('edges', m), key('dependents', m), key('member', m))
    end
  end
  redis.call('DEL', lk, key('workflow', workflow), mk)
end
