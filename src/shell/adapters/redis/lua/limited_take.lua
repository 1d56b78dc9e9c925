-- limited_take: take what the caller planned from a limited_read, if nothing a plan
-- depends on has changed since. ARGV: base, queue, token_base, version, locked_ms,
-- receipt_ttl_ms, n, then n × (id, seq, partition, job type) as read, then m, m pairs
-- (state field, value) to set, then k, k state fields to delete.
-- Optimistic concurrency instead of a lock: the version `v` in {base}:limits:<queue>
-- moves with every limited take, so a plan made from an older read is refused ({0})
-- and the caller reads and plans again. Nothing else needs to move it: a finish, a
-- cancel or a reclaim only lowers the running counts, and an enqueue only adds
-- candidates, both safe for a plan made just before. Each planned job must still be
-- ready in this queue under the seq, partition and type it was read with, or the take
-- is refused whole ({0}); its only writes then drop the index entries the plan read
-- that name no such ready job (stale: a hash deleted by hand, say), so the next read
-- does not meet them. Then, as claim_many does, each job is claimed under its own
-- token token_base .. ':' .. id (prefetched), the batch shares the held set and the
-- receipt, and the buckets and passes are written with the version, in this step.
-- Idempotent by token_base: a re-send returns the claims the first send took.
-- Returns {1, {id, body, ...}} or {0}.
local queue, token_base, version = ARGV[2], ARGV[3], ARGV[4]
local locked, ttl, n = ARGV[5], ARGV[6], tonumber(ARGV[7])
local again = replay(token_base, ttl, function(id) return token_base .. ':' .. id end)
if again then
  return {1, again}
end
local lk = key('limits', queue)
if (redis.call('HGET', lk, 'v') or '0') ~= version then return {0} end

local STEP = 4
local jobs, refused = {}, false
for i = 0, n - 1 do
  local at = 8 + STEP * i
  local id, seq, part, jtype = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  local jk = key('job', id)
  local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'seq', 'part', 'body',
                       'jtype')
  local indexed = f[1] == 'ready' and f[2] == queue and f[6] and f[5] == part
    and (f[7] or '') == jtype
  if not indexed then
    redis.call('ZREM', key('pready', queue, part), pready_member(jtype, id))
    refused = true
  elseif (f[4] or '0') ~= seq then
    refused = true -- placed again since the read: still indexed, under its new seq
  end
  table.insert(jobs, {id, jk, f[3], f[5], f[6], f[7]})
end
if refused then return {0} end

-- ARGV[first + 1 .. first + count] as a table (a loop: unpack has a stack limit).
local function args(first, count)
  local out = {}
  for i = first + 1, first + count do table.insert(out, ARGV[i]) end
  return out
end

local at = 8 + STEP * n
local puts = tonumber(ARGV[at])
if puts > 0 then call_many('HSET', lk, args(at, 2 * puts)) end
at = at + 2 * puts + 1
local drops = tonumber(ARGV[at])
if drops > 0 then call_many('HDEL', lk, args(at, drops)) end
redis.call('HINCRBY', lk, 'v', 1)

-- Each id stays in its priority list as a ghost copy (see index.lua): taking it out
-- of the middle of a long list would cost a scan up to it.
local out, taken, flight, ghosts = {}, {}, {}, {}
for _, job in ipairs(jobs) do
  local id, jk, priority, part, body, jtype = job[1], job[2], job[3], job[4], job[5], job[6]
  redis.call('HSET', jk, 'status', 'processing', 'token', token_base .. ':' .. id,
             'locked_at', locked)
  redis.call('ZINCRBY', ghosts_key(queue, priority), 1, id)
  ghosts[priority] = (ghosts[priority] or 0) + 1
  redis.call('ZREM', key('pready', queue, part), pready_member(jtype, id))
  table.insert(taken, id)
  table.insert(flight, locked)
  table.insert(flight, id)
  table.insert(out, id)
  table.insert(out, body)
end
for priority, n in pairs(ghosts) do
  redis.call('ZINCRBY', ghosts_key(queue, priority), n, GHOSTS_TOTAL)
end
hold_batch(queue, token_base, taken, flight, ttl)
return {1, out}
