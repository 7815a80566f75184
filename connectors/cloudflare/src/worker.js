/*! Queue Manager edge gate Worker __QM_CONNECTOR_VERSION__ - see README.md.
 * Asks the queue per request (a vouched GET /api/check) before the origin sees it. Fails open when
 * the queue cannot answer, and marks those responses X-QM-Failover: <reason>.
 * With the queue's edge passes (PASS_SIGNING=ed25519) an admitted visitor's qmp_<room> cookie is checked
 * here (WebCrypto Ed25519, the queue's key set and the room's revocation list) and the queue is asked
 * only when the pass is missing, expired, revoked, bound to another door key or signed by an unknown key.
 * An origin response carrying X-QM-Command: revoke (stripped here) ends the visitor's session at the queue
 * (POST /api/sessions/revoke): their slot goes to the next visitor in line. */

const VERSION = "__QM_CONNECTOR_VERSION__";
const CHECK_TIMEOUT_MS = 2000;
const REVOKED_REFRESH_MS = 5000; // QM_REVOKED_REFRESH_MS: the longest a revocation takes to reach this Worker
const JWKS_DEFAULT_MAX_AGE_MS = 300000;
const JWKS_RETRY_MS = 10000; // an unknown kid fetches the key set again, at most this often

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

// Origins this isolate has asked the queue about (GET /api/verify?roomId=&origin=): origin -> true, or the
// time to ask again when the queue could not answer. Capped: the Host a request names is the client's.
const RETURN_CHECK_ORIGINS_MAX = 32;
const RETURN_CHECK_RETRY_MS = 60000;
const returnChecks = new Map();

/** Once per origin: may the waiting room send a visitor back here? If the room's targetUrl and returnOrigins
 * do not cover this Worker's origin, everyone the waiting room admits lands on targetUrl instead: say so
 * once in the log. In the background (ctx.waitUntil): the request never waits for it. */
function checkReturnOrigin(ctx, base, room, key, env, origin) {
  const seen = returnChecks.get(origin);
  if (seen === true || (seen !== undefined && Date.now() < seen)) return;
  if (seen === undefined && returnChecks.size >= RETURN_CHECK_ORIGINS_MAX) return;
  returnChecks.set(origin, true);
  const retry = () => returnChecks.set(origin, Date.now() + RETURN_CHECK_RETRY_MS);
  const url = new URL(`${base}/api/verify`);
  url.searchParams.set("roomId", room);
  url.searchParams.set("origin", origin);
  const headers = new Headers({ Authorization: `Bearer ${key}`, Accept: "application/json", "X-QM-Connector": `cloudflare/${VERSION}` });
  if (env.QM_EDGE_SECRET) headers.set("X-QM-Edge", env.QM_EDGE_SECRET);
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), CHECK_TIMEOUT_MS);
  const asked = fetch(url.href, { headers, signal: abort.signal, redirect: "manual" })
    .then((answer) => (answer.ok ? answer.json() : Promise.reject(new Error(`http-${answer.status}`))))
    .then((body) => {
      const info = body && typeof body === "object" ? body.room : null;
      if (!info || typeof info !== "object") return retry();
      if (info.exists === true && info.returnAllowed === false) {
        logOnce(`return ${origin}`, `${room}: the queue does not send visitors back to ${origin}: the room's targetUrl (${info.targetUrl}) and returnOrigins do not cover it, so everyone the waiting room admits lands on ${info.targetUrl} instead of this site. Add ${origin} to the room's returnOrigins, or make it the targetUrl.`);
      }
      return undefined;
    })
    .catch(retry)
    .finally(() => clearTimeout(timer));
  ctx.waitUntil(asked);
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

// The q of each media type the Accept header names (only those named: a browser's */* asks for no JSON).
function acceptQ(accept, type) {
  let q = 0;
  for (const part of (accept || "").split(",").slice(0, 20)) {
    const [token, ...params] = part.split(";");
    if (token.trim().toLowerCase() !== type) continue;
    q = 1;
    for (const p of params) {
      const m = /^\s*q=([0-9.]+)\s*$/i.exec(p);
      if (m) q = Number(m[1]) || 0;
    }
  }
  return q;
}

// Does the request ask for JSON rather than a page? X-QM-Accept: json, X-Requested-With: XMLHttpRequest,
// or an Accept that prefers application/json to text/html (the same rule as the queue's inline gate).
export function wantsJson(request) {
  const h = request.headers;
  if ((h.get("x-qm-accept") || "").trim().toLowerCase() === "json") return true;
  if ((h.get("x-requested-with") || "").trim().toLowerCase() === "xmlhttprequest") return true;
  const accept = h.get("accept") || "";
  const json = acceptQ(accept, "application/json");
  return json > 0 && json > acceptQ(accept, "text/html");
}

// Will a browser show the answer to a person? Not when it asks for JSON; else Fetch Metadata first,
// Accept: text/html without it.
export function isNavigation(request) {
  if (wantsJson(request)) return false;
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

async function failOpen(request, env, room, reason, forward, visit) {
  count(env, room, reason);
  const response = await fromOrigin(forward, env, visit);
  return withHeaders(response, [["X-QM-Failover", reason]]);
}

// The origin's answer to a gated request. Its X-QM-Command never reaches the visitor; "revoke" ends the
// visitor's session at the queue (their order is complete, say), beside the response: the slot is freed
// at once, and their edge pass admits nothing more in this isolate.
async function fromOrigin(forward, env, visit) {
  const response = await toOrigin(forward, env);
  const command = response.headers.get("x-qm-command");
  if (command === null) return response;
  const out = new Response(response.body, response);
  out.headers.delete("x-qm-command");
  if (visit && command.split(",").some((c) => c.trim().toLowerCase() === "revoke")) {
    visit.ctx.waitUntil(revokeSession(env, visit));
  }
  return out;
}

async function revokeSession(env, { base, room, key, ticket, doorKey, edgePass }) {
  let body;
  if (doorKey) body = ticket ? { roomId: room, doorKey, token: ticket } : { roomId: room, doorKey };
  else if (edgePass) body = { roomId: room, pass: edgePass };
  else return;
  if (edgePass) forgetPass(edgePass);
  const headers = new Headers({
    Authorization: `Bearer ${key}`,
    Accept: "application/json",
    "Content-Type": "application/json",
    "X-QM-Connector": `cloudflare/${VERSION}`,
  });
  if (env.QM_EDGE_SECRET) headers.set("X-QM-Edge", env.QM_EDGE_SECRET);
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), CHECK_TIMEOUT_MS);
  try {
    const answer = await fetch(`${base}/api/sessions/revoke`, { method: "POST", headers, body: JSON.stringify(body), signal: abort.signal, redirect: "manual" });
    if (answer.status !== 200) logOnce(`revoke ${answer.status}`, `${room}: the queue refused to end a session (${answer.status}); check QM_KEY`);
    await answer.body?.cancel();
  } catch (e) {
    logOnce("revoke-unreachable", `${room}: the queue could not be asked to end a session; it ends when its sessionTtlSec runs out`);
  } finally {
    clearTimeout(timer);
  }
}

function waitingRoom(base, room, visitorUrl) {
  return `${base}/w/${encodeURIComponent(room)}?qm_return=${encodeURIComponent(visitorUrl)}`;
}

const RETRY_AFTER_SEC = 5;
// the wait's state from the door's reason alone (the queue's own description names it when asked with wait=1)
const STATE_OF_REASON = new Map([
  ["waiting", "waiting"],
  ["paused", "paused"],
  ["at_capacity", "passed"],
  ["rate_limited", "rate_limited"],
]);
const VARY = "Accept, X-Requested-With, X-QM-Accept";

// The wait as the queue described it (GET /api/check?wait=1), or the least of it when it did not.
function gatedWait(wait, location, room, reason) {
  const described = wait && typeof wait === "object" && !Array.isArray(wait) ? wait : null;
  const body = described
    ? { ...described }
    : {
        error: "You are in the waiting room for this site; reload the page to see your place.",
        code: "queued",
        roomId: room,
        state: STATE_OF_REASON.get(reason) || "not_in_line", // a queue that did not describe the wait
        reason,
        position: null,
        etaSec: null,
        roomState: null,
        opensAt: null,
        retryAfterSec: RETRY_AFTER_SEC,
        reload: true,
      };
  if (!Number.isInteger(body.retryAfterSec) || body.retryAfterSec < 1) body.retryAfterSec = RETRY_AFTER_SEC;
  body.waitingUrl = location;
  body.waitUrl = location; // the name this answer had before it described the wait
  return body;
}

// one of the room's access rules refuses this request: never the origin, never a fail-open
function blocked(request, room) {
  const headers = new Headers({ "Cache-Control": "no-store", Vary: "Accept" });
  if (isNavigation(request)) {
    headers.set("Content-Type", "text/html; charset=utf-8");
    const page = '<!doctype html><html lang="en"><meta charset="utf-8"><meta name="robots" content="noindex">' +
      "<title>Access not allowed</title><h1>Access not allowed</h1>" +
      "<p>This site does not accept requests like yours here. If you think this is a mistake, contact the site's owner.</p>";
    return new Response(request.method === "HEAD" ? null : page, { status: 403, headers });
  }
  headers.set("Content-Type", "application/json");
  const body = { error: "This room's access rules do not allow this request.", code: "access_blocked", roomId: room };
  return new Response(request.method === "HEAD" ? null : JSON.stringify(body), { status: 403, headers });
}

function queued(request, location, room, reason, wait) {
  const headers = new Headers({ "Cache-Control": "no-store", Vary: VARY });
  if (isNavigation(request)) {
    headers.set("Location", location);
    return new Response(null, { status: 302, headers });
  }
  const body = gatedWait(wait, location, room, reason);
  headers.set("Content-Type", "application/json; charset=utf-8");
  headers.set("X-QM-Queued", "1");
  headers.set("Retry-After", String(body.retryAfterSec));
  headers.set("Access-Control-Expose-Headers", "X-QM-Queued, Retry-After");
  return new Response(request.method === "HEAD" ? null : JSON.stringify(body), { status: 503, headers });
}

// ---------------------------------------------------------------- edge passes (checked here)

// Per isolate: the queue's keys and the room's revocation list, shared by every request it serves.
const passes = {
  source: "", // QM_URL + room the state below belongs to
  keys: null, // Map kid -> CryptoKey
  keysUntil: 0,
  keysTried: 0,
  keysLoading: null,
  generation: null, // null: no usable revocation list (none yet, or the room is gone)
  revoked: new Set(),
  revokedBefore: null, // a flush's cutoff (s): a pass issued (iat) before it is refused
  revokedAt: 0,
  revokedTried: 0,
  revokedLoading: null,
  verified: new Map(), // "<pass> <door key>" -> claims whose signature, room and binding were checked
  ended: new Map(), // pass id -> its exp (s): sessions this isolate ended, refused whatever the list says yet
};

// This pass admits nobody here any more (its session was ended): refused until the list says so too.
function forgetPass(token) {
  try {
    const claims = JSON.parse(new TextDecoder().decode(fromB64url(token.split(".")[1] || "")));
    if (!claims || typeof claims.sub !== "string") return;
    const now = Date.now() / 1000;
    for (const [sub, exp] of passes.ended) if (!(exp > now)) passes.ended.delete(sub);
    if (passes.ended.size < 10000) passes.ended.set(claims.sub, Number(claims.exp));
  } catch (e) {
    // not a pass of ours: nothing to forget
  }
}

function fromB64url(text) {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw new Error("not base64url");
  const bin = atob(text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function toB64url(bytes) {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
}

async function getJson(url) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), CHECK_TIMEOUT_MS);
  try {
    const r = await fetch(url, { headers: { Accept: "application/json" }, signal: abort.signal });
    const body = r.status === 200 ? await r.json() : (await r.body?.cancel(), null);
    return { status: r.status, headers: r.headers, body };
  } finally {
    clearTimeout(timer);
  }
}

function loadKeys(base) {
  if (passes.keysLoading) return passes.keysLoading;
  passes.keysTried = Date.now();
  passes.keysLoading = (async () => {
    try {
      const { headers, body } = await getJson(`${base}/.well-known/jwks.json`);
      if (!body || !Array.isArray(body.keys)) return;
      const keys = new Map();
      for (const jwk of body.keys) {
        if (!jwk || jwk.kty !== "OKP" || jwk.crv !== "Ed25519" || typeof jwk.kid !== "string") continue;
        try {
          const key = await crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", x: jwk.x }, { name: "Ed25519" }, false, ["verify"]);
          keys.set(jwk.kid, key);
        } catch (e) {
          // a key this runtime cannot read is a key it does not know
        }
      }
      const m = /max-age=(\d+)/i.exec(headers.get("cache-control") || "");
      passes.keys = keys;
      passes.verified.clear(); // a key no longer published no longer vouches for what it signed
      passes.keysUntil = Date.now() + (m ? Number(m[1]) * 1000 : JWKS_DEFAULT_MAX_AGE_MS);
    } catch (e) {
      // the queue is away: keep the keys already known
    } finally {
      passes.keysLoading = null;
    }
  })();
  return passes.keysLoading;
}

function loadRevoked(base, room) {
  if (passes.revokedLoading) return passes.revokedLoading;
  passes.revokedTried = Date.now();
  passes.revokedLoading = (async () => {
    try {
      const { status, body } = await getJson(`${base}/api/passes/revoked?roomId=${encodeURIComponent(room)}`);
      if (status === 404) {
        passes.generation = null; // the room is gone: no pass of it is trusted
        passes.revokedAt = Date.now();
      } else if (body && Number.isInteger(body.generation) && Array.isArray(body.revoked)) {
        passes.generation = body.generation;
        passes.revoked = new Set(body.revoked);
        passes.revokedBefore = Number.isInteger(body.revokedBefore) ? body.revokedBefore : null;
        passes.revokedAt = Date.now();
      }
    } catch (e) {
      // the queue is away: the list is not renewed, and no pass is checked here until it is
    } finally {
      passes.revokedLoading = null;
    }
  })();
  return passes.revokedLoading;
}

// a flush revoked every pass issued before its cutoff (revokedBefore on the revocation list)
function flushed(claims) {
  return passes.revokedBefore !== null && !(Number.isInteger(claims.iat) && claims.iat >= passes.revokedBefore);
}

// revoked: on the room's list, flushed, or its session ended by this isolate (a list fetched just before
// may not say so yet)
function revokedHere(claims) {
  return passes.revoked.has(claims.sub) || passes.ended.has(claims.sub) || flushed(claims);
}

// null when the pass admits its holder here and now; otherwise why the queue must be asked.
async function passRefusal(env, ctx, base, room, token, doorKey) {
  const source = `${base} ${room}`;
  if (passes.source !== source) {
    Object.assign(passes, { source, keys: null, keysUntil: 0, keysTried: 0, generation: null, revokedBefore: null, revokedAt: 0, revokedTried: 0 });
    passes.verified.clear();
  }
  const refreshMs = Number(env.QM_REVOKED_REFRESH_MS) > 0 ? Number(env.QM_REVOKED_REFRESH_MS) : REVOKED_REFRESH_MS;
  // the revocation list is never older than refreshMs when a pass is accepted: one fetch per interval per isolate
  // the revocation list is renewed in the background from half its interval on, and awaited (one fetch
  // shared by every request of the isolate) once it is a whole interval old
  const now = Date.now();
  const age = now - passes.revokedAt;
  const retry = passes.revokedLoading !== null || now - passes.revokedTried >= Math.min(refreshMs, JWKS_RETRY_MS);
  if (age >= refreshMs && retry) await loadRevoked(base, room);
  else if (age >= refreshMs / 2 && retry) ctx.waitUntil(loadRevoked(base, room));
  if (!passes.keys && now - passes.keysTried >= JWKS_RETRY_MS) await loadKeys(base);
  else if (Date.now() >= passes.keysUntil) ctx.waitUntil(loadKeys(base));
  if (!passes.keys || passes.generation === null || Date.now() - passes.revokedAt >= refreshMs) return "not_ready";
  const cacheKey = `${token} ${doorKey}`;
  let claims = passes.verified.get(cacheKey);
  if (claims === undefined) {
    const parts = token.split(".");
    if (parts.length !== 3) return "malformed";
    let header;
    let sig;
    try {
      header = JSON.parse(new TextDecoder().decode(fromB64url(parts[0])));
      claims = JSON.parse(new TextDecoder().decode(fromB64url(parts[1])));
      sig = fromB64url(parts[2]);
    } catch (e) {
      return "malformed";
    }
    if (!header || header.alg !== "EdDSA" || typeof header.kid !== "string") return "malformed";
    const key = passes.keys.get(header.kid);
    if (!key) {
      if (Date.now() - passes.keysTried >= JWKS_RETRY_MS) ctx.waitUntil(loadKeys(base));
      return "unknown_kid";
    }
    const signed = new TextEncoder().encode(`${parts[0]}.${parts[1]}`);
    if (!(await crypto.subtle.verify("Ed25519", key, sig, signed))) return "bad_signature";
    if (!claims || typeof claims !== "object") return "malformed";
    if (claims.room !== room) return "wrong_room";
    if (!Number.isInteger(claims.exp) || claims.exp * 1000 <= Date.now()) return "expired";
    if (claims.gen !== passes.generation || revokedHere(claims)) return "revoked";
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(doorKey)));
    if (claims.bnd !== toB64url(digest.subarray(0, 16))) return "unbound";
    // signature, room and binding hold for the pass's life: later requests check only time and revocation
    if (passes.verified.size >= 10000) passes.verified.clear();
    passes.verified.set(cacheKey, claims);
    return null;
  }
  if (claims.exp * 1000 <= Date.now()) return "expired";
  if (claims.gen !== passes.generation || revokedHere(claims)) return "revoked";
  return null;
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

    checkReturnOrigin(ctx, base, room, key, env, url.origin);
    const { clean, token } = splitToken(url);
    const forward = clean === url ? request : new Request(clean.href, request);
    const cookieHeader = request.headers.get("cookie");
    const ticket = token || readCookie(cookieHeader, `qm_${room}`);
    const doorKey = readCookie(cookieHeader, `qm_dk_${room}`);
    const edgePass = readCookie(cookieHeader, `qmp_${room}`);
    const visit = { ctx, base, room, key, ticket, doorKey, edgePass };
    if (edgePass && doorKey && !token) {
      // a valid pass bound to this visitor's door key: no round trip to the queue
      if ((await passRefusal(env, ctx, base, room, edgePass, doorKey)) === null) return fromOrigin(forward, env, visit);
    }

    const check = new URL(`${base}/api/check`);
    check.searchParams.set("roomId", room);
    check.searchParams.set("url", clean.href);
    check.searchParams.set("ip", request.headers.get("cf-connecting-ip") || "");
    check.searchParams.set("agent", (request.headers.get("user-agent") || "").slice(0, 512));
    if (!isNavigation(request)) check.searchParams.set("wait", "1"); // answered in JSON: the queue describes the wait
    // what only the edge knows, for the room's access rules: the country Cloudflare names
    const country = (request.cf && request.cf.country) || request.headers.get("cf-ipcountry") || "";
    if (/^[A-Za-z]{2}$/.test(country)) check.searchParams.set("country", country.toUpperCase());
    const headers = new Headers({
      Authorization: `Bearer ${key}`,
      Accept: "application/json",
      "X-QM-Connector": `cloudflare/${VERSION}`,
    });
    const sent = [];
    if (ticket) sent.push(`qm_${room}=${ticket}`);
    if (doorKey) sent.push(`qm_dk_${room}=${doorKey}`);
    if (edgePass) sent.push(`qmp_${room}=${edgePass}`);
    if (sent.length) headers.set("Cookie", sent.join("; "));
    if (env.QM_EDGE_SECRET) headers.set("X-QM-Edge", env.QM_EDGE_SECRET);
    // the visitor's headers a header access rule names (QM_ACCESS_HEADERS: a comma-separated list)
    for (const name of String(env.QM_ACCESS_HEADERS || "").split(",").map((n) => n.trim()).filter(Boolean)) {
      const value = request.headers.get(name);
      if (value !== null) headers.set(`X-QM-Visitor-${name}`, value);
    }

    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), CHECK_TIMEOUT_MS);
    let answer;
    let verdict;
    try {
      answer = await fetch(check.href, { headers, signal: abort.signal, redirect: "manual" });
      if (answer.status === 200 || answer.status === 403) verdict = await answer.json().catch(() => null);
      else await answer.body?.cancel();
    } catch (e) {
      clearTimeout(timer);
      return failOpen(request, env, room, abort.signal.aborted ? "timeout" : answer ? "invalid-response" : "unreachable", forward, visit);
    }
    clearTimeout(timer);
    const waitUrl = waitingRoom(base, room, clean.href);

    if (answer.status === 429) {
      // the queue is up and shedding load: wait in line, not a fail-open
      logOnce("429", "the queue answered 429 (CHECK_LIMIT_PER_MIN): visitors are sent to the waiting room; raise the limit if this persists");
      return queued(request, waitUrl, room, "rate_limited");
    }
    if (answer.status === 403 && verdict && verdict.code === "access_blocked") return blocked(request, room);
    if (answer.status !== 200) return failOpen(request, env, room, `http-${answer.status}`, forward, visit);
    if (!verdict || typeof verdict !== "object") return failOpen(request, env, room, "invalid-response", forward, visit);

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
      // the door key the check just handed out names the session if the origin ends it in this answer
      const given = /^qm_dk_[^=]*=([^;]*)/.exec(cookies.find((line) => line.startsWith(`qm_dk_${room}=`)) || "");
      const response = await fromOrigin(forward, env, given ? { ...visit, doorKey: given[1] } : visit);
      return setCookies.length ? withHeaders(response, setCookies) : response;
    }
    if (verdict.admit === false && typeof verdict.waitUrl === "string" && /^https?:\/\//i.test(verdict.waitUrl)) {
      return queued(request, waitUrl, room, String(verdict.reason || "waiting"), verdict.wait);
    }
    return failOpen(request, env, room, "invalid-response", forward, visit);
  },
};
