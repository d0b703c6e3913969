// The Connect protocol (JSON) against the coordinator's API, and the
// dashboard session endpoints.

let csrf = '';
let onUnauthenticated = () => {};

export function setCsrf(token) {
  csrf = token || '';
}

export function getCsrf() {
  return csrf;
}

// setUnauthenticatedHandler is called when a call finds the session gone.
export function setUnauthenticatedHandler(fn) {
  onUnauthenticated = fn;
}

export class ApiError extends Error {
  constructor(code, message, status) {
    super(message || code || 'request failed');
    this.code = code || 'unknown';
    this.status = status || 0;
  }
  get unauthenticated() {
    return this.status === 401 || this.code === 'unauthenticated';
  }
}

const codeByStatus = {
  400: 'invalid_argument',
  401: 'unauthenticated',
  403: 'permission_denied',
  404: 'unimplemented',
  408: 'deadline_exceeded',
  409: 'aborted',
  412: 'failed_precondition',
  429: 'unavailable',
  502: 'unavailable',
  503: 'unavailable',
  504: 'unavailable',
};

async function errorOf(res) {
  let body = null;
  try {
    body = await res.json();
  } catch (_) {
    // not JSON
  }
  const code = (body && body.code) || codeByStatus[res.status] || 'unknown';
  const message = (body && (body.message || body.error)) || `${res.status} ${res.statusText || code}`;
  return fail(new ApiError(code, message, res.status));
}

function fail(err) {
  if (err.unauthenticated) onUnauthenticated(err);
  return err;
}

function networkError(e) {
  if (e && e.name === 'AbortError') return e;
  return new ApiError('unavailable', `cannot reach the coordinator: ${e && e.message ? e.message : e}`, 0);
}

function headers(contentType) {
  const h = { 'Content-Type': contentType, 'Connect-Protocol-Version': '1' };
  if (csrf) h['Corpus-CSRF'] = csrf;
  return h;
}

// unary calls a procedure ("corpus.v1.GuestService/ListGuests") and
// returns its response message.
export async function unary(procedure, request, signal) {
  let res;
  try {
    res = await fetch('/' + procedure, {
      method: 'POST',
      credentials: 'same-origin',
      headers: headers('application/json'),
      body: JSON.stringify(request || {}),
      signal,
    });
  } catch (e) {
    throw networkError(e);
  }
  if (res.status !== 200) throw await errorOf(res);
  return res.json();
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function envelope(message) {
  const payload = encoder.encode(JSON.stringify(message || {}));
  const buf = new Uint8Array(5 + payload.length);
  new DataView(buf.buffer).setUint32(1, payload.length, false);
  buf.set(payload, 5);
  return buf;
}

// stream calls a server-streaming procedure, calling onMessage with each
// message; it resolves when the stream ends well and rejects with an
// ApiError when it ends with one. Abort signal to stop early (the
// promise then rejects with an AbortError).
export async function stream(procedure, request, onMessage, signal) {
  let res;
  try {
    res = await fetch('/' + procedure, {
      method: 'POST',
      credentials: 'same-origin',
      headers: headers('application/connect+json'),
      body: envelope(request),
      signal,
    });
  } catch (e) {
    throw networkError(e);
  }
  if (res.status !== 200) throw await errorOf(res);
  const reader = res.body.getReader();
  let buf = new Uint8Array(0);
  try {
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        throw networkError(e);
      }
      if (chunk.done) break;
      const joined = new Uint8Array(buf.length + chunk.value.length);
      joined.set(buf, 0);
      joined.set(chunk.value, buf.length);
      buf = joined;
      while (buf.length >= 5) {
        const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
        const flags = view.getUint8(0);
        const len = view.getUint32(1, false);
        if (buf.length < 5 + len) break;
        const text = decoder.decode(buf.subarray(5, 5 + len));
        buf = buf.slice(5 + len);
        const msg = text ? JSON.parse(text) : {};
        if (flags & 0x02) {
          if (msg && msg.error) {
            throw fail(new ApiError(msg.error.code, msg.error.message, 200));
          }
          return;
        }
        onMessage(msg);
      }
    }
  } finally {
    try {
      reader.releaseLock();
    } catch (_) {
      // already released
    }
  }
  throw new ApiError('unavailable', 'the stream ended early', 200);
}

// base64Bytes decodes a bytes field of proto3 JSON (base64).
export function base64Bytes(s) {
  if (!s) return new Uint8Array(0);
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

async function sessionCall(method, path, body) {
  let res;
  try {
    const h = {};
    if (body) h['Content-Type'] = 'application/json';
    if (method !== 'GET' && csrf) h['Corpus-CSRF'] = csrf;
    res = await fetch(path, {
      method,
      credentials: 'same-origin',
      headers: h,
      body: body ? JSON.stringify(body) : undefined,
    });
  } catch (e) {
    throw networkError(e);
  }
  if (res.status === 204) return null;
  let data = null;
  try {
    data = await res.json();
  } catch (_) {
    // not JSON
  }
  if (!res.ok) {
    const message = (data && (data.error || data.message)) || `${res.status} ${res.statusText}`;
    throw new ApiError('failed', message, res.status);
  }
  return data;
}

// getSession returns the session, or null when not logged in.
export async function getSession() {
  try {
    return await sessionCall('GET', '/ui/session');
  } catch (e) {
    if (e.status === 401) return null;
    throw e;
  }
}

export function login(body) {
  return sessionCall('POST', '/ui/session', body);
}

export function logout() {
  return sessionCall('POST', '/ui/logout');
}
