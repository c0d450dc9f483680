// Logins and what they grant: the refresh-token family of a login (stream refresh-<family>), the
// single-use access code a user grants a service (stream code-<sha256 of the code>), and the scopes
// an app is granted by implicit authorize. Pure: no I/O, no HTTP, no keys; a refusal is a
// DomainError. Checking a password, hashing a token and signing one are the caller's: it passes
// their results in the command.
import { type AccountState, isAdminNick } from './accounts.ts';
import { refuse } from './errors.ts';
import type { DomainEvent, EventData, FoldedEvent } from './events.ts';

// ---------------------------------------------------------------- logging in

/** One answer for every credential that does not hold, whether the account exists or not. */
const WRONG_CREDENTIALS = 'Wrong username or password.';

/** The credentials of a login hold: an account, its password (checked by the caller, scrypt), and
 * a registration that did not expire. Else 401 invalid_credentials. */
export function refuseWrongCredentials(
  account: AccountState | undefined,
  passwordHolds: boolean,
): asserts account is AccountState {
  if (!account || !passwordHolds || account.expired)
    throw refuse.unauthorized(WRONG_CREDENTIALS, 'invalid_credentials');
}

export interface RefreshFamily {
  /** When the login happened (ms). */
  issued: number;
  accountId: string;
  actingAs: string | undefined;
  current: string;
  expires: number;
  spent: Set<string>;
  revoked: boolean;
}

export const refreshStream = (family: string) => `refresh-${family}`;

export const refreshFamilies = {
  snapshot: { kind: 'refresh-family', shape: 1 },
  initial: (): RefreshFamily => ({
    issued: 0,
    accountId: '',
    actingAs: undefined,
    current: '',
    expires: 0,
    spent: new Set(),
    revoked: false,
  }),
  evolve(f: RefreshFamily, e: FoldedEvent): RefreshFamily {
    switch (e.type) {
      case 'RefreshTokenIssued':
        return {
          ...f,
          issued: e.created,
          accountId: e.data.account_id,
          actingAs: e.data.acting_as ?? undefined,
          current: e.data.token_hash,
          expires: e.data.expires,
        };
      case 'RefreshTokenRotated':
        return {
          ...f,
          spent: new Set(f.spent).add(f.current),
          current: e.data.token_hash,
          expires: e.data.expires,
        };
      case 'RefreshFamilyRevoked':
        return { ...f, revoked: true };
      default:
        return f;
    }
  },
};

export interface StartLogin {
  /** The new family's id. */
  family: string;
  /** The account whose credentials hold (refuseWrongCredentials). */
  account: AccountState;
  /** An admin logging in as another user (`<admin>==><target>`): the name given, and the account
   * it names if any. */
  as?: { name: string; account: AccountState | undefined };
  /** HUB_ADMINS. */
  admins: readonly string[];
  /** The first refresh token, hashed. */
  tokenHash: string;
  /** When the family's refresh tokens stop working, ms: rotating them does not extend it. */
  expires: number;
}

/**
 * A login session starts: the first refresh token of a new family. The account must be verified
 * (403 account_pending). An admin may log in as another user: a user (not a service), verified
 * too; the family belongs to the admin, acting as the user.
 */
export function decideStartLogin(c: StartLogin, f: RefreshFamily): DomainEvent<'RefreshTokenIssued'>[] {
  if (!c.account.active)
    throw refuse.forbidden(
      'Verify your email address first: follow the link in the email sent after registration.',
      'account_pending',
    );
  if (c.as) {
    if (c.account.type !== 'USER' || !isAdminNick(c.admins, c.account.nick))
      throw refuse.forbidden('Only admins may log in as another user.');
    // Another user, as the spec says: not a service, and not an account that cannot log in itself.
    if (c.as.account?.type !== 'USER') throw refuse.notFound(`No user named ${c.as.name}.`);
    if (!c.as.account.active)
      throw refuse.forbidden(`${c.as.name} has not verified the account's email yet.`, 'account_pending');
  }
  if (f.accountId) throw refuse.conflict('This login exists already.');
  return [
    {
      type: 'RefreshTokenIssued',
      data: {
        family: c.family,
        account_id: c.account.id,
        token_hash: c.tokenHash,
        expires: c.expires,
        acting_as: c.as?.account?.id ?? null,
      },
    },
  ];
}

export interface RotateRefreshToken {
  /** The refresh token presented, hashed. */
  presentedHash: string;
  /** Its successor, hashed. */
  nextHash: string;
  now: number;
}

/**
 * A refresh token is swapped for the next. Each works once: one presented again was stolen, or
 * its thief has it, so the whole family (every refresh token of that login) is revoked
 * (RefreshFamilyRevoked; the caller answers refusedAsReused). The family's expiry stays where the
 * login set it.
 */
export function decideRotateRefreshToken(
  c: RotateRefreshToken,
  f: RefreshFamily,
): DomainEvent<'RefreshTokenRotated' | 'RefreshFamilyRevoked'>[] {
  if (!f.accountId) throw refuse.unauthorized('Unknown refresh token.');
  if (f.revoked) throw refuse.unauthorized('This login was revoked; log in again.');
  if (c.presentedHash !== f.current) {
    if (!f.spent.has(c.presentedHash)) throw refuse.unauthorized('Unknown refresh token.');
    return [{ type: 'RefreshFamilyRevoked', data: { reason: 'a spent refresh token was presented again' } }];
  }
  if (f.expires < c.now) throw refuse.unauthorized('This refresh token has expired; log in again.');
  return [{ type: 'RefreshTokenRotated', data: { token_hash: c.nextHash, expires: f.expires } }];
}

/** The answer to a refresh token presented again, once its family is revoked. */
export const refusedAsReused = () =>
  refuse.unauthorized('This refresh token was used before: the login is revoked; log in again.');

/**
 * After a rotation, the login still holds: its account may log in, an admin acting in it still is
 * one, and the password (the admin's, when one acts) has not changed since the login.
 */
export function refuseEndedLogin(
  f: RefreshFamily,
  login: { account: AccountState | undefined; actor: AccountState | undefined; admins: readonly string[] },
): void {
  const { account, actor } = login;
  if (!account?.active || (actor && !isAdminNick(login.admins, actor.nick)))
    throw refuse.unauthorized('The account can no longer log in.');
  if ((actor ?? account).passwordChanged > f.issued)
    throw refuse.unauthorized('The password changed since this login; log in again.');
}

// ---------------------------------------------------------------- access codes

export interface Grant
  extends Pick<EventData['AccessCodeIssued'], 'account_id' | 'service' | 'scopes' | 'expires'> {
  /** When the code was granted (ms; the event's time). */
  issued: number;
}

export interface AccessCode {
  grant: Grant | undefined;
  redeemed: boolean;
}

/** The code's stream, named by its hash: the code itself is a secret. */
export const codeStream = (codeHash: string) => `code-${codeHash}`;

export const codes = {
  snapshot: { kind: 'access-code', shape: 1 },
  initial: (): AccessCode => ({ grant: undefined, redeemed: false }),
  evolve(c: AccessCode, e: FoldedEvent): AccessCode {
    switch (e.type) {
      case 'AccessCodeIssued': {
        const { account_id, service, scopes, expires } = e.data;
        return { ...c, grant: { account_id, service, scopes, expires, issued: e.created } };
      }
      case 'AccessCodeRedeemed':
        return { ...c, redeemed: true };
      default:
        return c;
    }
  },
};

export interface IssueAccessCode {
  /** The user granting, by the login of its token. */
  user: AccountState | undefined;
  /** The account the service's PRN names, if any. */
  service: AccountState | undefined;
  /** Parsed and checked as scope names by the caller. */
  scopes: string[];
  expires: number;
}

/** A user grants a service scopes on its behalf: a single-use code, for a short while. */
export function decideIssueAccessCode(
  c: IssueAccessCode,
  code: AccessCode,
): DomainEvent<'AccessCodeIssued'>[] {
  if (c.service?.type !== 'SERVICE')
    throw refuse.invalid('No such service.', [{ field: 'service', problem: 'is not a registered service' }]);
  if (!c.user) throw refuse.unauthorized('The account of this token no longer exists.');
  if (code.grant) throw refuse.conflict('This access code exists already.');
  return [
    {
      type: 'AccessCodeIssued',
      data: {
        account_id: c.user.id,
        account_prn: c.user.prn,
        service: c.service.prn,
        scopes: c.scopes,
        expires: c.expires,
      },
    },
  ];
}

export interface RedeemAccessCode {
  /** The PRN of the service presenting the code (its own token's subject). */
  service: string;
  now: number;
}

/** The service swaps the code for a delegated token: once, before it expires, and only the
 * service the code names. */
export function decideRedeemAccessCode(
  c: RedeemAccessCode,
  code: AccessCode,
): DomainEvent<'AccessCodeRedeemed'>[] {
  if (!code.grant) throw refuse.unauthorized('Unknown access code.');
  if (code.redeemed) throw refuse.unauthorized('This access code was used already.');
  if (code.grant.expires < c.now) throw refuse.unauthorized('This access code has expired.');
  if (code.grant.service !== c.service)
    throw refuse.forbidden('This access code was issued to another service.');
  return [{ type: 'AccessCodeRedeemed', data: { service: c.service } }];
}

/** The grant of a redeemed code still holds: the user may log in, and has not changed the
 * password since granting (a new password ends grants as it ends logins). */
export function refuseEndedGrant(user: AccountState | undefined, grant: Grant): void {
  if (!user?.active) throw refuse.unauthorized('The account that granted this code can no longer log in.');
  if (user.passwordChanged > grant.issued)
    throw refuse.unauthorized("The user's password changed since this code was granted: ask for a new one.");
}

// ---------------------------------------------------------------- apps (implicit authorize)

/** What implicit authorize reads of an app (domain of its own: the apps aggregate). */
export interface AuthorizedApp {
  id: string;
  deleted: number;
  fields: { redirect_uris: string[]; scopes: { id: string }[] };
}

export interface AuthorizeApp {
  redirectUri: string;
  /** The scopes asked for; all the app declares when none are. */
  scopes: string[] | undefined;
}

/** The scopes a user grants an app by implicit authorize: the app exists, the redirect URI is one
 * registered for it exactly, and it asks only scopes it declares (one declaring none gets none). */
export function decideAppScopes(c: AuthorizeApp, app: AuthorizedApp): string[] {
  if (!app.id || app.deleted)
    throw refuse.invalid('No such app.', [{ field: 'client_id', problem: 'is not a registered app' }]);
  if (!app.fields.redirect_uris.includes(c.redirectUri))
    throw refuse.invalid('The redirect URI is not one registered for this app.', [
      { field: 'redirect_uri', problem: 'does not match' },
    ]);
  const declared = app.fields.scopes.map((s) => s.id);
  const asked = c.scopes ?? declared;
  const extra = asked.find((s) => !declared.includes(s));
  if (extra)
    throw refuse.invalid(`The app does not declare the scope ${extra}.`, [
      { field: 'scope', problem: `${extra} is not declared by the app` },
    ]);
  return asked;
}
