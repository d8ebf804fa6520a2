-- wrk: a new Idempotency-Key on every request, the same JSON body each time.
-- Each of wrk's threads runs its own Lua state, and math.random is not seeded in any of them,
-- so without the thread's number in the key two threads would send the same keys in step:
-- half the "new" keys would be repeats.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end

local counter = 0
request = function()
  counter = counter + 1
  local key = string.format("k-%d-%d-%d-%d", thread_number, math.random(1, 1000000000), os.time(), counter)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = key},
    '{"message_id": 1, "lab": "x"}')
end
