-- limited_index (the one-time upgrade of a queue to limited claims).
-- ARGV: base, queue, budget
-- From the first call on, the queue is in {base}:limited, so every later ready
-- placement indexes itself (push_ready). The jobs already ready are indexed here, by a
-- ZSCAN of the queue's ready_at set whose cursor is kept in {base}:limits:<queue>
-- (`scan`) between calls: about `budget` jobs per call, so a large backlog never
-- holds the server for long, and concurrent callers share the work. ZSCAN returns
-- every member present from the first call to the last; one placed in between
-- indexed itself, and one that left needs no entry. A job is indexed only while its
-- hash says ready in this queue, under the facts its hash keeps (`part` and `jtype`
-- once indexed, `partition` and `job_type` from a parked placement); a job placed
-- ready before the queue was limited has none, and waits for Python to hand them over
-- (`await_facts`; limited_facts.lua). Returns 1 once the whole set has been
-- scanned (`indexed` set), else 0: call again.
local queue, budget = ARGV[2], tonumber(ARGV[3])
local lk = key('limits', queue)
if redis.call('HGET', lk, 'indexed') == '1' then return 1 end
redis.call('SADD', key('limited'), queue)
local cursor = redis.call('HGET', lk, 'scan') or '0'
local seen = 0
repeat
  local page = redis.call('ZSCAN', key('ready_at', queue), cursor, 'COUNT', 200)
  cursor = page[1]
  local members = page[2]
  for i = 1, #members, 2 do
    local id = members[i]
    local jk = key('job', id)
    local f = redis.call('HMGET', jk, 'status', 'queue', 'priority', 'seq', 'body', 'part',
                         'jtype', 'partition', 'job_type')
    if f[1] == 'ready' and f[2] == queue and f[5] then
      if f[6] then
        index_ready(id, jk, queue, f[3], f[4], f[6], f[7] or '')
      elseif f[8] then
        index_ready(id, jk, queue, f[3], f[4], f[8], f[9] or '')
      else
        await_facts(queue, id)
      end
    end
    seen = seen + 1
  end
until cursor == '0' or seen >= budget
if cursor == '0' then
  redis.call('HSET', lk, 'indexed', '1')
  redis.call('HDEL', lk, 'scan')
  return 1
end
redis.call('HSET', lk, 'scan', cursor)
return 0
