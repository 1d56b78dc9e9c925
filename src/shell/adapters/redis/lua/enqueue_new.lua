-- enqueue_new: write a job unless its id is taken or its unique key is held.
-- ARGV: base, placement (9 arguments: see `placement_at`), nonce,
--       lock_key ('' = none), states (comma-separated), exp_us (18 digits, '' = none),
--       now_us (18 digits), ttl_ms ('' = none)
-- Returns {1} when written, or {0, where, body} for the job already there, `where`
-- being its hash's status (processing, ready, scheduled) or 'stored' (a record).
-- Atomic: the id's look, the key's verdict, the lock's move and the placement are one
-- step, so of any number of concurrent callers exactly one writes. The verdict is the
-- core's `lock_holds`: the holder is in one of the lock's states and the lock has not
-- expired (by the caller's clock, like every time here). The key's own expiry (ttl_ms,
-- a little past exp_us) only lets Redis forget a lock nobody reuses.
-- A re-send of a call that already landed finds its nonce in the hash and answers 1.
local p = placement_at(2)
local at = 2 + PLACEMENT_ARGS
local id, nonce = p.id, ARGV[at]
local lock_key, states, exp_us = ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
local now_us, ttl_ms = ARGV[at + 4], ARGV[at + 5]
local jk = key('job', id)

-- The job `jid` as stored: its state's name, where it is, and its body; nil if none.
local function stored(jid)
  local f = redis.call('HMGET', key('job', jid), 'status', 'body', 'op')
  if f[2] then
    if f[1] == 'processing' then return 'running', f[1], f[2], f[3] end
    if f[1] == 'ready' then return 'pending', f[1], f[2], f[3] end
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

local _, where, body, op = stored(id)
if op == nonce then return {1} end
if body then return {0, where, body} end

if lock_key ~= '' then
  local lk = key('unique', lock_key)
  local l = redis.call('HMGET', lk, 'job', 'states', 'exp_us')
  if l[1] then
    local state, hwhere, hbody = stored(l[1])
    local counted = state and string.find(',' .. l[2] .. ',', ',' .. state .. ',', 1, true)
    local live = (not l[3]) or l[3] == '' or l[3] > now_us
    if counted and live then return {0, hwhere, hbody} end
  end
  redis.call('DEL', lk)
  redis.call('HSET', lk, 'job', id, 'states', states, 'exp_us', exp_us)
  if ttl_ms ~= '' then redis.call('PEXPIRE', lk, ttl_ms) end
end

place(jk, p)
redis.call('HSET', jk, 'op', nonce)
return {1}
