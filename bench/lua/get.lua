-- GET the URL given to wrk, carrying the bench User-Agent (and Origin when QM_ORIGIN is set).
dofile(os.getenv("QM_LUA_DIR") .. "/common.lua")
