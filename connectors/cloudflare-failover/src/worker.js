/*! Queue Manager failover Worker __QM_CONNECTOR_VERSION__ - see README.md.
 * Routed at the hostname the queue answers on. Forwards every request to the queue; only when the queue
 * is unreachable, too slow, or answers a 503 that is not its own "still waiting" (X-QM-Queued) or
 * "closed" (X-QM-Closed), a document request gets this build's offline page: 503, Retry-After, no-store, noindex. */

const VERSION = "__QM_CONNECTOR_VERSION__";
const OFFLINE_HTML = "__QM_OFFLINE_HTML__";
// Longer than the queue's own PROXY_TIMEOUT_MS (30 s by default): a slow app behind an inline queue
// gets the queue's own 504, never the offline page. QM_TIMEOUT_MS overrides it.
const DEFAULT_TIMEOUT_MS = 35000;
const RETRY_AFTER_SEC = "30";
const BROWSING_DESTS = new Set(["document", "iframe", "frame", "object", "embed"]);

export function isDocument(request) {
  const mode = request.headers.get("sec-fetch-mode");
  const dest = request.headers.get("sec-fetch-dest");
  if (mode !== null || dest !== null) {
    return mode === "navigate" || (dest !== null && BROWSING_DESTS.has(dest.toLowerCase()));
  }
  return (request.headers.get("accept") || "").includes("text/html");
}

function offline(request, reason) {
  const headers = new Headers({
    "Retry-After": RETRY_AFTER_SEC,
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex",
    "X-QM-Failover": reason,
    "X-QM-Connector": `cloudflare-failover/${VERSION}`,
  });
  if (isDocument(request)) {
    headers.set("Content-Type", "text/html; charset=utf-8");
    return new Response(request.method === "HEAD" ? null : OFFLINE_HTML, { status: 503, headers });
  }
  headers.set("Content-Type", "text/plain; charset=utf-8");
  return new Response(request.method === "HEAD" ? null : "Service unavailable\n", { status: 503, headers });
}

function target(request, env) {
  if (!env.ORIGIN_URL) return request;
  const url = new URL(request.url);
  const origin = new URL(env.ORIGIN_URL);
  url.protocol = origin.protocol;
  url.host = origin.host;
  return new Request(url, request);
}

export default {
  async fetch(request, env, ctx) {
    const timeoutMs = Number(env.QM_TIMEOUT_MS) > 0 ? Number(env.QM_TIMEOUT_MS) : DEFAULT_TIMEOUT_MS;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    let response;
    try {
      // the timeout covers the answer's head only: a long stream (the waiting page's /events) is never cut
      response = await fetch(target(request, env), { signal: abort.signal, redirect: "manual" });
    } catch (e) {
      return offline(request, abort.signal.aborted ? "timeout" : "unreachable");
    } finally {
      clearTimeout(timer);
    }
    // 503 alone is never enough: a healthy queue answers 503 + X-QM-Queued to a visitor still waiting, and
    // 503 + X-QM-Closed with a closed room's page. 502/504 mean the queue is up and the site behind it is
    // down: the queue's own answer stands.
    if (response.status === 503 && !response.headers.has("x-qm-queued") && !response.headers.has("x-qm-closed")) {
      await response.body?.cancel();
      return offline(request, "http-503");
    }
    return response;
  },
};
