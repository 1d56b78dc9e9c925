-- Prepended to every store script by redis_queue.py.
--
-- ARGV[1] is the key base, "{prefix}" (one Cluster slot for the deployment; KEYS[1]
-- is only the routing anchor). A record is a hash {base}:store:<id>; the indexes are
-- zsets scored by a record sequence, so the newest record sorts last and
-- ZREVRANGE reads newest first. Re-recording a job moves it to the newest place.

local base = ARGV[1]

local function key(...)
  return base .. ':' .. table.concat({...}, ':')
end

-- The zsets a record with this status and tenant ('' = none) belongs to.
-- Failed records are the dead letters: {base}:dead, {base}:dead:tenant:<t>.
local function status_key(status, tenant)
  local name = (status == 'failed') and 'dead' or ('history:' .. status)
  if tenant ~= '' then
    return key(name, 'tenant', tenant)
  end
  return key(name)
end

-- A status's index of one queue or one job type: {base}:dead:queue:<q>,
-- {base}:history:completed:type:<t>, ...
local function status_by(status, what, name)
  local prefix = (status == 'failed') and 'dead' or ('history:' .. status)
  return key(prefix, what, name)
end

-- `jtype` is false for a record written before records were indexed by type.
local function index_keys(status, tenant, queue, jtype)
  local keys = {key('history'), status_key(status, tenant)}
  if tenant ~= '' then
    table.insert(keys, key('history', 'tenant', tenant))
    table.insert(keys, status_key(status, ''))
  end
  if queue then
    table.insert(keys, status_by(status, 'queue', queue))
  end
  if jtype and jtype ~= '' then
    table.insert(keys, status_by(status, 'type', jtype))
  end
  return keys
end

-- Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's algorithm).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- An ISO-8601 time as the codec writes it ("2026-01-01T00:00:00.5+00:00") in µs, or nil.
local function iso_us(text)
  if type(text) ~= 'string' then return nil end
  local y, mo, d, h, mi, s, frac, zone =
    string.match(text, '^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)%.?(%d*)(.*)$')
  if not y then return nil end
  local offset_s = 0
  if zone ~= '' and zone ~= 'Z' then
    local sign, zh, zm = string.match(zone, '^([+-])(%d%d):(%d%d)')
    if not sign then return nil end
    offset_s = (tonumber(zh) * 3600 + tonumber(zm) * 60) * (sign == '-' and -1 or 1)
  end
  local seconds = days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 86400
    + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s) - offset_s
  local micros = tonumber(string.sub(frac .. '000000', 1, 6))
  return seconds * 1000000 + micros
end

-- 1970-01-01 plus `z` days as a proleptic Gregorian (year, month, day) (H. Hinnant's
-- algorithm, the inverse of days_from_civil).
local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = (mp < 10) and (mp + 3) or (mp - 9)
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end

-- The UTC minute of an ISO-8601 time as "YYYYMMDDHHMM", or '' when there is none.
local function minute_of(text)
  if type(text) ~= 'string' then return '' end
  -- The codec writes UTC times ("2026-01-01T09:30:00.5+00:00"): read the digits off.
  if string.sub(text, -6) == '+00:00' and string.sub(text, 11, 11) == 'T' then
    return string.sub(text, 1, 4) .. string.sub(text, 6, 7) .. string.sub(text, 9, 10)
      .. string.sub(text, 12, 13) .. string.sub(text, 15, 16)
  end
  local at = iso_us(text)
  if at == nil then return '' end
  local minutes = math.floor(at / 60000000)
  local days = math.floor(minutes / 1440)
  local y, m, d = civil_from_days(days)
  local rest = minutes - days * 1440
  return string.format('%04d%02d%02d%02d%02d', y, m, d, math.floor(rest / 60), rest % 60)
end

-- What a record is indexed and counted by, read from its body: its job type ('' when
-- the body does not decode) and the UTC minute it finished ("YYYYMMDDHHMM"; '' when
-- it has no finish time).
local function facts(body)
  local ok, doc = pcall(cjson.decode, body)
  if not ok or type(doc) ~= 'table' then return '', '' end
  local jtype = doc['job_type']
  if type(jtype) ~= 'string' then jtype = '' end
  return jtype, minute_of(doc['finished_at'])
end

-- How long a minute's finished counter lives after its last count: the dashboard charts
-- the last hour, and this expiry is what bounds the counters' storage (relative to the
-- server's clock, so a record finished at any time is counted while it is fresh).
local MINUTE_KEEP_S = 7200

-- Completed and failed records per minute finished: {base}:finished:<YYYYMMDDHHMM>, fields
-- `completed` and `failed`. A record going (pruned, purged, re-recorded) takes itself
-- off its minute while that counter lives; an expired counter is not brought back.
local function count_finished(status, minute, delta)
  if (status ~= 'completed' and status ~= 'failed') or not minute or minute == '' then
    return
  end
  local k = key('finished', minute)
  if delta > 0 then
    redis.call('HINCRBY', k, status, delta)
    redis.call('EXPIRE', k, MINUTE_KEEP_S)
  elseif redis.call('HEXISTS', k, status) == 1 then
    if redis.call('HINCRBY', k, status, delta) <= 0 then
      redis.call('HDEL', k, status)
    end
  end
end

-- Dead letters per queue, kept beside the index so count_dead need not scan.
local function count_dead(queue, tenant, delta)
  local counters = {key('dead_counts')}
  if tenant ~= '' then
    table.insert(counters, key('dead_counts', 'tenant', tenant))
  end
  for _, k in ipairs(counters) do
    if redis.call('HINCRBY', k, queue, delta) <= 0 then
      redis.call('HDEL', k, queue)
    end
  end
end

-- Remove the record `id` (if any) from every index and counter; returns its status.
local function unindex(id)
  local f = redis.call('HMGET', key('store', id), 'status', 'queue', 'tenant', 'type', 'minute')
  local status, queue, tenant = f[1], f[2], f[3]
  if not status then return false end
  for _, k in ipairs(index_keys(status, tenant, queue, f[4])) do
    redis.call('ZREM', k, id)
  end
  if status == 'failed' then
    count_dead(queue, tenant, -1)
  end
  count_finished(status, f[5], -1)
  return status
end

-- Upsert a record and its indexes; a failed record counts as a dead letter.
local function record(id, body, status, queue, tenant)
  unindex(id)
  local seq = redis.call('INCR', key('seq', 'store'))
  local jtype, minute = facts(body)
  redis.call('HSET', key('store', id), 'body', body, 'status', status, 'queue', queue,
             'tenant', tenant, 'seq', seq, 'type', jtype, 'minute', minute)
  for _, k in ipairs(index_keys(status, tenant, queue, jtype)) do
    redis.call('ZADD', k, seq, id)
  end
  if status == 'failed' then
    count_dead(queue, tenant, 1)
  end
  count_finished(status, minute, 1)
  return seq
end
