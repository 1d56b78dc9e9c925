-- purge_dead. ARGV: base, id ('' = a batch of any), batch size, offset
-- Deletes one dead letter, or up to `batch` of them from the `offset`-th oldest on
-- (the caller loops until none are left, so purging a huge dead set never blocks
-- the server in one script). Only failed records go: a completed record with that id
-- is left alone, and so is one a job still queued depends on (`needed_by_queued`).
-- Returns {purged, looked at}: the caller's next batch starts past those left.
local id, batch, offset = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4] or '0')
local ids
if id ~= '' then
  ids = {id}
else
  ids = redis.call('ZRANGE', key('dead'), offset, offset + batch - 1)
end
local purged = 0
for _, victim in ipairs(ids) do
  local dead = redis.call('HGET', key('store', victim), 'status') == 'failed'
  if dead and not needed_by_queued(victim) then
    unindex(victim)
    redis.call('DEL', key('store', victim))
    let_go_of_record(victim)
    purged = purged + 1
  end
end
return {purged, #ids}
