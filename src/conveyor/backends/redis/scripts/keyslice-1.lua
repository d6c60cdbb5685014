-- keyslice-1: waiting jobs per concurrency key in one slice of a waiting set
-- (key_counts reads a set a slice at a time, so Redis is never held for long).
-- KEYS[1] the waiting set (w: or fw:)
-- ARGV[1] key prefix; ARGV[2] first rank; ARGV[3] last rank
-- Returns {members in the slice, key code, count, ...} (key code: '0' no key,
-- '1' .. key); a member whose job is no longer waiting is not counted.
local members = redis.call('ZRANGE', KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[3]))
local counts = {}
local order = {}
for _, m in ipairs(members) do
  local f = redis.call('HMGET', jkey(string.sub(m, 18)), 'ck', 's')
  if f[2] == 'waiting' then
    local code = tcode(f[1] or nil)
    if not counts[code] then
      counts[code] = 0
      order[#order + 1] = code
    end
    counts[code] = counts[code] + 1
  end
end
local out = {#members}
for _, code in ipairs(order) do
  out[#out + 1] = code
  out[#out + 1] = counts[code]
end
return out
