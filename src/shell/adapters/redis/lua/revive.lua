-- revive (an operator's retry of a dead letter).
-- ARGV: base, dead_id, placement of the fresh job (9 arguments: see `placement_at`),
-- its status, its tenant, its record's facts (job type, counted minute, finish time in
-- µs: see `record_at`), nonce, its unique key ('' = none; then its states, exp_us,
-- now_us and ttl_ms as enqueue_new takes them)
-- Atomic: only while the store still records dead_id as failed, the fresh job is
-- upserted into the queue (unlocked, ready or parked) and recorded in the store, both
-- in this step. Two operators reviving one dead letter: the second finds it no longer
-- failed and writes nothing. A re-send of this call after its write landed finds the
-- call's nonce in the record's `op` and answers 1 again, writing nothing. A unique
-- key is taken for the fresh job in the same step; while another job holds it, this
-- writes nothing and answers {0, where, body} of the holder.
local dead, p = ARGV[2], placement_at(3)
local at = 3 + PLACEMENT_ARGS
local id = p.id
local nonce = ARGV[at + 5]
if redis.call('HGET', key('store', dead), 'status') ~= 'failed' then
  return redis.call('HGET', key('store', id), 'op') == nonce and 1 or 0
end
local lock_key = ARGV[at + 6]
if lock_key ~= '' then
  if redis.call('HGET', key('unique', lock_key), 'job') ~= id then
    local holder = unique_holder(lock_key, ARGV[at + 9])
    if holder then return holder end
  end
  take_unique(id, lock_key, ARGV[at + 7], ARGV[at + 8], ARGV[at + 9], ARGV[at + 10])
end
local jk = key('job', id)
unplace(id, jk)
place(jk, p)
record({id = id, body = p.body, status = ARGV[at], queue = p.queue, tenant = ARGV[at + 1],
        jtype = ARGV[at + 2], minute = ARGV[at + 3], finished_us = ARGV[at + 4]}, 'op', nonce)
return 1
