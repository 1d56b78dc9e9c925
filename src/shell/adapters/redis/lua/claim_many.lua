-- claim_many (batched dequeue).
-- ARGV: base, queue, token_base, hi_ms, now_ms, now_us, receipt_ttl_ms, limit,
-- [locked_ms] (as in claim)
-- The same atomic step as claim (promotion of the queue's due jobs first), for up to
-- `limit` jobs in one round trip. Each claim gets its own token, token_base .. ':' ..
-- id, where token_base is fresh per call and carries the prefetch mark: these claims
-- have not started. Per job only its hash is read and written; the list pops, the
-- ready_at and in-flight set changes and the held set (see `held_key` in common.lua)
-- are one command each for the whole batch.
-- Idempotent by token_base: a re-send returns the claims the first send took.
-- Returns a flat list {id, body, id, body, ...}.
local queue, token_base, now, limit = ARGV[2], ARGV[3], ARGV[5], tonumber(ARGV[8])
local ttl = ARGV[7]
local locked = lock_time(ARGV[9], now)
local again = replay(token_base, ttl, function(id) return token_base .. ':' .. id end)
if again then
  return again
end
promote(key('scheduled', queue), ARGV[4], now, ARGV[6], CLAIM_PROMOTE_CAP)
local out, taken, flight, indexed = {}, {}, {}, {}
for _, priority in ipairs(PRIORITIES) do
  local list = key('queue', queue, priority)
  local more = true
  while more and #taken < limit do
    local asked = limit - #taken
    -- Read, then trimmed once their hashes are written (see claim.lua: a server out of
    -- memory then refuses the claim at its first write).
    local ids = redis.call('LRANGE', list, 0, asked - 1)
    if #ids == 0 then break end
    -- Fewer than asked: the list is empty now, and a second read would only say so.
    more = #ids == asked
    for _, id in ipairs(ids) do
      local jk = key('job', id)
      local f = redis.call('HMGET', jk, 'status', 'body', 'part', 'queue', 'priority',
                           'jtype')
      local live = f[1] == 'ready' and f[2] and f[4] == queue and f[5] == priority
      -- Only a job of a limited queue (`part`) can have ghost copies (see index.lua).
      if live and not (f[3] and unghost(queue, priority, id)) then
        -- Indexed (its queue is limited): a claim without limits still takes it out.
        if f[3] then
          indexed[f[3]] = indexed[f[3]] or {}
          table.insert(indexed[f[3]], pready_member(f[6], id))
        end
        redis.call('HSET', jk, 'status', 'processing', 'token', token_base .. ':' .. id,
                   'locked_at', locked)
        table.insert(taken, id)
        table.insert(flight, locked)
        table.insert(flight, id)
        table.insert(out, id)
        table.insert(out, f[2])
      elseif not live and not unghost(queue, priority, id) and not f[2] then
        drop_orphan(id)
      end
    end
    redis.call('LTRIM', list, #ids, -1)
  end
  if #taken >= limit then break end
end
hold_batch(queue, token_base, taken, flight, ttl)
for part, ids in pairs(indexed) do
  call_many('ZREM', key('pready', queue, part), ids)
end
return out
