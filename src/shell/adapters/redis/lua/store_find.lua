-- find (read-only). ARGV: base, status ('' = any), queue, type, tenant ('' = any of
-- each), offset, limit, count ('1' = only count), scan, then every status name (used
-- when status is '').
-- Records matching every filter, newest first, from the `offset`-th: their bodies, or
-- with count = '1' how many there are. Each status keeps an index per queue, per job
-- type and per tenant; a filter one index answers is read as a range of it. With two
-- or more of queue, type and tenant, the smallest of their indexes is walked from the
-- newest, matching the other fields, over at most `scan` entries per status.
local status, queue, jtype, tenant = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local offset, limit, counting = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == '1'
local scan = tonumber(ARGV[9])
local need = offset + limit
local CHUNK = 500

-- The index to read for one status, and whether its entries need the fields checked.
local function pick(s)
  local candidates = {}
  if queue ~= '' then table.insert(candidates, status_by(s, 'queue', queue)) end
  if jtype ~= '' then table.insert(candidates, status_by(s, 'type', jtype)) end
  if tenant ~= '' then table.insert(candidates, status_key(s, tenant)) end
  if #candidates == 0 then return status_key(s, ''), false end
  if #candidates == 1 then return candidates[1], false end
  local best, size = nil, nil
  for _, k in ipairs(candidates) do
    local n = redis.call('ZCARD', k)
    if size == nil or n < size then best, size = k, n end
  end
  return best, true
end

local function matches(id)
  local f = redis.call('HMGET', key('store', id), 'queue', 'type', 'tenant')
  return (queue == '' or f[1] == queue) and (jtype == '' or f[2] == jtype)
    and (tenant == '' or f[3] == tenant)
end

-- Up to `want` matching {id, score} of `index`, newest first (want = nil: all of the
-- walked window, for a count).
local function walk(index, want)
  local found, first = {}, 0
  while first < scan and (want == nil or #found < want) do
    local last = math.min(first + CHUNK, scan) - 1
    local entries = redis.call('ZREVRANGE', index, first, last, 'WITHSCORES')
    for i = 1, #entries, 2 do
      if matches(entries[i]) then
        table.insert(found, {entries[i], tonumber(entries[i + 1])})
        if want ~= nil and #found >= want then break end
      end
    end
    if #entries < 2 * (last - first + 1) then break end
    first = last + 1
  end
  return found
end

local plans = {}
if status ~= '' then
  local index, check = pick(status)
  table.insert(plans, {index, check})
elseif queue == '' and jtype == '' then
  local index = (tenant == '') and key('history') or key('history', 'tenant', tenant)
  table.insert(plans, {index, false})
else
  for i = 10, #ARGV do
    local index, check = pick(ARGV[i])
    table.insert(plans, {index, check})
  end
end

if counting then
  local total = 0
  for _, plan in ipairs(plans) do
    if plan[2] then
      total = total + #walk(plan[1], nil)
    else
      total = total + redis.call('ZCARD', plan[1])
    end
  end
  return total
end

local ids = {}
if #plans == 1 and not plans[1][2] then
  ids = redis.call('ZREVRANGE', plans[1][1], offset, need - 1)
else
  local found = {}
  for _, plan in ipairs(plans) do
    local part
    if plan[2] then
      part = walk(plan[1], need)
    else
      part = {}
      local entries = redis.call('ZREVRANGE', plan[1], 0, need - 1, 'WITHSCORES')
      for i = 1, #entries, 2 do
        table.insert(part, {entries[i], tonumber(entries[i + 1])})
      end
    end
    for _, e in ipairs(part) do table.insert(found, e) end
  end
  table.sort(found, function(a, b) return a[2] > b[2] end)
  for i = offset + 1, math.min(need, #found) do
    table.insert(ids, found[i][1])
  end
end
local out = {}
for _, id in ipairs(ids) do
  local body = redis.call('HGET', key('store', id), 'body')
  if body then
    table.insert(out, body)
  end
end
return out
