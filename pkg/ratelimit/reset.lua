-- Forgets everything a limiter counted for one key.
-- KEYS[1]  the limiter's key (a sliding-window log or a GCRA TAT)
-- No ARGV.
-- Returns the number of keys deleted (0 or 1).
return redis.call('DEL', KEYS[1])
