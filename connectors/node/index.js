'use strict';
const crypto = require('node:crypto');
/**
 * Queue Manager connector for Node (node:http, Express, Connect). Version __QM_CONNECTOR_VERSION__.
 *
 * Per request: a static subresource skips the check; anything else is a vouched door check
 * (GET {queueUrl}/api/check?roomId=&url=&ip=&agent= with Authorization: Bearer <key>), made for the
 * visitor and answered within timeoutMs. A pass continues to the app; the queue sends a navigation to
 * the waiting room (302) and answers anything else 503 + X-QM-Queued; a queue that cannot answer
 * fails open: the app answers, marked X-QM-Failover: <reason>. No runtime dependencies.
 *
 * Edge passes (the queue's PASS_SIGNING=ed25519): an admitted visitor's qmp_<room> cookie is an
 * Ed25519-signed pass bound to their door key. The connector verifies it itself (node:crypto, against the
 * queue's /.well-known/jwks.json and the room's /api/passes/revoked, both fetched in the background) and
 * asks the queue only when the pass is missing, expired, revoked, bound to another door key, for another
 * room, or signed by a key it does not know.
 *
 * Ending a session: gate.revokeSession(req) (also on the middleware) tells the queue the visitor is done
 * (their order is complete): POST {queueUrl}/api/sessions/revoke with the request's door key and ticket,
 * or its edge pass. Their slot goes to the next visitor in line at once.
 */

const VERSION = '__QM_CONNECTOR_VERSION__';
const DEFAULT_TIMEOUT_MS = 2000;
const PASS_COOKIE_MAX_AGE_SEC = 86400; // the server's QUEUE_COOKIE_MAX_AGE_SEC default
const DEFAULT_REVOKED_REFRESH_MS = 5000;
const JWKS_DEFAULT_MAX_AGE_MS = 300000;
const JWKS_RETRY_MS = 10000; // an unknown kid fetches the key set again, at most this often

const STATIC_EXTENSIONS = new Set([
  // scripts, styles, source maps
  'js', 'mjs', 'cjs', 'css', 'map',
  // images
  'png', 'jpg', 'jpeg', 'gif', 'webp', 'avif', 'svg', 'ico', 'bmp', 'apng', 'tif', 'tiff', 'jxl',
  // fonts
  'woff', 'woff2', 'ttf', 'otf', 'eot',
  // audio and video
  'mp3', 'mp4', 'm4a', 'm4v', 'aac', 'flac', 'oga', 'ogg', 'ogv', 'opus', 'wav', 'weba', 'webm', 'mov',
]);
const BROWSING_DESTS = new Set(['document', 'iframe', 'frame', 'object', 'embed']);
const EXPOSE = 'X-QM-Queued, X-QM-Failover, Retry-After';
const VARY = 'Accept, X-Requested-With, X-QM-Accept'; // the same address answers a page or JSON
const RETRY_AFTER_SEC = 5;
// the wait's state from the door's reason alone (the queue's own description names it when asked with wait=1)
const STATE_OF_REASON = new Map([
  ['waiting', 'waiting'],
  ['paused', 'paused'],
  ['at_capacity', 'passed'],
  ['rate_limited', 'rate_limited'],
]);
const RETURN_CHECK_ORIGINS_MAX = 32; // origins asked about per gate: the Host header is the visitor's to choose
const RETURN_CHECK_RETRY_MS = 60000; // a start-up question the queue could not answer is asked again after this
const TOKEN_SHAPE = /^[A-Za-z0-9._~-]{1,4096}$/; // a signed token: base64url parts and a dot; nothing a cookie could misread

let warnedUnconfigured = false;
let warnedRateLimited = false;

function header(req, name) {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

/** The request target as the app receives it (Express strips a mount path from req.url, not from originalUrl). */
function target(req) {
  return req.originalUrl || req.url || '/';
}

/** The same four conditions as the queue's own inline gate (Operations Guide, "What skips the gate"). */
function skipsGate(method, path, secFetchDest) {
  if (method !== 'GET' && method !== 'HEAD') return false;
  const last = path.slice(path.lastIndexOf('/') + 1);
  const dot = last.lastIndexOf('.');
  if (dot <= 0 || !STATIC_EXTENSIONS.has(last.slice(dot + 1).toLowerCase())) return false;
  if (!path.startsWith('/') || /[;%\\]/.test(path)) return false;
  const closed = path + '/';
  if (closed.includes('/./') || closed.includes('/../')) return false;
  return secFetchDest == null || !BROWSING_DESTS.has(String(secFetchDest).toLowerCase());
}

/** The q the Accept header gives one media type, when it names it (a browser's *\/* asks for no JSON). */
function acceptQ(accept, type) {
  let q = 0;
  for (const part of String(accept || '').split(',').slice(0, 20)) {
    const [token, ...params] = part.split(';');
    if (token.trim().toLowerCase() !== type) continue;
    q = 1;
    for (const p of params) {
      const m = /^\s*q=([0-9.]+)\s*$/i.exec(p);
      if (m) q = Number(m[1]) || 0;
    }
  }
  return q;
}

/**
 * Does the request ask for JSON rather than a page? X-QM-Accept: json, X-Requested-With: XMLHttpRequest,
 * or an Accept that prefers application/json to text/html (the same rule as the queue's inline gate).
 */
function wantsJson(req) {
  if (String(header(req, 'x-qm-accept') || '').trim().toLowerCase() === 'json') return true;
  if (String(header(req, 'x-requested-with') || '').trim().toLowerCase() === 'xmlhttprequest') return true;
  const accept = header(req, 'accept') || '';
  const json = acceptQ(accept, 'application/json');
  return json > 0 && json > acceptQ(accept, 'text/html');
}

/** Will a browser show the answer to a person? Not when it asks for JSON; else Fetch Metadata first, Accept: text/html without it. */
function isNavigation(req) {
  if (wantsJson(req)) return false;
  const mode = header(req, 'sec-fetch-mode');
  const dest = header(req, 'sec-fetch-dest');
  if (mode != null || dest != null) {
    return mode === 'navigate' || (dest != null && BROWSING_DESTS.has(dest.toLowerCase()));
  }
  return (header(req, 'accept') || '').includes('text/html');
}

function hops(trustProxy) {
  if (trustProxy === true) return 1;
  const n = Number(trustProxy);
  return Number.isInteger(n) && n > 0 ? n : 0;
}

function plainIp(address) {
  if (!address) return '';
  const a = String(address).trim();
  return a.startsWith('::ffff:') && a.includes('.') ? a.slice(7) : a;
}

/** The visitor's address: the socket's, or with trustProxy the hop-th X-Forwarded-For entry from the right. */
function clientIp(req, trustProxy) {
  const n = hops(trustProxy);
  const forwarded = n ? header(req, 'x-forwarded-for') : undefined;
  if (forwarded) {
    const chain = forwarded.split(',').map((s) => s.trim()).filter(Boolean);
    if (chain.length) return plainIp(chain[Math.max(chain.length - n, 0)]);
  }
  return plainIp(req.socket && req.socket.remoteAddress);
}

/** The absolute URL the visitor asked for. */
function visitorUrl(req, trustProxy) {
  let scheme = req.socket && req.socket.encrypted ? 'https' : 'http';
  let host = header(req, 'host') || 'localhost';
  if (hops(trustProxy)) {
    const proto = (header(req, 'x-forwarded-proto') || '').split(',')[0].trim().toLowerCase();
    if (proto === 'http' || proto === 'https') scheme = proto;
    const fwdHost = (header(req, 'x-forwarded-host') || '').split(',')[0].trim();
    if (/^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/.test(fwdHost)) host = fwdHost;
  }
  return `${scheme}://${host}${target(req)}`;
}

function parseCookies(req) {
  const out = {};
  for (const part of (header(req, 'cookie') || '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 1) continue;
    const name = part.slice(0, eq).trim();
    if (!(name in out)) out[name] = part.slice(eq + 1).trim();
  }
  return out;
}

/** The query's qm_token (the waiting page's hand-off) and the URL without it. */
function handOff(url) {
  const q = url.indexOf('?');
  if (q < 0 || !url.includes('qm_token=', q)) return { token: null, clean: url };
  let token = null;
  const kept = [];
  for (const part of url.slice(q + 1).split('&')) {
    if (!part.startsWith('qm_token=')) {
      if (part) kept.push(part);
    } else if (token === null && part.length > 9) {
      try {
        token = decodeURIComponent(part.slice(9));
      } catch (_) {
        token = part.slice(9);
      }
    }
  }
  return { token, clean: url.slice(0, q) + (kept.length ? '?' + kept.join('&') : '') };
}

function setCookieLines(headers) {
  if (typeof headers.getSetCookie === 'function') return headers.getSetCookie();
  const joined = headers.get('set-cookie');
  return joined ? joined.split(/,(?=\s*[^;,=\s]+=)/).map((s) => s.trim()) : [];
}

function asList(value) {
  if (value == null) return [];
  return Array.isArray(value) ? value.map(String) : [String(value)];
}

/**
 * Add Set-Cookie lines and headers to a response without replacing the app's own: appended now, and
 * put back at the moment the head is written if the app replaced them meanwhile.
 */
function decorate(res, cookies, extra) {
  if (!cookies.length && !extra.length) return;
  const apply = (headersArg) => {
    for (const [name, value] of extra) res.setHeader(name, value);
    if (!cookies.length) return;
    const now = asList(res.getHeader('set-cookie'));
    const missing = cookies.filter((c) => !now.includes(c));
    if (missing.length) res.setHeader('Set-Cookie', [...now, ...missing]);
    if (headersArg && typeof headersArg === 'object' && !Array.isArray(headersArg)) {
      for (const key of Object.keys(headersArg)) {
        if (key.toLowerCase() !== 'set-cookie') continue;
        const theirs = asList(headersArg[key]);
        headersArg[key] = [...theirs, ...cookies.filter((c) => !theirs.includes(c))];
      }
    }
  };
  if (res.headersSent) return;
  apply(null);
  const writeHead = res.writeHead;
  res.writeHead = function qmWriteHead(...args) {
    res.writeHead = writeHead;
    try {
      const headersArg = typeof args[1] === 'object' ? args[1] : args[2];
      apply(headersArg);
    } catch (_) {
      // never break the app's response
    }
    return writeHead.apply(this, args);
  };
}

/** The wait as the queue described it (GET /api/check?wait=1), or the least of it when it did not. */
function gatedWait(wait, waitUrl, roomId, reason) {
  const described = wait && typeof wait === 'object' && !Array.isArray(wait) ? wait : null;
  const body = described
    ? { ...described }
    : {
        error: 'You are in the waiting room for this site; reload the page to see your place.',
        code: 'queued',
        roomId,
        state: STATE_OF_REASON.get(reason) || 'not_in_line', // a queue that did not describe the wait
        reason,
        position: null,
        etaSec: null,
        roomState: null,
        opensAt: null,
        retryAfterSec: RETRY_AFTER_SEC,
        reload: true,
      };
  if (!Number.isInteger(body.retryAfterSec) || body.retryAfterSec < 1) body.retryAfterSec = RETRY_AFTER_SEC;
  body.waitingUrl = waitUrl;
  body.waitUrl = waitUrl; // the name this answer had before it described the wait
  return body;
}

function httpUrl(value) {
  return typeof value === 'string' && /^https?:\/\//i.test(value);
}

function passCookie(roomId, token, secure) {
  return `qm_${roomId}=${token}; Path=/; SameSite=Lax; Max-Age=${PASS_COOKIE_MAX_AGE_SEC}; HttpOnly` + (secure ? '; Secure' : '');
}

function b64url(buf) {
  return Buffer.from(buf).toString('base64').replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_');
}

function fromB64url(text) {
  if (typeof text !== 'string' || !/^[A-Za-z0-9_-]*$/.test(text)) throw new Error('not base64url');
  return Buffer.from(text, 'base64url');
}

/** The pass's `bnd` claim for a door key: base64url of the first 16 bytes of SHA-256(key). */
function bindingOf(doorKey) {
  return b64url(crypto.createHash('sha256').update(doorKey).digest().subarray(0, 16));
}

function maxAgeMs(headers) {
  const m = /max-age=(\d+)/i.exec(headers.get('cache-control') || '');
  return m ? Number(m[1]) * 1000 : JWKS_DEFAULT_MAX_AGE_MS;
}

/**
 * What the connector knows to check passes itself: the queue's keys (kid -> KeyObject, refreshed when
 * their max-age runs out, or on an unknown kid at most every JWKS_RETRY_MS) and the room's revocation
 * list (generation and revoked pass ids, refreshed every revokedRefreshMs once a pass has been seen).
 */
function edgePasses(queueUrl, roomId, timeoutMs, refreshMs) {
  const state = {
    keys: null, // Map kid -> KeyObject
    keysUntil: 0,
    keysTried: 0,
    keysLoading: null,
    generation: null, // null: no usable revocation list (not fetched yet, or the room is gone)
    revoked: new Set(),
    ended: new Map(), // pass id -> its exp (s): sessions this connector ended, refused whatever the list says yet
    revokedBefore: null, // a flush's cutoff (s): a pass issued (iat) before it is refused
    timer: null,
    verified: new Map(), // "<pass> <door key>" -> claims whose signature, room and binding were checked
  };

  async function getJson(url) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), timeoutMs);
    try {
      const r = await fetch(url, { headers: { Accept: 'application/json' }, signal: controller.signal });
      const body = r.status === 200 ? await r.json() : null;
      return { status: r.status, headers: r.headers, body };
    } finally {
      clearTimeout(timer);
    }
  }

  function loadKeys() {
    if (state.keysLoading) return state.keysLoading;
    state.keysTried = Date.now();
    state.keysLoading = getJson(`${queueUrl}/.well-known/jwks.json`)
      .then(({ headers, body }) => {
        if (!body || !Array.isArray(body.keys)) return;
        const keys = new Map();
        for (const jwk of body.keys) {
          if (!jwk || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.kid !== 'string') continue;
          try {
            keys.set(jwk.kid, crypto.createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' }));
          } catch (_) {
            // a key this runtime cannot read is a key it does not know
          }
        }
        state.keys = keys;
        state.verified.clear(); // a key no longer published no longer vouches for what it signed
        state.keysUntil = Date.now() + maxAgeMs(headers);
      })
      .catch(() => {})
      .finally(() => {
        state.keysLoading = null;
      });
    return state.keysLoading;
  }

  async function loadRevoked() {
    try {
      const { status, body } = await getJson(`${queueUrl}/api/passes/revoked?roomId=${encodeURIComponent(roomId)}`);
      if (status === 404) {
        state.generation = null; // the room is gone: no pass of it is trusted
      } else if (body && Number.isInteger(body.generation) && Array.isArray(body.revoked)) {
        state.generation = body.generation;
        state.revoked = new Set(body.revoked);
        state.revokedBefore = Number.isInteger(body.revokedBefore) ? body.revokedBefore : null;
      }
    } catch (_) {
      // unreachable: keep the last list; a pass still expires within EDGE_PASS_TTL_SEC
    }
  }

  /** A pass was seen: keep the key set and the revocation list fresh from now on. */
  function watch() {
    if (state.timer) return;
    loadKeys();
    loadRevoked();
    state.timer = setInterval(loadRevoked, refreshMs);
    if (typeof state.timer.unref === 'function') state.timer.unref();
  }

  /** A flush revoked every pass issued before its cutoff (revokedBefore on the revocation list). */
  function flushed(claims) {
    return state.revokedBefore !== null && !(Number.isInteger(claims.iat) && claims.iat >= state.revokedBefore);
  }

  /** Revoked: on the room's list, or its session ended here (a list fetched just before may not say so). */
  function isRevoked(claims) {
    return state.revoked.has(claims.sub) || state.ended.has(claims.sub) || flushed(claims);
  }

  /** null when the pass admits its holder here and now; otherwise why the queue must be asked. */
  function refusal(token, doorKey) {
    if (!state.keys || state.generation === null) return 'not_ready';
    if (Date.now() >= state.keysUntil) loadKeys();
    if (!doorKey) return 'unbound';
    const cacheKey = `${token} ${doorKey}`;
    const known = state.verified.get(cacheKey);
    if (known !== undefined) {
      if (known.exp * 1000 <= Date.now()) return 'expired';
      if (known.gen !== state.generation || isRevoked(known)) return 'revoked';
      return null;
    }
    const parts = String(token).split('.');
    if (parts.length !== 3) return 'malformed';
    let header;
    let claims;
    let sig;
    try {
      header = JSON.parse(fromB64url(parts[0]).toString('utf8'));
      claims = JSON.parse(fromB64url(parts[1]).toString('utf8'));
      sig = fromB64url(parts[2]);
    } catch (_) {
      return 'malformed';
    }
    if (!header || header.alg !== 'EdDSA' || typeof header.kid !== 'string') return 'malformed';
    const key = state.keys.get(header.kid);
    if (!key) {
      if (Date.now() - state.keysTried >= JWKS_RETRY_MS) loadKeys();
      return 'unknown_kid';
    }
    if (!crypto.verify(null, Buffer.from(parts[0] + '.' + parts[1], 'ascii'), key, sig)) return 'bad_signature';
    if (!claims || typeof claims !== 'object') return 'malformed';
    if (claims.room !== roomId) return 'wrong_room';
    if (!Number.isInteger(claims.exp) || claims.exp * 1000 <= Date.now()) return 'expired';
    if (claims.gen !== state.generation || isRevoked(claims)) return 'revoked';
    if (claims.bnd !== bindingOf(doorKey)) return 'unbound';
    // signature, room and binding hold for the pass's life: later requests check only time and revocation
    if (state.verified.size >= 10000) state.verified.clear();
    state.verified.set(cacheKey, claims);
    return null;
  }

  function stop() {
    if (state.timer) clearInterval(state.timer);
    state.timer = null;
  }

  /** This pass admits nobody here any more (its session was ended): refused until the list says so too. */
  function forget(token) {
    try {
      const claims = JSON.parse(fromB64url(String(token).split('.')[1] || '').toString('utf8'));
      if (claims && typeof claims.sub === 'string') {
        const now = Date.now() / 1000;
        for (const [sub, exp] of state.ended) if (!(exp > now)) state.ended.delete(sub); // expired: refused anyway
        if (state.ended.size < 10000) state.ended.set(claims.sub, Number(claims.exp));
      }
    } catch (_) {
      // not a pass of ours: nothing to forget
    }
    for (const cached of state.verified.keys()) {
      if (cached.startsWith(`${token} `)) state.verified.delete(cached);
    }
  }

  return { watch, refusal, stop, forget, state };
}

/**
 * createGate({queueUrl, roomId, key, timeoutMs, trustProxy, onFailOpen, revokedRefreshMs}) -> gate(req, res): Promise<boolean>.
 * true: continue to the app. false: the gate has answered (a redirect or the queued envelope).
 * gate.stats counts what it did: passes admitted locally, checks asked of the queue, local refusals by reason.
 */
function createGate(options = {}) {
  const queueUrl = String(options.queueUrl || '').replace(/\/+$/, '');
  const roomId = options.roomId ? String(options.roomId) : '';
  const key = options.key ? String(options.key) : '';
  const timeoutMs = Number(options.timeoutMs) > 0 ? Number(options.timeoutMs) : DEFAULT_TIMEOUT_MS;
  const trustProxy = options.trustProxy;
  const onFailOpen = typeof options.onFailOpen === 'function' ? options.onFailOpen : null;
  const configured = Boolean(queueUrl && roomId && key);
  const refreshMs = Number(options.revokedRefreshMs) > 0 ? Number(options.revokedRefreshMs) : DEFAULT_REVOKED_REFRESH_MS;
  const passes = edgePasses(queueUrl, roomId, timeoutMs, refreshMs);
  const stats = { local: 0, checks: 0, refused: {}, blocked: 0 };

  // Origins this gate has asked the queue about: origin -> true (answered) or the time to ask again.
  const returnChecks = new Map();

  /**
   * Once per origin this app is reached on: may the waiting room send a visitor back here? (GET /api/verify
   * ?roomId=&origin=, in the background, never delaying the request). When the room's targetUrl and
   * returnOrigins do not cover this origin, every visitor the waiting room admits lands on targetUrl
   * instead of back on this app, and nothing else says so: one warning in the log.
   */
  function checkReturnOrigin(asked) {
    let origin;
    try {
      origin = new URL(asked).origin;
    } catch (_) {
      return;
    }
    const seen = returnChecks.get(origin);
    if (seen === true || (seen !== undefined && Date.now() < seen)) return;
    if (seen === undefined && returnChecks.size >= RETURN_CHECK_ORIGINS_MAX) return;
    returnChecks.set(origin, true);
    const retry = () => returnChecks.set(origin, Date.now() + RETURN_CHECK_RETRY_MS);
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), timeoutMs);
    if (typeof timer.unref === 'function') timer.unref();
    fetch(`${queueUrl}/api/verify?${new URLSearchParams({ roomId, origin })}`, {
      headers: { Authorization: `Bearer ${key}`, Accept: 'application/json', 'User-Agent': `qm-node-connector/${VERSION}` },
      redirect: 'manual',
      signal: controller.signal,
    })
      .then((answer) => (answer.ok ? answer.json() : Promise.reject(new Error(`http-${answer.status}`))))
      .then((body) => {
        const room = body && typeof body === 'object' ? body.room : null;
        if (!room || typeof room !== 'object') return retry();
        if (room.exists === true && room.returnAllowed === false) {
          console.warn(
            `[qm] ${roomId}: the queue does not send visitors back to ${origin}: the room's targetUrl ` +
              `(${room.targetUrl}) and returnOrigins do not cover it, so everyone the waiting room admits lands ` +
              `on ${room.targetUrl} instead of this app. Add ${origin} to the room's returnOrigins, or make it the targetUrl.`,
          );
        }
        return undefined;
      })
      .catch(retry)
      .finally(() => clearTimeout(timer));
  }

  function failOpen(res, reason) {
    decorate(res, [], [['X-QM-Failover', reason]]);
    if (onFailOpen) {
      try {
        const r = onFailOpen({ reason, roomId });
        if (r && typeof r.catch === 'function') r.catch(() => {});
      } catch (_) {
        // a broken callback never turns a fail-open into an outage
      }
    }
    return true;
  }

  function queued(req, res, waitUrl, reason, wait) {
    res.statusCode = isNavigation(req) ? 302 : 503;
    res.setHeader('Cache-Control', 'no-store');
    res.setHeader('Vary', VARY);
    if (res.statusCode === 302) {
      res.setHeader('Location', waitUrl);
      res.setHeader('Content-Length', '0');
      res.end();
      return false;
    }
    const body = gatedWait(wait, waitUrl, roomId, reason);
    const text = JSON.stringify(body);
    res.setHeader('Content-Type', 'application/json');
    res.setHeader('X-QM-Queued', '1');
    res.setHeader('Retry-After', String(body.retryAfterSec));
    res.setHeader('Access-Control-Expose-Headers', EXPOSE);
    res.setHeader('Content-Length', String(Buffer.byteLength(text)));
    res.end(req.method === 'HEAD' ? undefined : text);
    return false;
  }

  async function check(req, res) {
    const asked = visitorUrl(req, trustProxy);
    checkReturnOrigin(asked);
    const { token: queryToken, clean } = handOff(asked);
    const cookies = parseCookies(req);
    const params = new URLSearchParams({
      roomId,
      url: clean,
      ip: clientIp(req, trustProxy),
      agent: (header(req, 'user-agent') || '').slice(0, 512),
    });
    if (queryToken) params.set('qm_token', queryToken);
    if (!isNavigation(req)) params.set('wait', '1'); // answered in JSON: the queue describes the wait
    const edgePass = cookies[`qmp_${roomId}`];
    if (edgePass && !queryToken) {
      const why = passes.refusal(edgePass, cookies[`qm_dk_${roomId}`]);
      if (why === null) {
        stats.local += 1;
        return true; // a valid pass bound to this visitor's door key: no round trip
      }
      stats.refused[why] = (stats.refused[why] || 0) + 1;
    }
    stats.checks += 1;
    const forward = [];
    for (const name of [`qm_${roomId}`, `qm_dk_${roomId}`, `qms_${roomId}`, `qmp_${roomId}`]) {
      if (cookies[name]) forward.push(`${name}=${cookies[name]}`);
    }
    const headers = {
      Authorization: `Bearer ${key}`,
      Accept: 'application/json',
      'User-Agent': `qm-node-connector/${VERSION}`,
    };
    if (forward.length) headers.Cookie = forward.join('; ');

    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
    let answer;
    let payload;
    try {
      answer = await fetch(`${queueUrl}/api/check?${params}`, {
        headers,
        redirect: 'manual',
        signal: controller.signal,
      });
      if (answer.status === 200 || answer.status === 403) {
        const text = await answer.text();
        try {
          payload = JSON.parse(text);
        } catch (_) {
          payload = undefined;
        }
      } else if (answer.body) {
        answer.body.cancel().catch(() => {});
      }
    } catch (_) {
      return failOpen(res, timedOut ? 'timeout' : 'unreachable');
    } finally {
      clearTimeout(timer);
    }

    if (answer.status === 429) {
      if (!warnedRateLimited) {
        warnedRateLimited = true;
        console.warn(
          `[qm] ${roomId}: the queue answered 429 (CHECK_LIMIT_PER_MIN spent): visitors go to the waiting room, not the app`,
        );
      }
      const waitUrl = `${queueUrl}/w/${encodeURIComponent(roomId)}?qm_return=${encodeURIComponent(clean)}`;
      return queued(req, res, waitUrl, 'rate_limited');
    }
    if (answer.status === 403 && payload && payload.code === 'access_blocked') {
      // one of the room's access rules refuses this request: never the app, never a fail-open
      stats.blocked += 1;
      res.statusCode = 403;
      res.setHeader('Cache-Control', 'no-store');
      res.setHeader('Vary', 'Accept');
      if (isNavigation(req)) {
        res.setHeader('Content-Type', 'text/html; charset=utf-8');
        res.end(
          '<!doctype html><html lang="en"><meta charset="utf-8"><meta name="robots" content="noindex">' +
            '<title>Access not allowed</title><h1>Access not allowed</h1><p>This site does not accept requests ' +
            "like yours here. If you think this is a mistake, contact the site's owner.</p>",
        );
      } else {
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify({ error: "This room's access rules do not allow this request.", code: 'access_blocked', roomId }));
      }
      return false;
    }
    if (answer.status < 200 || answer.status > 299) return failOpen(res, `http-${answer.status}`);
    if (!payload || typeof payload !== 'object') return failOpen(res, 'invalid-response');
    if (payload.admit === true) {
      if (typeof payload.edgePass === 'string') passes.watch();
      const relay = setCookieLines(answer.headers);
      const token = queryToken && TOKEN_SHAPE.test(queryToken) ? queryToken : null;
      if (token && payload.state === 'admitted' && req.method === 'GET' && isNavigation(req)) {
        // the waiting page's hand-off: keep the pass in a cookie, not in the app's URLs and logs
        relay.push(passCookie(roomId, token, clean.startsWith('https:')));
        decorate(res, relay, []);
        const path = clean.replace(/^https?:\/\/[^/]*/i, '') || '/';
        res.statusCode = 303;
        res.setHeader('Location', path);
        res.setHeader('Cache-Control', 'no-store');
        res.setHeader('Content-Length', '0');
        res.end();
        return false;
      }
      decorate(res, relay, []);
      return true;
    }
    if (payload.admit === false && httpUrl(payload.waitUrl)) {
      const reason = typeof payload.reason === 'string' ? payload.reason : 'waiting';
      return queued(req, res, payload.waitUrl, reason, payload.wait);
    }
    return failOpen(res, 'invalid-response');
  }

  async function gate(req, res) {
    if (!configured) {
      if (!warnedUnconfigured) {
        warnedUnconfigured = true;
        console.warn(
          '[qm] the Queue Manager connector is not configured (queueUrl, roomId and key are all needed): requests go to the app unqueued',
        );
      }
      return true;
    }
    try {
      if (skipsGate(req.method, target(req).split('?')[0], header(req, 'sec-fetch-dest'))) return true;
      return await check(req, res);
    } catch (err) {
      console.error('[qm] connector error, continuing to the app:', err);
      return true;
    }
  }

  /**
   * End this request's visitor's session at the queue (their order is complete, say): POST
   * /api/sessions/revoke with the door key and ticket of the request's cookies, or its edge pass. Resolves
   * true when a live session ended, false when there was none (or the queue could not be asked); never
   * rejects. The slot goes to the next visitor in line; this visitor's next page is the waiting room's.
   */
  async function revokeSession(req) {
    if (!configured || !req) return false;
    const cookies = parseCookies(req);
    const doorKey = cookies[`qm_dk_${roomId}`];
    const token = cookies[`qm_${roomId}`];
    const edgePass = cookies[`qmp_${roomId}`];
    let body;
    if (doorKey && TOKEN_SHAPE.test(doorKey)) {
      body = { roomId, doorKey };
      if (token && TOKEN_SHAPE.test(token)) body.token = token;
    } else if (edgePass && TOKEN_SHAPE.test(edgePass)) {
      body = { roomId, pass: edgePass };
    } else {
      return false;
    }
    if (edgePass) passes.forget(edgePass);
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), timeoutMs);
    try {
      const answer = await fetch(`${queueUrl}/api/sessions/revoke`, {
        method: 'POST',
        headers: {
          Authorization: `Bearer ${key}`,
          Accept: 'application/json',
          'Content-Type': 'application/json',
          'User-Agent': `qm-node-connector/${VERSION}`,
        },
        body: JSON.stringify(body),
        redirect: 'manual',
        signal: controller.signal,
      });
      const payload = await answer.json().catch(() => null);
      if (answer.status !== 200) {
        console.warn(`[qm] ${roomId}: the queue refused to end a session (${answer.status} ${payload && payload.code})`);
        return false;
      }
      return Boolean(payload && payload.revoked === true);
    } catch (err) {
      console.warn(`[qm] ${roomId}: could not end a session at the queue:`, err && err.message);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  gate.stats = stats;
  gate.revokeSession = revokeSession;
  /** Stop refreshing the revocation list (the timer never keeps the process alive anyway). */
  gate.close = passes.stop;
  gate.middleware = function middlewareOf() {
    const mw = (req, res, next) => {
      gate(req, res).then(
        (go) => {
          if (go) next();
        },
        () => next(),
      );
    };
    mw.revokeSession = revokeSession;
    return mw;
  };
  return gate;
}

/** Express/Connect middleware: app.use(middleware({queueUrl, roomId, key})). */
function middleware(options) {
  return createGate(options).middleware();
}

module.exports = { createGate, middleware, skipsGate, isNavigation, wantsJson, VERSION };
