-- Prepended to every store script by redis_queue.py.
--
-- ARGV[1] is the key base, "{prefix}" (one Cluster slot for the deployment; KEYS[1]
-- is only the routing anchor). A record is a hash {base}:store:<id>; the indexes are
-- zsets scored by a record sequence, so the newest record sorts last and
-- ZREVRANGE reads newest first. Re-recording a job moves it to the newest place.

local base = ARGV[1]

local function key(...)
  return base .. ':' .. table.concat({...}, ':')
end

-- The zsets a record with this status and tenant ('' = none) belongs to.
-- Failed records are the dead letters: {base}:dead, {base}:dead:tenant:<t>.
local function status_key(status, tenant)
  local name = (status == 'failed') and 'dead' or ('history:' .. status)
  if tenant ~= '' then
    return key(name, 'tenant', tenant)
  end
  return key(name)
end

local function index_keys(status, tenant)
  local keys = {key('history'), status_key(status, tenant)}
  if tenant ~= '' then
    table.insert(keys, key('history', 'tenant', tenant))
    table.insert(keys, status_key(status, ''))
  end
  return keys
end

-- Dead letters per queue, kept beside the index so count_dead need not scan.
local function count_dead(queue, tenant, delta)
  local counters = {key('dead_counts')}
  if tenant ~= '' then
    table.insert(counters, key('dead_counts', 'tenant', tenant))
  end
  for _, k in ipairs(counters) do
    if redis.call('HINCRBY', k, queue, delta) <= 0 then
      redis.call('HDEL', k, queue)
    end
  end
end

-- Remove the record `id` (if any) from every index and counter; returns its status.
local function unindex(id)
  local f = redis.call('HMGET', key('store', id), 'status', 'queue', 'tenant')
  local status, queue, tenant = f[1], f[2], f[3]
  if not status then return false end
  for _, k in ipairs(index_keys(status, tenant)) do
    redis.call('ZREM', k, id)
  end
  if status == 'failed' then
    count_dead(queue, tenant, -1)
  end
  return status
end

-- Upsert a record and its indexes; a failed record counts as a dead letter.
local function record(id, body, status, queue, tenant)
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
end
