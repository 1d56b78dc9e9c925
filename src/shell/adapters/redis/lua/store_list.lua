-- list (read-only). ARGV: base, status ('' = any), tenant ('' = any), limit
-- The bodies of the newest `limit` records matching both filters, newest first.
local status, tenant, limit = ARGV[2], ARGV[3], tonumber(ARGV[4])
local index
if status == '' then
  index = (tenant == '') and key('history') or key('history', 'tenant', tenant)
else
  index = status_key(status, tenant)
end
local out = {}
for _, id in ipairs(redis.call('ZREVRANGE', index, 0, limit - 1)) do
  local body = redis.call('HGET', key('store', id), 'body')
  if body then
    table.insert(out, body)
  end
end
return out
