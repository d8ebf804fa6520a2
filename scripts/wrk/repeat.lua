-- wrk: the same Idempotency-Key and body on every request: after the first, repeats.
request = function()
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = "same-key"},
    '{"message_id": 1, "lab": "x"}')
end
