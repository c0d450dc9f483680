// The console's one way to the hub: its public JSON API, same origin, with the signed-in user's
// token. The session (token, refresh token, expiry) lives in sessionStorage: it ends with the tab,
// and nothing but this origin's scripts (the page's CSP allows no other) can read it.

const KEY = 'device-hub.console.session';
/** Refresh this long before the token expires, ms. */
const EARLY_MS = 60_000;

/** An answer of the API's one error shape: `error`, `message`, `details`, `request_id`. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message ?? `The hub answered ${status}.`);
    this.status = status;
    this.body = body;
  }
}

export const session = {
  /** `{ token, refresh, expiresAt, nick, prn, admin }` or null. */
  get() {
    try {
      return JSON.parse(sessionStorage.getItem(KEY) ?? 'null');
    } catch {
      return null;
    }
  },
  set(value) {
    if (value) sessionStorage.setItem(KEY, JSON.stringify(value));
    else sessionStorage.removeItem(KEY);
    window.dispatchEvent(new Event('hub-session'));
  },
  update(patch) {
    const current = session.get();
    if (current) session.set({ ...current, ...patch });
  },
};

/** Logs in (POST /auth/login) and keeps the session; asks whether the account is an admin. */
export async function signIn(username, password) {
  const login = await request('POST', '/auth/login', { username, password }, { anonymous: true });
  session.set({
    token: login.token,
    refresh: login.refresh_token ?? '',
    expiresAt: Date.now() + login.expires_in * 1000,
    nick: login.nick,
    prn: login.prn,
    admin: false,
  });
  // Admins may list every account; anyone else is refused (403): that is how the console knows.
  try {
    await request('GET', '/auth/accounts?asadmin=yes&limit=1');
    session.update({ admin: true });
  } catch {}
}

export function signOut() {
  session.set(null);
}

let refreshing = null;
/** Swaps the refresh token for a new pair (POST /auth/token/refresh), once at a time. */
async function refresh() {
  const current = session.get();
  if (!current?.refresh) return false;
  refreshing ??= request(
    'POST',
    '/auth/token/refresh',
    { refresh_token: current.refresh },
    { anonymous: true },
  )
    .then((r) => {
      session.update({
        token: r.token,
        refresh: r.refresh_token,
        expiresAt: Date.now() + r.expires_in * 1000,
      });
      return true;
    })
    .catch(() => false)
    .finally(() => {
      refreshing = null;
    });
  return refreshing;
}

/**
 * One call of the API: JSON in and out, the session's bearer token unless `anonymous`. A token
 * about to expire is refreshed first; a 401 is tried once more after a refresh, then ends the
 * session. Throws ApiError for any answer that is not 2xx.
 */
export async function request(method, path, body, { anonymous = false } = {}) {
  if (!anonymous) {
    const current = session.get();
    if (current && current.expiresAt - Date.now() < EARLY_MS) await refresh();
  }
  const send = () => {
    const headers = { accept: 'application/json' };
    const token = anonymous ? '' : session.get()?.token;
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    return fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  };
  let response = await send();
  if (response.status === 401 && !anonymous && session.get()) {
    if (await refresh()) response = await send();
    if (response.status === 401) session.set(null);
  }
  const text = await response.text();
  let data = null;
  if (text && (response.headers.get('content-type') ?? '').includes('json')) data = JSON.parse(text);
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/** A query string of the values that are set: `?a=1&b=x`, or ''. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params))
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const enc = encodeURIComponent;
