-- record (upsert a job's latest record). ARGV: base, record (8 arguments: see
-- `record_at`)
-- Atomic: the record, its indexes and the dead-letter counters change together, so
-- a listing never shows a record under its old status and its new one.
return record(record_at(2))
