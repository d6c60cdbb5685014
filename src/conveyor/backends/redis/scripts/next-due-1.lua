-- next-due-1: seconds until the next delayed job is due, on the server's clock
-- (wait_for_work sleeps until then).
-- KEYS[1] delayed     delayed jobs by run_at
-- ARGV[1] key prefix
-- Returns the seconds as text (0 when already due), or false when none is delayed.
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #head == 0 then return false end
return fmt(math.max(0, tonumber(head[2]) - now_time()))
