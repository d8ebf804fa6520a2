-- wrk: as new-keys.lua (a new key on every request, each thread its own), and each request
-- carries the hints the endpoint's defences read (X-Request-Timeout-Ms, X-Previous-Attempts).
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("thread_number", threads)
end

local counter = 0
request = function()
  counter = counter + 1
  local key = string.format("k-%d-%d-%d-%d", thread_number, math.random(1, 1000000000), os.time(), counter)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = key,
    ["X-Request-Timeout-Ms"] = "2000", ["X-Previous-Attempts"] = "0"},
    '{"message_id": 1, "lab": "x"}')
end
