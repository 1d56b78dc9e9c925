-- limited_facts: the facts of a limited queue's ready jobs that were placed without
-- them (see {base}:nofacts:<queue> in the prelude), handed over by Python.
-- ARGV: base, queue, budget, then n × (id, seq, partition, job type) worked out from
-- the bodies this script returned last time.
-- Each job handed over leaves the set, and is indexed under its facts while its hash
-- still says ready in this queue, unindexed, under the seq its body was read with (a
-- placement since brought its own facts). Then the next jobs of the set still
-- waiting, at most `budget`: returns a flat {id, seq, body, ...}; empty once none is
-- left. A member that is no longer a ready, unindexed job of this queue is dropped.
local queue, budget = ARGV[2], tonumber(ARGV[3])
local nk = key('nofacts', queue)
for at = 4, #ARGV, 4 do
  local id, seq = ARGV[at], ARGV[at + 1]
  redis.call('SREM', nk, id)
  local jk = key('job', id)
  local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'seq', 'part', 'body')
  if f[1] == 'ready' and f[2] == queue and f[6] and not f[5] and (f[4] or '') == seq then
    index_ready(id, jk, queue, f[3], f[4], ARGV[at + 2], ARGV[at + 3])
  end
end
local out = {}
for _, id in ipairs(redis.call('SRANDMEMBER', nk, budget)) do
  local jk = key('job', id)
  local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'seq', 'part', 'body',
                       'partition', 'job_type')
  if f[1] ~= 'ready' or f[2] ~= queue or not f[6] or f[5] then
    redis.call('SREM', nk, id)
  elseif f[7] then
    index_ready(id, jk, queue, f[3], f[4], f[7], f[8] or '')
    redis.call('SREM', nk, id)
  else
    table.insert(out, id)
    table.insert(out, f[4] or '')
    table.insert(out, f[6])
  end
end
return out
