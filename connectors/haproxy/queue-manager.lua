-- Queue Manager forward-auth gate for HAProxy (2.6+, built with Lua as Debian's is)
-- Version: 1.0.0
--
-- Loaded by haproxy.cfg (lua-load). Replace:
--   QUEUE_URL  the queue's address, e.g. https://queue.example.com (no trailing slash)
--   ROOM       the room id
--   KEY        the Public API key (PUBLIC_API_KEY), sent only to the queue
--
-- `http-request lua.qm_gate` asks GET QUEUE_URL/api/gate for the request (core.httpclient, no module to
-- build): a 200 lets it through (the cookies it sets are added to the app's answer by
-- `http-response lua.qm_cookies`); anything else is answered to the visitor as the gate gave it (302 to the
-- waiting page, 403, 503). A queue that cannot be reached sets txn.qm_unreachable: haproxy.cfg decides.

local GATE = "QUEUE_URL/api/gate?roomId=ROOM&deny=302"
local AUTHORIZATION = "Bearer KEY"
local TIMEOUT_MS = 5000

local function first(headers, name)
  local values = headers[name]
  if values == nil then
    return nil
  end
  return values[0]
end

local function all(headers, name, sep)
  local values = headers[name]
  if values == nil then
    return nil
  end
  local out = {}
  local i = 0
  while values[i] ~= nil do
    out[#out + 1] = values[i]
    i = i + 1
  end
  return table.concat(out, sep)
end

-- the visitor's own headers the gate is not sent: the gate's request is not the visitor's
local NOT_PASSED = {
  ["host"] = true, ["authorization"] = true, ["content-length"] = true, ["transfer-encoding"] = true,
  ["connection"] = true, ["keep-alive"] = true, ["te"] = true, ["upgrade"] = true, ["expect"] = true,
  ["x-real-ip"] = true, ["x-forwarded-for"] = true, ["x-forwarded-host"] = true, ["x-forwarded-proto"] = true,
  ["x-forwarded-uri"] = true, ["x-forwarded-method"] = true, ["x-original-uri"] = true, ["x-original-method"] = true,
}

core.register_action("qm_gate", { "http-req" }, function(txn)
  local asked = txn.http:req_get_headers()
  local tls = txn.f:ssl_fc()
  -- the visitor's headers (cookies, User-Agent, Sec-Fetch-*, any an access rule reads), one line each
  local headers = {}
  for name, _ in pairs(asked) do
    local lower = string.lower(name)
    if not NOT_PASSED[lower] then
      headers[lower] = { all(asked, name, lower == "cookie" and "; " or ", ") }
    end
  end
  headers["authorization"] = { AUTHORIZATION }
  headers["x-forwarded-method"] = { txn.f:method() }
  headers["x-forwarded-uri"] = { txn.f:pathq() }
  headers["x-forwarded-host"] = { first(asked, "host") or "" }
  headers["x-forwarded-proto"] = { (tls == true or tls == 1) and "https" or "http" }
  headers["x-real-ip"] = { txn.f:src() }
  local ok, res = pcall(function()
    return core.httpclient():get({ url = GATE, headers = headers, timeout = TIMEOUT_MS })
  end)
  if not ok or res == nil or res.status == nil or res.status == 0 then
    txn:set_var("txn.qm_unreachable", 1)
    return
  end
  local cookies = all(res.headers, "set-cookie", "\n")
  if res.status >= 200 and res.status < 300 then
    if cookies ~= nil and cookies ~= "" then
      txn:set_var("txn.qm_cookies", cookies)
    end
    return
  end
  if first(res.headers, "x-qm-decision") == nil then
    -- not the gate's own answer (a wrong KEY is 401 unauthorized, a queue in trouble a 5xx): as unreachable
    txn:set_var("txn.qm_unreachable", 1)
    return
  end
  local reply = txn:reply()
  reply:set_status(res.status)
  for name, values in pairs(res.headers) do
    local lower = string.lower(name)
    if lower == "location" or lower == "set-cookie" or lower == "retry-after" or lower == "content-type"
      or lower == "cache-control" or lower == "x-qm-decision" then
      local i = 0
      while values[i] ~= nil do
        reply:add_header(lower, values[i])
        i = i + 1
      end
    end
  end
  reply:set_body(res.body or "")
  txn:done(reply)
end)

core.register_action("qm_cookies", { "http-res" }, function(txn)
  local cookies = txn:get_var("txn.qm_cookies")
  if cookies == nil then
    return
  end
  for line in string.gmatch(cookies, "[^\n]+") do
    txn.http:res_add_header("set-cookie", line)
  end
end)
