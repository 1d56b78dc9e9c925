-- enqueue_graph: a workflow's jobs, their edges and the workflow, all or nothing.
-- ARGV: base, nonce, receipt_ms (0 = keep no receipt), workflow id ('' = none),
-- refused ('1' when Python found the graph bad: see below, else '0'), a
-- root's unique key ('' = none; then its states, exp_us, now_us and ttl_ms as
-- enqueue_new takes them, and the root's id), facts ({n, id, status, ...}: the status Python read for
-- each job outside the graph that an edge names, then 0: no witness groups; see
-- dependents.lua), the workflow's JSON, the member count, then per member: its kind
-- ('waiting', 'place' or 'record'), its placement (9 arguments: see `placement_at`) or,
-- for 'record', its record (8 arguments: see `record_at`), its edge count, and per
-- edge the dependency's id and the edge's JSON.
-- Python checked the graph (`core.dependencies.check_graph`) and settled each member
-- (`settle_new`) from those facts; if one no longer holds, this writes nothing and
-- answers STALE, and Python reads and decides again. A re-send of a call that landed
-- finds its receipt and answers 1, writing nothing. A workflow id already stored is
-- that workflow (another node's cron slot, a retried call): this writes nothing and
-- answers STORED, and Python reads the stored members. A root's unique key held by
-- another job writes nothing either: the answer is {0, where, body} of the holder.
-- Both answer before the graph's own check, as a second send writes nothing: a graph
-- Python refused is sent with refused = '1' and no members, and unless one of them
-- answers, this writes nothing and answers REFUSED.
local STORED, REFUSED = 4, 5
local nonce, receipt_ms, workflow = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local receipt = key('graph', nonce)
if redis.call('EXISTS', receipt) == 1 then return 1 end
if workflow ~= '' and redis.call('EXISTS', key('workflow', workflow)) == 1 then
  return STORED
end
if ARGV[5] == '1' then
  return (ARGV[6] ~= '' and unique_holder(ARGV[6], ARGV[9])) or REFUSED
end
local ok, at = facts_hold(12)
if not ok then return STALE end
if ARGV[6] ~= '' then
  local holder = take_unique(ARGV[11], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10])
  if holder then return holder end
end
local doc = ARGV[at]
local members = tonumber(ARGV[at + 1])
at = at + 2
for _ = 1, members do
  local kind, id = ARGV[at], ARGV[at + 1]
  local jk = key('job', id)
  unplace(id, jk)
  if kind == 'record' then
    redis.call('DEL', jk)
    record(record_at(at + 1))
    at = at + 1 + RECORD_ARGS
  else
    local p = placement_at(at + 1)
    if kind == 'waiting' then hold_waiting(jk, p) else place(jk, p) end
    at = at + 1 + PLACEMENT_ARGS
  end
  if workflow ~= '' then redis.call('SET', key('member', id), workflow) end
  local edges = tonumber(ARGV[at])
  at = at + 1
  if edges > 0 then
    local ek = key('edges', id)
    redis.call('DEL', ek)
    for _ = 1, edges do
      redis.call('SADD', key('dependents', ARGV[at]), id)
      redis.call('RPUSH', ek, ARGV[at + 1])
      at = at + 2
    end
  end
end
if workflow ~= '' then
  redis.call('SET', key('workflow', workflow), doc)
  -- Counted down as members' records are deleted (`let_go_of_record`).
  redis.call('SET', key('workflow_left', workflow), members)
end
if receipt_ms > 0 then redis.call('SET', receipt, '1', 'PX', receipt_ms) end
return 1
