-- purge_dead. ARGV: base, id ('' = a batch of any), batch size
-- Deletes one dead letter, or up to `batch` of them (the caller loops until none
-- are left, so purging a huge dead set never blocks the server in one script).
-- Only failed records go: a completed record with that id is left alone.
local id, batch = ARGV[2], tonumber(ARGV[3])
local ids
if id ~= '' then
  ids = {id}
else
  ids = redis.call('ZRANGE', key('dead'), 0, batch - 1)
end
local purged = 0
for _, victim in ipairs(ids) do
  if redis.call('HGET', key('store', victim), 'status') == 'failed' then
    unindex(victim)
    redis.call('DEL', key('store', victim))
    let_go_of_record(victim)
    purged = purged + 1
  end
end
return purged
