-- claim_many (batched dequeue). ARGV: base, queue, token_base, now_ms, limit
-- The same atomic step as claim, for up to `limit` jobs in one round trip. Each
-- claim gets its own token, token_base .. ':' .. id (token_base is fresh per call).
-- Returns a flat list {id, body, id, body, ...}.
local queue, token_base, now, limit = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local out = {}
for _, priority in ipairs(PRIORITIES) do
  local list = key('queue', queue, priority)
  while #out < 2 * limit do
    local id = redis.call('LPOP', list)
    if not id then break end
    local jk = key('job', id)
    local f = redis.call('HMGET', jk, 'status', 'body')
    if f[1] == 'ready' and f[2] then
      redis.call('ZREM', key('ready_at', queue), id)
      redis.call('HSET', jk, 'status', 'processing', 'token', token_base .. ':' .. id,
                 'locked_at', now)
      redis.call('ZADD', key('inflight'), now, id)
      redis.call('ZADD', key('inflight', queue), now, id)
      table.insert(out, id)
      table.insert(out, f[2])
    elseif not f[2] then
      drop_orphan(id)
    end
  end
  if #out >= 2 * limit then break end
end
return out
