'use strict';
/**
 * Queue Manager connector for Node (node:http, Express, Connect). Version __QM_CONNECTOR_VERSION__.
 *
 * Per request: a static subresource skips the check; anything else is a vouched door check
 * (GET {queueUrl}/api/check?roomId=&url=&ip=&agent= with Authorization: Bearer <key>), made for the
 * visitor and answered within timeoutMs. A pass continues to the app; the queue sends a navigation to
 * the waiting room (302) and answers anything else 503 + X-QM-Queued; a queue that cannot answer
 * fails open: the app answers, marked X-QM-Failover: <reason>. No runtime dependencies.
 */

const VERSION = '__QM_CONNECTOR_VERSION__';
const DEFAULT_TIMEOUT_MS = 2000;
const PASS_COOKIE_MAX_AGE_SEC = 86400; // the server's QUEUE_COOKIE_MAX_AGE_SEC default

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

/** Will a browser show the answer to a person? Fetch Metadata first, Accept: text/html without it. */
function isNavigation(req) {
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

function httpUrl(value) {
  return typeof value === 'string' && /^https?:\/\//i.test(value);
}

function passCookie(roomId, token, secure) {
  return `qm_${roomId}=${token}; Path=/; SameSite=Lax; Max-Age=${PASS_COOKIE_MAX_AGE_SEC}; HttpOnly` + (secure ? '; Secure' : '');
}

/**
 * createGate({queueUrl, roomId, key, timeoutMs, trustProxy, onFailOpen}) -> gate(req, res): Promise<boolean>.
 * true: continue to the app. false: the gate has answered (a redirect or the queued envelope).
 */
function createGate(options = {}) {
  const queueUrl = String(options.queueUrl || '').replace(/\/+$/, '');
  const roomId = options.roomId ? String(options.roomId) : '';
  const key = options.key ? String(options.key) : '';
  const timeoutMs = Number(options.timeoutMs) > 0 ? Number(options.timeoutMs) : DEFAULT_TIMEOUT_MS;
  const trustProxy = options.trustProxy;
  const onFailOpen = typeof options.onFailOpen === 'function' ? options.onFailOpen : null;
  const configured = Boolean(queueUrl && roomId && key);

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

  function queued(req, res, waitUrl, reason) {
    res.statusCode = isNavigation(req) ? 302 : 503;
    res.setHeader('Cache-Control', 'no-store');
    if (res.statusCode === 302) {
      res.setHeader('Location', waitUrl);
      res.setHeader('Content-Length', '0');
      res.end();
      return false;
    }
    const body = JSON.stringify({
      error: 'You are in the waiting room for this site; reload the page to see your place.',
      code: 'queued',
      roomId,
      reason,
      reload: true,
      waitUrl,
    });
    res.setHeader('Content-Type', 'application/json');
    res.setHeader('X-QM-Queued', '1');
    res.setHeader('Access-Control-Expose-Headers', EXPOSE);
    res.setHeader('Content-Length', String(Buffer.byteLength(body)));
    res.end(req.method === 'HEAD' ? undefined : body);
    return false;
  }

  async function check(req, res) {
    const asked = visitorUrl(req, trustProxy);
    const { token: queryToken, clean } = handOff(asked);
    const cookies = parseCookies(req);
    const params = new URLSearchParams({
      roomId,
      url: clean,
      ip: clientIp(req, trustProxy),
      agent: (header(req, 'user-agent') || '').slice(0, 512),
    });
    if (queryToken) params.set('qm_token', queryToken);
    const forward = [];
    for (const name of [`qm_${roomId}`, `qm_dk_${roomId}`, `qms_${roomId}`]) {
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
      if (answer.status === 200) {
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
    if (answer.status < 200 || answer.status > 299) return failOpen(res, `http-${answer.status}`);
    if (!payload || typeof payload !== 'object') return failOpen(res, 'invalid-response');
    if (payload.admit === true) {
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
      return queued(req, res, payload.waitUrl, typeof payload.reason === 'string' ? payload.reason : 'waiting');
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

  gate.middleware = function middlewareOf() {
    return (req, res, next) => {
      gate(req, res).then(
        (go) => {
          if (go) next();
        },
        () => next(),
      );
    };
  };
  return gate;
}

/** Express/Connect middleware: app.use(middleware({queueUrl, roomId, key})). */
function middleware(options) {
  return createGate(options).middleware();
}

module.exports = { createGate, middleware, skipsGate, isNavigation, VERSION };
