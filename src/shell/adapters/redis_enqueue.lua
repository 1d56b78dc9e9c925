-- enqueue (upsert by id). ARGV: base, id, body, queue, priority, target, run_ms, run_us
-- Atomic: the old placement goes and the new one appears in one step, so an upsert
-- never leaves the id in two places (or none), and a claim on the old copy loses
-- its token (its ack then returns 0).
local id = ARGV[2]
local jk = key('job', id)
unplace(id, jk)
if place(id, jk, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]) then
  wake(ARGV[4], 1)
end
return 1
