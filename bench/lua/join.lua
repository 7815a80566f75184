-- POST /api/join {"roomId": QM_ROOM}: every request is a new visitor (the room has queueMaxPerIp null).
dofile(os.getenv("QM_LUA_DIR") .. "/common.lua")
wrk.method = "POST"
wrk.body = '{"roomId":"' .. (os.getenv("QM_ROOM") or "bench") .. '"}'
wrk.headers["Content-Type"] = "application/json"
