-- wrk: a new Idempotency-Key on every request, the same JSON body each time.
local counter = 0
request = function()
  counter = counter + 1
  local key = string.format("k-%d-%d-%d", math.random(1, 1000000000), os.time(), counter)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = key},
    '{"message_id": 1, "lab": "x"}')
end
