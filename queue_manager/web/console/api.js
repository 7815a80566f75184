/* Requests to this server's /api/admin/*: credentials, CSRF header, errors, downloads and signing in. */
import { el, toast } from "./ui.js";
import { state } from "./state.js";

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status; this.code = body && body.code; this.body = body || {};
  }
}
async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (state.monitor) headers.Authorization = `Bearer ${state.monitor}`;
  else if (method !== "GET") headers["X-QM-CSRF"] = "1";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method, headers, credentials: "same-origin", cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const type = res.headers.get("content-type") || "";
  const data = type.includes("json") ? await res.json().catch(() => ({})) : await res.text();
  if (res.status === 401 && !path.endsWith("/session")) { signedOut(); throw new ApiError(401, data); }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}
async function download(path, filename) {
  const headers = state.monitor ? { Authorization: `Bearer ${state.monitor}` } : {};
  const res = await fetch(path, { headers, credentials: "same-origin", cache: "no-store" });
  if (!res.ok) { toast(`Export failed (${res.status})`, true); return; }
  const url = URL.createObjectURL(await res.blob());
  const a = el("a", { href: url, download: filename });
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 5000);
}
const fail = (err) => toast(err.code ? `${err.message} (${err.code})` : String(err.message || err), true);

async function signIn(key, quiet) {
  const res = await fetch("api/admin/session", {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-QM-CSRF": "1" },
    body: JSON.stringify({ key }),
  });
  const data = await res.json().catch(() => ({}));
  if (!res.ok) { if (!quiet) throw new ApiError(res.status, data); return null; }
  return data.principal;
}

// What a 401 (or a revoked stream) leads to: the signed-out screen, which the entry module (console.js) sets.
let onSignedOut = () => {};
function whenSignedOut(fn) { onSignedOut = fn; }
function signedOut() { onSignedOut(); }

export { api, download, fail, signedOut, signIn, whenSignedOut };
