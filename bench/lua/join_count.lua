-- POST /api/join for a fixed count (QM_MAX) and stop: requests past the count are a cheap GET /healthz
-- so no extra join is ever sent; the thread stops once QM_MAX responses are in.
dofile(os.getenv("QM_LUA_DIR") .. "/common.lua")
wrk.headers["Content-Type"] = "application/json"
local max = tonumber(os.getenv("QM_MAX") or "1000")
local join = wrk.format("POST", nil, wrk.headers, '{"roomId":"' .. (os.getenv("QM_ROOM") or "bench") .. '"}')
local other = wrk.format("GET", "/healthz", {["User-Agent"] = wrk.headers["User-Agent"]})
local sent, got = 0, 0

function request()
   sent = sent + 1
   if sent <= max then
      return join
   end
   return other
end

function response(status, headers, body)
   got = got + 1
   if got >= max then
      wrk.thread:stop()
   end
end
