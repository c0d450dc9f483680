// JWTs: what they claim, how they are signed (jose, ES256) and how scopes are granted.
import { randomUUID } from 'node:crypto';
import { SignJWT } from 'jose';
import type { AccountType } from '../../domain/accounts.ts';
import type { Keys } from './keys.ts';

export const ISSUER = 'device-hub';
/** The audience of first-party tokens (login, refresh). Delegated and app tokens name the service or app. */
export const HUB_AUDIENCE = 'device-hub';
export const SERVICE_PRN = /^prn:[^:/]*:auth:\/[A-Za-z0-9._-]+$/;
export const APP_PRN = /^prn:::apps:\/[A-Za-z0-9_-]+$/;

export interface Claims {
  iss: string;
  /** The account the token authenticates (a PRN). */
  sub: string;
  aud: string;
  iat: number;
  exp: number;
  jti: string;
  nick: string;
  type: AccountType;
  scopes: string[];
  /** When the login that started this chain of refreshes happened (bounds GET /auth/login). */
  orig_iat: number;
  /** The same in milliseconds: a password change (a device's secret rotation) ends the logins made
   * before it to the millisecond. Absent from tokens signed before it was added. */
  orig_ms?: number;
  /** Impersonation: the admin acting as `sub` (RFC 8693 actor claim). */
  act?: { sub: string; nick: string };
  /** The service or app holding a delegated token. */
  azp?: string;
  /** The login (its refresh tokens' family) a login token belongs to: once that login is revoked,
   * GET /auth/login refreshes the token no more. */
  sid?: string;
}

export type ClaimsInput = Omit<Claims, 'iss' | 'iat' | 'exp' | 'jti' | 'orig_iat'> & { orig_iat?: number };

/** When the login a token descends from was made, ms; a token without `orig_ms` counts from the
 * start of its second, so that a change within that second ends it too. */
export const loginMs = (c: Pick<Claims, 'orig_iat' | 'orig_ms'>) => c.orig_ms ?? c.orig_iat * 1000;

/** Whether a credential change at `changedMs` (a password, a device's secret) ends the login of
 * these claims: it does for every login not made after it. */
export const changedSinceLogin = (changedMs: number, c: Pick<Claims, 'orig_iat' | 'orig_ms'>) =>
  changedMs > 0 && changedMs >= loginMs(c);

export async function signToken(
  keys: Keys,
  input: ClaimsInput,
  ttlSeconds: number,
): Promise<{ token: string; claims: Claims }> {
  const now = Date.now();
  const iat = Math.floor(now / 1000);
  const claims: Claims = {
    ...input,
    iss: ISSUER,
    iat,
    exp: iat + ttlSeconds,
    jti: randomUUID(),
    orig_iat: input.orig_iat ?? iat,
    // A refresh carries its login's time on; a token carried on from before orig_ms keeps none.
    ...(input.orig_iat === undefined ? { orig_ms: now } : {}),
  };
  const token = await new SignJWT({ ...claims })
    .setProtectedHeader({ alg: 'ES256', kid: keys.kid, typ: 'JWT' })
    .sign(keys.privateKey);
  return { token, claims };
}

/**
 * Scope names: `*` (everything), `api` and `api.readonly` (every service), and per service
 * `<service>`, `<service>.readonly`, `<service>.write` (apps, devices, profiles, trails, webhooks; /auth
 * has none: its operations on one's identity need a first-party token).
 * Reads accept any of them; writes need `*`, `api`, `<service>` or `<service>.write`.
 */
export function grants(scopes: string[], service: string, mode: 'read' | 'write'): boolean {
  const granting = grantingScopes(service, mode);
  return scopes.some((s) => granting.includes(s));
}

/** The scopes of which a token needs one to read or write `service`: what `grants` checks and
 * what /openapi.json publishes as each operation's alternatives. */
export function grantingScopes(service: string, mode: 'read' | 'write'): string[] {
  const write = ['*', 'api', service, `${service}.write`];
  return mode === 'write' ? write : [...write, 'api.readonly', `${service}.readonly`];
}

/** Parses a requested scope string: `*`, or names separated by spaces or commas. */
export function parseScopes(raw: string): string[] {
  return [...new Set(raw.split(/[\s,]+/).filter(Boolean))];
}

export const SCOPE_NAME = /^(\*|api(\.readonly)?|[a-z][a-z0-9_-]*(\.(readonly|write))?)$/;
