-- finish_many: `finish` for several claims in one round trip.
-- ARGV: base, then per job: id, token, body, status, queue, tenant.
-- Each job's fence, record and release are one step, as in finish; returns 1/0 per job.
local out = {}
for i = 2, #ARGV, 6 do
  local id, token = ARGV[i], ARGV[i + 1]
  local jk = key('job', id)
  if held(jk, token) then
    record(id, ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5])
    local queue = redis.call('HGET', jk, 'queue')
    redis.call('ZREM', key('inflight'), id)
    redis.call('ZREM', key('inflight', queue), id)
    redis.call('DEL', jk)
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
return out
