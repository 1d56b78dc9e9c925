-- dependents_read: facts for a decision of `core.dependencies`, read in one step.
-- ARGV: base, what ('jobs': the status and body of each id; 'statuses': the status of
-- each id; 'waiting': the jobs waiting for the one id given, each with its status, body,
-- edges and, for one still waiting, the status of each job its edges name), ids...
-- Statuses are read by `status_of` (dependents.lua), as the writes check them.
-- Read-only.
local what, out = ARGV[2], {}
if what == 'waiting' then
  local ids = redis.call('SMEMBERS', key('dependents', ARGV[3]))
  table.sort(ids)
  for _, id in ipairs(ids) do
    local f = redis.call('HMGET', key('job', id), 'status', 'body')
    local status = f[1] or status_of(id)
    local edges, inputs = redis.call('LRANGE', key('edges', id), 0, -1), {}
    -- A waiting one's inputs' statuses come along: deciding it needs them all.
    if status == 'waiting' then
      for _, edge in ipairs(edges) do
        table.insert(inputs, status_of(cjson.decode(edge)[1]))
      end
    end
    table.insert(out, {id, status, f[2] or false, edges, inputs})
  end
  return out
end
for i = 3, #ARGV do
  local status = status_of(ARGV[i])
  if what == 'statuses' then
    table.insert(out, status)
  else
    local body = redis.call('HGET', key('job', ARGV[i]), 'body')
      or redis.call('HGET', key('store', ARGV[i]), 'body')
    table.insert(out, {status, body or false})
  end
end
return out
