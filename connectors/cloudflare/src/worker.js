/*! Queue Manager edge gate Worker __QM_CONNECTOR_VERSION__ - see README.md.
 * Asks the queue per request (a vouched GET /api/check) before the origin sees it. Fails open when
 * the queue cannot answer, and marks those responses X-QM-Failover: <reason>. */

const VERSION = "__QM_CONNECTOR_VERSION__";
const CHECK_TIMEOUT_MS = 2000;

// "What skips the gate" (Operations Guide): the same four conditions as the queue's inline gate.
const STATIC_EXTENSIONS = new Set([
  "js", "mjs", "cjs", "css", "map",
  "png", "jpg", "jpeg", "gif", "webp", "avif", "svg", "ico", "bmp", "apng", "tif", "tiff", "jxl",
  "woff", "woff2", "ttf", "otf", "eot",
  "mp3", "mp4", "m4a", "m4v", "aac", "flac", "oga", "ogg", "ogv", "opus", "wav", "weba", "webm", "mov",
]);
const BROWSING_DESTS = new Set(["document", "iframe", "frame", "object", "embed"]);

// One log line per isolate for each deploy mistake or shed load, not one per request.
const logged = new Set();
function logOnce(key, line) {
  if (logged.has(key)) return;
  logged.add(key);
  console.log(`[qm-edge-gate] ${line}`);
}

function staticExtension(path) {
  const last = path.slice(path.lastIndexOf("/") + 1);
  const dot = last.lastIndexOf(".");
  if (dot <= 0) return false;
  return STATIC_EXTENSIONS.has(last.slice(dot + 1).toLowerCase());
}

function plainPath(path) {
  if (!path.startsWith("/") || /[;%\\]/.test(path)) return false;
  const closed = path + "/";
  return !closed.includes("/./") && !closed.includes("/../");
}

export function skipsGate(request, url) {
  const dest = request.headers.get("sec-fetch-dest");
  return (
    (request.method === "GET" || request.method === "HEAD") &&
    staticExtension(url.pathname) &&
    plainPath(url.pathname) &&
    (dest === null || !BROWSING_DESTS.has(dest.toLowerCase()))
  );
}

// Will a browser show the answer to a person? Fetch Metadata first, Accept: text/html without it.
export function isNavigation(request) {
  const mode = request.headers.get("sec-fetch-mode");
  const dest = request.headers.get("sec-fetch-dest");
  if (mode !== null || dest !== null) {
    return mode === "navigate" || (dest !== null && BROWSING_DESTS.has(dest.toLowerCase()));
  }
  return (request.headers.get("accept") || "").includes("text/html");
}

function readCookie(header, name) {
  for (const part of (header || "").split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}

// Take qm_token out of the visitor's URL: the pass goes to the queue, never to the origin's logs.
function splitToken(url) {
  const clean = new URL(url.href);
  const token = clean.searchParams.get("qm_token");
  if (token === null) return { clean: url, token: null };
  clean.searchParams.delete("qm_token");
  return { clean, token };
}

function withHeaders(response, add) {
  const out = new Response(response.body, response);
  for (const [name, value] of add) out.headers.append(name, value);
  return out;
}

function toOrigin(request, env) {
  if (!env.ORIGIN_URL) return fetch(request);
  const url = new URL(request.url);
  const origin = new URL(env.ORIGIN_URL);
  url.protocol = origin.protocol;
  url.host = origin.host;
  return fetch(new Request(url, request));
}

function count(env, room, reason) {
  try {
    if (env.QM_ANALYTICS && typeof env.QM_ANALYTICS.writeDataPoint === "function") {
      env.QM_ANALYTICS.writeDataPoint({ blobs: [room, reason], doubles: [1], indexes: [room] });
    }
  } catch (e) {
    // counting is best effort: the visitor's request never fails on it
  }
}

async function failOpen(request, env, room, reason, forward) {
  count(env, room, reason);
  const response = await toOrigin(forward, env);
  return withHeaders(response, [["X-QM-Failover", reason]]);
}

function waitingRoom(base, room, visitorUrl) {
  return `${base}/w/${encodeURIComponent(room)}?qm_return=${encodeURIComponent(visitorUrl)}`;
}

function queued(request, location, room, reason) {
  const headers = new Headers({ "Cache-Control": "no-store" });
  if (isNavigation(request)) {
    headers.set("Location", location);
    return new Response(null, { status: 302, headers });
  }
  headers.set("Content-Type", "application/json; charset=utf-8");
  headers.set("X-QM-Queued", "1");
  headers.set("Retry-After", "5");
  headers.set("Access-Control-Expose-Headers", "X-QM-Queued");
  const body = { error: "The visitor is waiting in line.", code: "queued", roomId: room, reason, reload: true, waitUrl: location };
  return new Response(JSON.stringify(body), { status: 503, headers });
}

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    const base = (env.QM_URL || "").trim().replace(/\/+$/, "");
    const room = (env.QM_ROOM || "").trim();
    const key = (env.QM_KEY || "").trim();
    if (!base || !room) {
      logOnce("config", "QM_URL or QM_ROOM is not set: every request goes to the origin unqueued (a deploy mistake, not counted)");
      return toOrigin(request, env);
    }
    if (!key) {
      logOnce("key", "the QM_KEY secret is not set (wrangler secret put QM_KEY): every request goes to the origin unqueued");
      return toOrigin(request, env);
    }
    if (skipsGate(request, url)) return toOrigin(request, env);

    const { clean, token } = splitToken(url);
    const forward = clean === url ? request : new Request(clean.href, request);
    const cookieHeader = request.headers.get("cookie");
    const ticket = token || readCookie(cookieHeader, `qm_${room}`);
    const doorKey = readCookie(cookieHeader, `qm_dk_${room}`);

    const check = new URL(`${base}/api/check`);
    check.searchParams.set("roomId", room);
    check.searchParams.set("url", clean.href);
    check.searchParams.set("ip", request.headers.get("cf-connecting-ip") || "");
    check.searchParams.set("agent", (request.headers.get("user-agent") || "").slice(0, 512));
    const headers = new Headers({
      Authorization: `Bearer ${key}`,
      Accept: "application/json",
      "X-QM-Connector": `cloudflare/${VERSION}`,
    });
    const sent = [];
    if (ticket) sent.push(`qm_${room}=${ticket}`);
    if (doorKey) sent.push(`qm_dk_${room}=${doorKey}`);
    if (sent.length) headers.set("Cookie", sent.join("; "));
    if (env.QM_EDGE_SECRET) headers.set("X-QM-Edge", env.QM_EDGE_SECRET);

    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), CHECK_TIMEOUT_MS);
    let answer;
    let verdict;
    try {
      answer = await fetch(check.href, { headers, signal: abort.signal, redirect: "manual" });
      if (answer.status === 200) verdict = await answer.json();
      else await answer.body?.cancel();
    } catch (e) {
      clearTimeout(timer);
      return failOpen(request, env, room, abort.signal.aborted ? "timeout" : answer ? "invalid-response" : "unreachable", forward);
    }
    clearTimeout(timer);
    const waitUrl = waitingRoom(base, room, clean.href);

    if (answer.status === 429) {
      // the queue is up and shedding load: wait in line, not a fail-open
      logOnce("429", "the queue answered 429 (CHECK_LIMIT_PER_MIN): visitors are sent to the waiting room; raise the limit if this persists");
      return queued(request, waitUrl, room, "rate_limited");
    }
    if (answer.status !== 200) return failOpen(request, env, room, `http-${answer.status}`, forward);
    if (!verdict || typeof verdict !== "object") return failOpen(request, env, room, "invalid-response", forward);

    if (verdict.admit === true) {
      const cookies = answer.headers.getSetCookie ? answer.headers.getSetCookie() : [];
      const setCookies = cookies.map((line) => ["Set-Cookie", line]);
      if (token) {
        // keep the pass on this site (the queue reads it from the qm_<room> cookie), and take it out of the address bar
        const secure = clean.protocol === "https:" ? "; Secure" : "";
        setCookies.push(["Set-Cookie", `qm_${room}=${token}; Path=/; SameSite=Lax; HttpOnly${secure}`]);
        if (isNavigation(request) && (request.method === "GET" || request.method === "HEAD")) {
          const headers = new Headers({ Location: clean.href, "Cache-Control": "no-store" });
          for (const [name, value] of setCookies) headers.append(name, value);
          return new Response(null, { status: 302, headers });
        }
      }
      const response = await toOrigin(forward, env);
      return setCookies.length ? withHeaders(response, setCookies) : response;
    }
    if (verdict.admit === false && typeof verdict.waitUrl === "string" && /^https?:\/\//i.test(verdict.waitUrl)) {
      return queued(request, waitUrl, room, String(verdict.reason || "waiting"));
    }
    return failOpen(request, env, room, "invalid-response", forward);
  },
};
