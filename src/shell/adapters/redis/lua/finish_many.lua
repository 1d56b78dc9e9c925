-- finish_many: `finish` for several claims in one round trip.
-- ARGV: base, nonce, then per job: id, token, the record after its id (7 arguments: see
-- `record_at`), claim_queue (the queue the claim was taken from, whose in-flight set
-- holds it).
-- A re-send of this call finds the nonce in the records that landed (`op`).
-- Each job's fence, record and release are one step, as in finish (the whole script
-- is); the fence of prefetched claims and the index, in-flight, held-set and delete
-- commands are shared by the batch.
-- Returns 1/0 per job, or 2 (SETTLE, see dependents.lua) for a job others wait for,
-- which is left as it is: its caller finishes it on its own with a settle section.
local nonce = ARGV[2]
local STEP = RECORD_ARGS + 2

-- Which of `ids` already have a record (every record is in {base}:history): one
-- ZMSCORE per chunk instead of a hash read per job, since most finished jobs were
-- never recorded before.
local function recorded(ids)
  local known = {}
  for i = 1, #ids, CHUNK do
    local last = math.min(i + CHUNK - 1, #ids)
    local scores = redis.call('ZMSCORE', key('history'), unpack(ids, i, last))
    for j = i, last do
      if scores[j - i + 1] then known[ids[j]] = true end
    end
  end
  return known
end

-- `record` for a batch (`items`: record_of tables): one INCRBY for the sequence, one
-- ZADD per index key.
local function record_many(items, ids)
  local seq = redis.call('INCRBY', key('seq', 'store'), #items) - #items
  local adds, known, dead, finished = {}, recorded(ids), {}, {}
  for _, r in ipairs(items) do
    local id, status, queue, tenant, minute = r.id, r.status, r.queue, r.tenant, r.minute
    if known[id] then
      unindex(id)
    end
    -- A batch naming one id twice: its later item replaces the earlier's record.
    known[id] = true
    seq = seq + 1
    redis.call('HSET', key('store', id), 'body', r.body, 'status', status, 'queue', queue,
               'tenant', tenant, 'seq', seq, 'op', nonce, 'type', r.jtype, 'minute', minute,
               'finished_us', r.finished_us)
    for _, k in ipairs(index_keys(status, tenant, queue, r.jtype)) do
      adds[k] = adds[k] or {}
      table.insert(adds[k], seq)
      table.insert(adds[k], id)
    end
    if status == 'failed' then
      dead[tenant] = dead[tenant] or {}
      dead[tenant][queue] = (dead[tenant][queue] or 0) + 1
    end
    finished[status] = finished[status] or {}
    finished[status][minute] = (finished[status][minute] or 0) + 1
    tell_waiters(id, r.body, status)
  end
  for k, pairs_ in pairs(adds) do
    call_many('ZADD', k, pairs_)
  end
  -- The counters move once per batch, not per job: a batch mostly finishes in one
  -- minute, on one queue.
  for tenant, queues in pairs(dead) do
    for queue, n in pairs(queues) do
      count_dead(queue, tenant, n)
    end
  end
  for status, minutes in pairs(finished) do
    for minute, n in pairs(minutes) do
      count_finished(status, minute, n)
    end
  end
end

-- Which items their call's held set vouches for (see `held_key` in common.lua): one
-- SMISMEMBER per set, instead of a hash read per job.
local function vouched()
  local groups, ok = {}, {}
  for i = 3, #ARGV, STEP do
    local hk = held_key(ARGV[i + 1])
    if hk then
      groups[hk] = groups[hk] or {}
      table.insert(groups[hk], i)
    end
  end
  for hk, idx in pairs(groups) do
    for c = 1, #idx, CHUNK do
      local last = math.min(c + CHUNK - 1, #idx)
      local ids = {}
      for j = c, last do
        table.insert(ids, ARGV[idx[j]])
      end
      local member = redis.call('SMISMEMBER', hk, unpack(ids))
      for j = c, last do
        if member[j - c + 1] == 1 then ok[idx[j]] = true end
      end
    end
  end
  return ok
end

local out, items, released, hashes, by_queue, unheld = {}, {}, {}, {}, {}, {}
local fast = vouched()
for i = 3, #ARGV, STEP do
  local id, token = ARGV[i], ARGV[i + 1]
  local jk = key('job', id)
  local holds, queue = fast[i], ARGV[i + STEP - 1]
  if not holds then
    local f = redis.call('HMGET', jk, 'token', 'status', 'queue', 'cancel')
    -- A cancel request refuses the outcome: the holder records the cancel instead.
    holds, queue = f[1] == token and f[2] == 'processing' and not f[4], f[3]
  end
  if holds and has_dependents(ARGV[i]) then
    table.insert(out, SETTLE)
  elseif holds then
    table.insert(items, record_of(id, i + 2))
    table.insert(released, id)
    table.insert(hashes, jk)
    by_queue[queue] = by_queue[queue] or {}
    table.insert(by_queue[queue], id)
    local hk = held_key(token)
    if hk then
      unheld[hk] = unheld[hk] or {}
      table.insert(unheld[hk], id)
    end
    table.insert(out, 1)
  elseif redis.call('HGET', key('store', id), 'op') == nonce then
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
if #items > 0 then
  record_many(items, released)
  call_many('ZREM', key('inflight'), released)
  for queue, ids in pairs(by_queue) do
    call_many('ZREM', key('inflight', queue), ids)
  end
  for hk, ids in pairs(unheld) do
    call_many('SREM', hk, ids)
  end
  call_many('DEL', nil, hashes)
end
return out
