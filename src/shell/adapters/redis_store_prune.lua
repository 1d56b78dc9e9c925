-- prune (retention). ARGV: base, status ('completed' | 'failed'), cutoff_us ('' = no age
-- rule), keep ('' = no count rule), limit, dry ('1' = only count), offset (dry only)
-- Walks the status index oldest recorded first. A record qualifies when it is beyond
-- the newest `keep` of its status, or finished before `cutoff_us`; the walk stops at
-- the first record that does neither (the index is in recording order, which is
-- finishing order up to the skew between workers' clocks). A record whose job is
-- still queued or in flight is skipped, never deleted.
-- Deleting: up to `limit` records go (the window read is twice that, so a few skipped
-- records at the front cannot stall pruning); returns {deleted, 1}.
-- Dry: examines `limit` entries from `offset`; returns {qualifying, done} where done
-- is 1 once the walk stopped or reached the end (the caller pages on otherwise).
-- Atomic like every script: a record is unindexed and deleted together, and a
-- record deleted by a concurrent prune is simply no longer in the index.
local status, cutoff, keep = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local limit, dry, offset = tonumber(ARGV[5]), ARGV[6] == '1', tonumber(ARGV[7]) or 0
local index = status_key(status, '')

-- iso_us comes from redis_store_common.lua.
local function finished_us(id)
  local body = redis.call('HGET', key('store', id), 'body')
  if not body then return nil end
  local ok, doc = pcall(cjson.decode, body)
  if not ok or type(doc) ~= 'table' then return nil end
  return iso_us(doc['finished_at'])
end

local excess = 0
if keep then
  excess = math.max(0, redis.call('ZCARD', index) - keep)
end
local first, window = offset, limit
if not dry then
  first, window = 0, limit * 2
end
local ids = redis.call('ZRANGE', index, first, first + window - 1)
local n, done = 0, (#ids < window) and 1 or 0
for i, id in ipairs(ids) do
  if not dry and n >= limit then break end
  local qualifies = (first + i - 1) < excess
  local unknown = false
  if not qualifies and cutoff then
    local at = finished_us(id)
    if at == nil then
      unknown = true -- no readable finish time: never deleted by age, but not a stop
    else
      qualifies = at < cutoff
    end
  end
  if not qualifies and not unknown then
    done = 1
    break
  end
  local idle = redis.call('EXISTS', key('job', id)) == 0
  if qualifies and idle and redis.call('HGET', key('store', id), 'status') == status then
    if not dry then
      unindex(id)
      redis.call('DEL', key('store', id))
    end
    n = n + 1
  end
end
return {n, done}
