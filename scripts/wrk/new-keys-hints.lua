-- wrk: as new-keys.lua, and each request carries the hints the endpoint's defences read
-- (X-Request-Timeout-Ms, X-Previous-Attempts).
local counter = 0
request = function()
  counter = counter + 1
  local key = string.format("k-%d-%d-%d", math.random(1, 1000000000), os.time(), counter)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = key,
    ["X-Request-Timeout-Ms"] = "2000", ["X-Previous-Attempts"] = "0"},
    '{"message_id": 1, "lab": "x"}')
end
