-- Prepended to the claim scripts (claim, claim_many, limited_take) after the queue's
-- preludes: the lock time a claim records, its receipt, and the end of a batch.

-- The lock time a claim records: `now_ms`, or `locked_ms` when the caller gives one.
-- A claim sent behind a blocking wait (RedisJobQueue.wait_and_dequeue) runs when the
-- wait ends, which the caller cannot know; it gives the moment the wait is due to end
-- at the latest, so a claim taken early in the wait is reclaimed late, not early.
local function lock_time(locked_ms, now_ms)
  if locked_ms and locked_ms ~= '' then return locked_ms end
  return now_ms
end

-- A claim call's receipt: the ids it took, kept for `ttl_ms` under its token so that
-- a re-send of the same call (its reply was lost to a dropped connection) returns
-- those claims instead of taking more. ttl_ms '0' = the caller never re-sends.
local function receipt_key(token)
  return key('receipt', token)
end

local function write_receipt(token, ids, ttl_ms)
  if ttl_ms ~= '0' and #ids > 0 then
    redis.call('SET', receipt_key(token), table.concat(ids, ','), 'PX', ttl_ms)
  end
end

-- A batch of claims under `token_base` leaves the queue's ready_at set for the
-- in-flight sets (`flight`: score, id pairs), joins the batch's held set, and is
-- named by its receipt: the common end of claim_many and a limited take.
local function hold_batch(queue, token_base, taken, flight, ttl_ms)
  if #taken == 0 then return end
  call_many('ZREM', key('ready_at', queue), taken)
  call_many('ZADD', key('inflight'), flight)
  call_many('ZADD', key('inflight', queue), flight)
  call_many('SADD', key('held', token_base), taken)
  write_receipt(token_base, taken, ttl_ms)
end

-- The {id, body} pairs (flat) that a re-sent claim's receipt names and `token_of(id)`
-- still holds; nil when there is no receipt (the call is new, or took nothing).
local function replay(token, ttl_ms, token_of)
  if ttl_ms == '0' then return nil end
  local ids = redis.call('GET', receipt_key(token))
  if not ids then return nil end
  local out = {}
  for id in string.gmatch(ids, '[^,]+') do
    local jk = key('job', id)
    local f = redis.call('HMGET', jk, 'token', 'status', 'body')
    if f[1] == token_of(id) and f[2] == 'processing' and f[3] then
      table.insert(out, id)
      table.insert(out, f[3])
    end
  end
  return out
end
