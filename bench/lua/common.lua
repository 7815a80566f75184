-- Shared by every bench script: headers every request carries, and a machine-readable summary.
-- QM_UA: the User-Agent (tickets are bound to peer + User-Agent, so it must match the setup client's).
-- QM_ORIGIN: when set, sent as Origin (the tag's /api/check is a cross-origin request).
-- QM_COOKIE: when set, sent as Cookie (a visitor's cookies on a site behind a connector).
wrk.headers["User-Agent"] = os.getenv("QM_UA") or "qm-bench/1.0"
local origin = os.getenv("QM_ORIGIN")
if origin ~= nil and origin ~= "" then
   wrk.headers["Origin"] = origin
end
local cookie = os.getenv("QM_COOKIE")
if cookie ~= nil and cookie ~= "" then
   wrk.headers["Cookie"] = cookie
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'QMJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"latency_us":{"mean":%.1f,"stdev":%.1f,"p50":%d,"p90":%d,"p99":%d,"max":%d}}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.mean, latency.stdev, latency:percentile(50), latency:percentile(90),
      latency:percentile(99), latency.max))
end
