-- counts. ARGV: base, split_limit
-- One consistent snapshot per known queue: {name, ready, scheduled, in_flight,
-- oldest ready run_at in µs or nil, {ready per priority in PRIORITIES order},
-- {scheduled per priority} or false, {in flight per priority} or false, waiting}.
-- Ready lists are per priority already (less the ghost copies a limited queue's lists
-- hold: see index.lua). The scheduled and in-flight sets are per queue, so their
-- split reads each member's hash: done only while the set holds at most split_limit
-- members (false beyond), so a scrape stays a few milliseconds.
-- Read-only.
local split_limit = tonumber(ARGV[2])

local function split(k, size)
  if size > split_limit then
    return false
  end
  local tally = {}
  for _, priority in ipairs(PRIORITIES) do
    tally[priority] = 0
  end
  for _, member in ipairs(redis.call('ZRANGE', k, 0, -1)) do
    local priority = redis.call('HGET', key('job', member_id(member)), 'priority')
    if priority and tally[priority] then
      tally[priority] = tally[priority] + 1
    end
  end
  local lanes = {}
  for _, priority in ipairs(PRIORITIES) do
    table.insert(lanes, tally[priority])
  end
  return lanes
end

local out = {}
for _, queue in ipairs(redis.call('SMEMBERS', key('queues'))) do
  local ready = 0
  local lanes = {}
  for _, priority in ipairs(PRIORITIES) do
    -- A list of a limited queue may hold ghost copies of claimed jobs (see index.lua).
    local ghosts = redis.call('ZSCORE', ghosts_key(queue, priority), GHOSTS_TOTAL)
    local n = redis.call('LLEN', key('queue', queue, priority)) - (tonumber(ghosts) or 0)
    table.insert(lanes, n)
    ready = ready + n
  end
  local oldest = redis.call('ZRANGE', key('ready_at', queue), 0, 0, 'WITHSCORES')
  local scheduled = redis.call('ZCARD', key('scheduled', queue))
  local in_flight = redis.call('ZCARD', key('inflight', queue))
  table.insert(out, {
    queue,
    ready,
    scheduled,
    in_flight,
    oldest[2] or false,
    lanes,
    split(key('scheduled', queue), scheduled),
    split(key('inflight', queue), in_flight),
    redis.call('ZCARD', key('waiting', queue)),
  })
end
return out
