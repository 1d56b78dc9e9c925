-- promote_due. ARGV: base, hi_ms, now_ms, now_us, limit
-- Due jobs of every queue, in promotion order (run_at, then enqueue sequence), each
-- moved atomically (see `promote` in placement.lua). Returns how many moved.
return promote(key('scheduled'), ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]))
