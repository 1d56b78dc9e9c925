-- record (upsert a job's latest record). ARGV: base, id, body, status, queue, tenant
-- Atomic: the record, its indexes and the dead-letter counters change together, so
-- a listing never shows a record under its old status and its new one.
return record(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
