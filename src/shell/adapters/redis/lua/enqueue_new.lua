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

local _, where, body, op = stored(id)
if op == nonce then return {1} end
if body then return {0, where, body} end

if lock_key ~= '' then
  local holder = take_unique(id, lock_key, states, exp_us, now_us, ttl_ms)
  if holder then return holder end
end

place(jk, p, nonce)
return {1}
