// Authentication and authorisation as small Koa middleware: a bearer JWT verified by koa-jwt
// (ES256 only, our issuer, an audience we serve), then scope checks per route (both installed by the
// route registry from a route's declared `security` and `scopes`).
import type { Middleware } from 'koa';
import koaJwt from 'koa-jwt';
import { LRUCache } from 'lru-cache';
import { accountPrn, accountStream, accounts, isAdminNick } from '../../domain/accounts.ts';
import { appStream, apps } from '../../domain/apps.ts';
import { load } from '../../infra/eventstore/aggregate.ts';
import type { EventStore } from '../../infra/eventstore/port.ts';
import { forbidden, HttpError, unauthorized } from '../errors.ts';
import { chargeTokenBucket } from '../http.ts';
import type { ScopeRequirement } from '../routes.ts';
import type { Keys } from './keys.ts';
import {
  APP_PRN,
  type Claims,
  changedSinceLogin,
  grantingScopes,
  grants,
  HUB_AUDIENCE,
  ISSUER,
  SERVICE_PRN,
} from './tokens.ts';

declare module 'koa' {
  interface DefaultState {
    /** The verified claims of the bearer token. */
    auth?: Claims;
  }
}

/**
 * Tokens already verified, until they expire: verification costs a signature check, and devices
 * present the same token for an hour of requests. A token is an immutable signed value, so a cached
 * verdict stays true until `exp`. Bounded; shared by every route of the process.
 */
const verifiedByKey = new WeakMap<Keys, LRUCache<string, Claims>>();
const USER_PRN_PREFIX = accountPrn('');
const GRANT_ENDED = "The user's password changed since this token was granted: ask for a new grant.";

/**
 * Verifies the bearer token; 401 (in the error shape, with WWW-Authenticate) when it does not hold.
 * A token issued to an app (/auth/authorize) holds only while the app does: deleting the app ends
 * its tokens at once (one load of the app's state, cached in this process, per such request).
 */
/** `cacheEntries`: HUB_CALLER_CACHE_ENTRIES (the first call for a key sizes its cache). */
export function authenticate(keys: Keys, store: EventStore, cacheEntries = 100_000): Middleware {
  // Per signing key: a verdict under one key says nothing under another.
  let verified = verifiedByKey.get(keys);
  if (!verified) {
    verified = new LRUCache({ max: cacheEntries });
    verifiedByKey.set(keys, verified);
  }
  const cache = verified;
  /** Whether the token was issued to an app that is gone (made once, not per request). */
  const appGone = async (claims: Claims) => {
    const aud = String(claims.aud);
    if (!APP_PRN.test(aud)) return false;
    const { state } = await load(store, appStream(aud.slice('prn:::apps:/'.length)), apps);
    return !state.id || state.deleted !== 0;
  };
  /** When each account last changed its password (ms), read at most once a second each. */
  const passwordChanges = new LRUCache<string, { readAt: number; changed: number }>({ max: cacheEntries });
  /** Whether a grant (a token delegated to a service or issued to an app) was issued before its
   * user's last password change, which ends grants as it ends logins. */
  const grantEnded = async (claims: Claims) => {
    if (claims.aud === HUB_AUDIENCE || !claims.sub.startsWith(USER_PRN_PREFIX)) return false;
    const id = claims.sub.slice(USER_PRN_PREFIX.length);
    let known = passwordChanges.get(id);
    if (!known || Date.now() - known.readAt > 1000) {
      const { state } = await load(store, accountStream(id), accounts);
      known = { readAt: Date.now(), changed: state.passwordChanged };
      passwordChanges.set(id, known);
    }
    return changedSinceLogin(known.changed, claims);
  };
  const verify = koaJwt({
    secret: keys.publicPem,
    algorithms: ['ES256'],
    issuer: ISSUER,
    audience: [HUB_AUDIENCE, SERVICE_PRN, APP_PRN],
    key: 'auth',
    debug: true,
    cookie: undefined,
  } as Parameters<typeof koaJwt>[0]);
  return async (ctx, next) => {
    const header = ctx.get('Authorization');
    // A request whose token fails is charged to its address: guessing tokens is rate limited too.
    const refuse = async (message: string) => {
      await chargeTokenBucket(ctx, `address:${ctx.ip}`);
      return unauthorized(message);
    };
    if (!/^Bearer\s+\S+$/i.test(header))
      throw await refuse('Send a bearer token: Authorization: Bearer <token>.');
    const token = header.slice(7).trim();
    const known = cache.get(token);
    if (known && known.exp * 1000 > Date.now()) {
      if (await appGone(known)) throw await refuse('The app this token was issued to was deleted.');
      if (await grantEnded(known)) throw await refuse(GRANT_ENDED);
      ctx.state.auth = known;
      ctx.state.caller = known.sub;
      await chargeTokenBucket(ctx, `account:${known.sub}`);
      return next();
    }
    try {
      await verify(ctx, async () => {});
    } catch (err) {
      const e = err as { status?: number; message?: string };
      if (e.status === 401) throw await refuse(`Invalid token: ${e.message ?? 'not accepted'}.`);
      throw err;
    }
    const claims = ctx.state.auth as Claims;
    if (typeof claims?.sub !== 'string' || !Array.isArray(claims.scopes))
      throw await refuse('Invalid token: claims missing.');
    if (await appGone(claims)) throw await refuse('The app this token was issued to was deleted.');
    if (await grantEnded(claims)) throw await refuse(GRANT_ENDED);
    cache.set(token, claims);
    ctx.state.caller = claims.sub;
    await chargeTokenBucket(ctx, `account:${claims.sub}`);
    await next();
  };
}

/** The token must grant `service` for reading or writing: the `scopes` a route declares, which the
 * registry checks after the token (403 naming the scopes that would) and /openapi.json publishes. */
export function requireScope(service: string, mode: 'read' | 'write'): ScopeRequirement {
  return {
    granting: grantingScopes(service, mode),
    check: async (ctx, next) => {
      const claims = ctx.state.auth!;
      if (!grants(claims.scopes, service, mode)) {
        const needed =
          mode === 'write'
            ? `${service}.write (or ${service}, api)`
            : `${service}.readonly (or a write scope)`;
        throw forbidden(`The token lacks the scope ${needed}.`);
      }
      await next();
    },
  };
}

/** An admin's own login token: a USER's first-party token, not acting for anyone, whose nick
 * HUB_ADMINS lists. Device and service nicks live elsewhere or are chosen freely, so the nick alone
 * proves nothing. */
export const isAdminToken = (admins: readonly string[], c: Claims) =>
  c.type === 'USER' && c.aud === HUB_AUDIENCE && !c.act && isAdminNick(admins, c.nick);

/** Admins only (isAdminToken; 403 otherwise). Their login tokens grant `*`, the scope /openapi.json
 * publishes for such a route. */
export function requireAdmin(admins: readonly string[]): ScopeRequirement {
  return {
    granting: ['*'],
    check: async (ctx, next) => {
      if (!isAdminToken(admins, ctx.state.auth!))
        throw forbidden("Only admins may do this (an admin's own login token).");
      await next();
    },
  };
}

/** First-party tokens only (from login), not tokens delegated to a service or an app. */
export const requireFirstParty: Middleware = async (ctx, next) => {
  if (ctx.state.auth!.aud !== HUB_AUDIENCE)
    throw forbidden('This operation needs a token from login, not a delegated token.');
  await next();
};

export function requireAccountType(...types: Claims['type'][]): Middleware {
  return async (ctx, next) => {
    if (!types.includes(ctx.state.auth!.type)) {
      throw new HttpError(403, 'forbidden', `Only ${types.join(' or ')} accounts may do this.`);
    }
    await next();
  };
}
