// Calls to the admin API. The admin cookie set at login rides along (same
// origin); every failure becomes an APIError whose message is shown in the
// page in words: the server's own message when it sent one.

export class APIError extends Error {
  constructor(status, code, message, problems = []) {
    super(message);
    this.status = status;
    this.code = code;
    /** Each invalid field of a refused change ("name: must not be empty"), when the server listed them. */
    this.problems = problems;
  }
}

/** Fired on window when the admin API answers 401 (signed out or token changed). */
export const UNAUTHORIZED = "fmgate:unauthorized";

function url(path, params) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== "" && v != null) u.searchParams.set(k, String(v));
  }
  return u;
}

async function send(path, init) {
  let resp;
  try {
    resp = await fetch(path, { credentials: "same-origin", ...init, headers: { Accept: "application/json", ...(init.headers || {}) } });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new APIError(0, "network", `Could not reach the gateway: ${e.message}.`);
  }
  const text = await resp.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  const name = path instanceof URL ? path.pathname : String(path);
  if (!resp.ok) {
    if (resp.status === 401) window.dispatchEvent(new Event(UNAUTHORIZED));
    const msg = body?.error?.message || text.trim().slice(0, 300) || resp.statusText;
    const code = body?.error?.code || `http_${resp.status}`;
    if (resp.status === 404 && !body?.error) {
      throw new APIError(404, "not_found", `${name} is not available on this gateway (HTTP 404).`);
    }
    const problems = Array.isArray(body?.error?.problems) ? body.error.problems.map(String) : [];
    throw new APIError(resp.status, code, `${name}: ${msg} (HTTP ${resp.status})`, problems);
  }
  if (body == null) throw new APIError(resp.status, "bad_response", `${name}: the answer is not JSON.`);
  return body;
}

/** GET path?params as JSON; empty params are left out. */
export function get(path, params, signal) {
  return send(url(path, params), { signal });
}

/** POST a JSON body. */
export function post(path, body, signal) {
  return send(url(path), { method: "POST", body: JSON.stringify(body), signal, headers: { "Content-Type": "application/json" } });
}

/** PATCH a JSON body. */
export function patch(path, body, signal) {
  return send(url(path), { method: "PATCH", body: JSON.stringify(body), signal, headers: { "Content-Type": "application/json" } });
}

/** DELETE path (no body). */
export function del(path, signal) {
  return send(url(path), { method: "DELETE", signal });
}

/** The message to show for an error thrown by get/post (or anything else). */
export function message(e) {
  if (e instanceof APIError) return e.message;
  return `Unexpected error: ${e && e.message ? e.message : e}`;
}
