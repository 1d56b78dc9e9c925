-- Prelude of the scripts that write a job unless its unique key is held.

-- The job `jid` as stored: its state's name, where it is, its body and the nonce of
-- the call that placed it; nil if none.
local function stored(jid)
  local f = redis.call('HMGET', key('job', jid), 'status', 'body', 'op')
  if f[2] then
    if f[1] == 'processing' then return 'running', f[1], f[2], f[3] end
    if f[1] == 'ready' then return 'pending', f[1], f[2], f[3] end
    if f[1] == 'waiting' then return 'waiting', f[1], f[2], f[3] end
    -- Parked: scheduled or retrying, as the body says.
    local ok, doc = pcall(cjson.decode, f[2])
    local state = 'scheduled'
    if ok and type(doc) == 'table' and doc.status == 'retrying' then state = 'retrying' end
    return state, f[1], f[2], f[3]
  end
  local r = redis.call('HMGET', key('store', jid), 'status', 'body')
  if r[2] then return r[1], 'stored', r[2], nil end
  return nil
end

-- The job holding the unique key `lock_key` as {0, where, body}: while it is in one of
-- the holder's counted states and the key has not expired (the core's `lock_holds`, by
-- the caller's clock `now_us`); nil when the key is free.
local function unique_holder(lock_key, now_us)
  local l = redis.call('HMGET', key('unique', lock_key), 'job', 'states', 'exp_us')
  if l[1] then
    local state, hwhere, hbody = stored(l[1])
    local counted = state and string.find(',' .. l[2] .. ',', ',' .. state .. ',', 1, true)
    local live = (not l[3]) or l[3] == '' or l[3] > now_us
    if counted and live then return {0, hwhere, hbody} end
  end
  return nil
end

-- The unique key `lock_key` for the job `id`: its holder as `unique_holder` tells it;
-- otherwise the key is given to `id` (kept `ttl_ms` when given, so Redis forgets keys
-- nobody reuses) and nil is returned.
local function take_unique(id, lock_key, states, exp_us, now_us, ttl_ms)
  local holder = unique_holder(lock_key, now_us)
  if holder then return holder end
  local lk = key('unique', lock_key)
  redis.call('DEL', lk)
  redis.call('HSET', lk, 'job', id, 'states', states, 'exp_us', exp_us)
  if ttl_ms ~= '' then redis.call('PEXPIRE', lk, ttl_ms) end
  return nil
end
