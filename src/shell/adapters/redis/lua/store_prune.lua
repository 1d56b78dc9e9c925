-- prune (retention). ARGV: base, status ('completed' | 'failed'), cutoff_us ('' = no age
-- rule), keep ('' = no count rule), limit, dry ('1' = only count), offset,
-- remember_ms ('' = leave no tombstone), pruned_us, then any number of (id, seq,
-- finished_us) facts for records written before records kept their finish time (see
-- below).
-- A deleted record leaves a tombstone {base}:pruned:<id> (its value: pruned_us) that
-- expires remember_ms later, so a caller asking for that job's result is told it was
-- pruned rather than never enqueued.
-- Walks the status index oldest recorded first. A record qualifies when it is beyond
-- the newest `keep` of its status, or finished before `cutoff_us`; the walk stops at
-- the first record that does neither (the index is in recording order, which is
-- finishing order up to the skew between workers' clocks). A record whose job is
-- still queued or in flight, or one a queued job depends on, is skipped, never deleted.
-- Deleting: up to `limit` records go, from a window of twice that from `offset`;
-- returns {deleted, done, examined}: when the window held more skipped records than
-- it let go, the caller calls again past those skipped (so records a waiting fan-in
-- keeps at the front of the index cannot stall pruning).
-- Dry: examines `limit` entries from `offset`; returns {qualifying, done, examined}
-- where done is 1 once the walk stopped or reached the end (the caller pages on).
-- A record's finish time is its `finished_us` ('' when it has none: never deleted by
-- age, but not a stop either). A record written before records kept it has no such
-- field: when the age rule needs one, the script changes nothing and returns
-- {-1, 0, id, seq, body, ...} for each such record the walk met; the caller works the
-- finish times out of the bodies and calls again with them as facts, which are kept
-- (each only while the record's seq is still the one it was read under).
-- Atomic like every script: a record is unindexed and deleted together, and a
-- record deleted by a concurrent prune is simply no longer in the index.
local status, cutoff, keep = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local limit, dry, offset = tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7]) or 0
local remember, pruned_us = tonumber(ARGV[8]), ARGV[9]
local index = status_key(status, '')

for at = 10, #ARGV, 3 do
  local rk = key('store', ARGV[at])
  if (redis.call('HGET', rk, 'seq') or '') == ARGV[at + 1] then
    redis.call('HSETNX', rk, 'finished_us', ARGV[at + 2])
  end
end

local excess = 0
if keep then
  excess = math.max(0, redis.call('ZCARD', index) - keep)
end
local first, window = offset, limit
if not dry then
  window = limit * 2
end
local ids = redis.call('ZRANGE', index, first, first + window - 1)

-- Records met without a finish time of their own: {-1, 0, id, seq, body, ...}.
local asked = {-1, 0}

-- The record's finish time in µs ('' = none), or nil when it was written before
-- records kept it (it is then asked for).
local function finished_us(id)
  local rk = key('store', id)
  local at = redis.call('HGET', rk, 'finished_us')
  if at then return at end
  local f = redis.call('HMGET', rk, 'seq', 'body')
  if not f[2] then return '' end
  table.insert(asked, id)
  table.insert(asked, f[1] or '')
  table.insert(asked, f[2])
  return nil
end

-- Decide first, write after: a walk that meets a record without its finish time
-- writes nothing and asks for it.
local picked, done, examined = {}, (#ids < window) and 1 or 0, 0
for i, id in ipairs(ids) do
  if not dry and #picked >= limit then break end
  examined = i
  local qualifies = (first + i - 1) < excess
  local unknown = false
  if not qualifies and cutoff then
    local at = finished_us(id)
    if at == nil or at == '' then
      unknown = true -- asked for, or none: never deleted by age, but not a stop
    else
      qualifies = tonumber(at) < cutoff
    end
  end
  if not qualifies and not unknown then
    done = 1
    break
  end
  local idle = redis.call('EXISTS', key('job', id)) == 0 and not needed_by_queued(id)
  if qualifies and idle and redis.call('HGET', key('store', id), 'status') == status then
    table.insert(picked, id)
  end
end
if #asked > 2 then
  return asked
end
if not dry then
  for _, id in ipairs(picked) do
    unindex(id)
    redis.call('DEL', key('store', id))
    let_go_of_record(id)
    if remember and remember > 0 then
      redis.call('SET', key('pruned', id), pruned_us, 'PX', remember)
    end
  end
end
return {#picked, done, examined}
