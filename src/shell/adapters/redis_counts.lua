-- counts. ARGV: base
-- One consistent snapshot per known queue: {name, ready, scheduled, in_flight,
-- oldest ready run_at in µs or nil, {ready per priority in PRIORITIES order}}.
-- Scheduled and in-flight are per queue only: splitting them by priority would
-- read every job's hash. Read-only.
local out = {}
for _, queue in ipairs(redis.call('SMEMBERS', key('queues'))) do
  local ready = 0
  local lanes = {}
  for _, priority in ipairs(PRIORITIES) do
    local n = redis.call('LLEN', key('queue', queue, priority))
    table.insert(lanes, n)
    ready = ready + n
  end
  local oldest = redis.call('ZRANGE', key('ready_at', queue), 0, 0, 'WITHSCORES')
  table.insert(out, {
    queue,
    ready,
    redis.call('ZCARD', key('scheduled', queue)),
    redis.call('ZCARD', key('inflight', queue)),
    oldest[2] or false,
    lanes,
  })
end
return out
