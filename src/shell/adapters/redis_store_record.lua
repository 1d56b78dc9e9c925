-- record (upsert a job's latest record). ARGV: base, id, body, status, queue, tenant
-- Atomic: the record, its indexes and the dead-letter counters change together, so
-- a listing never shows a record under its old status and its new one.
local id, body, status, queue, tenant = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
unindex(id)
local seq = redis.call('INCR', key('seq', 'store'))
redis.call('HSET', key('store', id), 'body', body, 'status', status, 'queue', queue,
           'tenant', tenant, 'seq', seq)
for _, k in ipairs(index_keys(status, tenant)) do
  redis.call('ZADD', k, seq, id)
end
if status == 'failed' then
  count_dead(queue, tenant, 1)
end
return seq
