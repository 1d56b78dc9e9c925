-- counts. ARGV: base
-- One consistent snapshot per known queue: {name, ready, scheduled, in_flight,
-- oldest ready run_at in µs or nil}. Read-only.
local out = {}
for _, queue in ipairs(redis.call('SMEMBERS', key('queues'))) do
  local ready = 0
  for _, priority in ipairs(PRIORITIES) do
    ready = ready + redis.call('LLEN', key('queue', queue, priority))
  end
  local oldest = redis.call('ZRANGE', key('ready_at', queue), 0, 0, 'WITHSCORES')
  table.insert(out, {
    queue,
    ready,
    redis.call('ZCARD', key('scheduled', queue)),
    redis.call('ZCARD', key('inflight', queue)),
    oldest[2] or false,
  })
end
return out
