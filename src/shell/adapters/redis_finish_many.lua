-- finish_many: `finish` for several claims in one round trip.
-- ARGV: base, nonce, then per job: id, token, body, status, queue, tenant.
-- A re-send of this call finds the nonce in the records that landed (`op`).
-- Each job's fence, record and release are one step, as in finish (the whole script
-- is); the index, in-flight and delete commands are shared by the batch.
-- Returns 1/0 per job.
local nonce = ARGV[2]

-- `record` for a batch: one INCRBY for the sequence, one ZADD per index key.
local function record_many(items)
  local seq = redis.call('INCRBY', key('seq', 'store'), #items) - #items
  local adds = {}
  for _, it in ipairs(items) do
    local id, body, status, queue, tenant = it[1], it[2], it[3], it[4], it[5]
    unindex(id)
    seq = seq + 1
    redis.call('HSET', key('store', id), 'body', body, 'status', status, 'queue', queue,
               'tenant', tenant, 'seq', seq, 'op', nonce)
    for _, k in ipairs(index_keys(status, tenant)) do
      adds[k] = adds[k] or {}
      table.insert(adds[k], seq)
      table.insert(adds[k], id)
    end
    if status == 'failed' then
      count_dead(queue, tenant, 1)
    end
  end
  for k, pairs_ in pairs(adds) do
    call_many('ZADD', k, pairs_)
  end
end

local out, items, released, hashes, by_queue = {}, {}, {}, {}, {}
for i = 3, #ARGV, 6 do
  local id, token = ARGV[i], ARGV[i + 1]
  local jk = key('job', id)
  local f = redis.call('HMGET', jk, 'token', 'status', 'queue')
  -- A cancel request refuses the outcome: the holder records the cancel instead.
  if f[1] == token and f[2] == 'processing' and redis.call('HEXISTS', jk, 'cancel') == 0 then
    table.insert(items, {id, ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]})
    table.insert(released, id)
    table.insert(hashes, jk)
    by_queue[f[3]] = by_queue[f[3]] or {}
    table.insert(by_queue[f[3]], id)
    table.insert(out, 1)
  elseif redis.call('HGET', key('store', id), 'op') == nonce then
    table.insert(out, 1)
  else
    table.insert(out, 0)
  end
end
if #items > 0 then
  record_many(items)
  call_many('ZREM', key('inflight'), released)
  for queue, ids in pairs(by_queue) do
    call_many('ZREM', key('inflight', queue), ids)
  end
  call_many('DEL', nil, hashes)
end
return out
