-- replace (fenced upsert of a claimed job's successor).
-- ARGV: base, id, token, body, queue, priority, target, run_ms, run_us
-- Atomic: the successor is written and the claim released in one step, so a retry
-- or requeue is never lost between them, and a stale holder cannot overwrite a job
-- someone else now holds.
local id, token = ARGV[2], ARGV[3]
local jk = key('job', id)
if not held(jk, token) then return 0 end
unplace(id, jk)
if place(id, jk, ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]) then
  wake(ARGV[5], 1)
end
return 1
