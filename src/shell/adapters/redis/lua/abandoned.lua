-- abandoned. ARGV: base, cutoff_ms, limit
-- Reads in-flight claims locked before the cutoff, as one consistent snapshot:
-- returns a flat list of id, body, token, locked_at_ms, queue per claim. Nothing is
-- requeued here, whatever the body holds: the caller decides. Its only write drops
-- in-flight entries whose hash is gone (see drop_orphan): they name no job, and left
-- alone they would fill every answer for ever.
local stale = redis.call('ZRANGEBYSCORE', key('inflight'), '-inf', '(' .. ARGV[2],
                         'LIMIT', 0, tonumber(ARGV[3]), 'WITHSCORES')
local out = {}
for i = 1, #stale, 2 do
  local id, locked_at = stale[i], stale[i + 1]
  local f = redis.call('HMGET', key('job', id), 'body', 'token', 'status', 'queue')
  if f[1] and f[3] == 'processing' then
    table.insert(out, id)
    table.insert(out, f[1])
    table.insert(out, f[2])
    table.insert(out, locked_at)
    table.insert(out, f[4])
  elseif not f[1] then
    drop_orphan(id)
  end
end
return out
