-- limited_facts: the facts of a limited queue's ready jobs that were placed without
-- them (see `await_facts` in index.lua), handed over by Python.
-- ARGV: base, queue, budget, then n × (id, seq, partition, job type) worked out from
-- the bodies this script returned last time.
-- Each job handed over waits no more, and is indexed under its facts while its hash
-- still says ready in this queue, unindexed, under the seq its body was read with (a
-- placement since brought its own facts). Then the next jobs still waiting, at most
-- about `budget`: returns a flat {id, seq, body, ...}; empty once none is left. A job
-- that is no longer ready and unindexed in this queue waits no more.
local queue, budget = ARGV[2], tonumber(ARGV[3])
local lk = key('limits', queue)
for at = 4, #ARGV, 4 do
  local id, seq = ARGV[at], ARGV[at + 1]
  stop_awaiting(lk, id)
  local jk = key('job', id)
  local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'seq', 'part', 'body')
  if f[1] == 'ready' and f[2] == queue and f[6] and not f[5] and (f[4] or '') == seq then
    index_ready(id, jk, queue, f[3], f[4], ARGV[at + 2], ARGV[at + 3])
  end
end

-- The waiting jobs' fields, from the start of the state hash each time (those handed
-- over are gone from it).
local waiting, cursor = {}, '0'
repeat
  local page = redis.call('HSCAN', lk, cursor, 'MATCH', 'n:*', 'COUNT', budget)
  cursor = page[1]
  for i = 1, #page[2], 2 do
    table.insert(waiting, string.sub(page[2][i], 3))
  end
until cursor == '0' or #waiting >= budget

local out = {}
for _, id in ipairs(waiting) do
  local jk = key('job', id)
  local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'seq', 'part', 'body',
                       'partition', 'job_type')
  if f[1] ~= 'ready' or f[2] ~= queue or not f[6] or f[5] then
    stop_awaiting(lk, id)
  elseif f[7] then
    index_ready(id, jk, queue, f[3], f[4], f[7], f[8] or '')
    stop_awaiting(lk, id)
  else
    table.insert(out, id)
    table.insert(out, f[4] or '')
    table.insert(out, f[6])
  end
end
return out
