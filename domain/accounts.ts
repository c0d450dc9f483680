// The account aggregate (stream account-<id>): its state folded from its events, and a named
// decision per command of registration and recovery. Pure: no I/O, no HTTP, no keys; a refusal is
// a DomainError. What needs a key or costs CPU (hashing a password, checking one, reading an
// emailed token) is done by the caller, which passes its result in the command. Logins (refresh
// families) and access codes are logins.ts.
import { refuse } from './errors.ts';
import type { DomainEvent, FoldedEvent } from './events.ts';

export type AccountType = 'USER' | 'DEVICE' | 'SERVICE';

/** The type an AccountRegistered event records (a string in its schema). */
const accountType = (type: string): AccountType => (type === 'SERVICE' || type === 'DEVICE' ? type : 'USER');

export interface AccountState {
  id: string;
  prn: string;
  type: AccountType;
  nick: string;
  email: string;
  passwordHash: string;
  /** When the password last changed (ms; 0: never): logins before it end at their next refresh. */
  passwordChanged: number;
  active: boolean;
  challenge: string;
  redirectUris: string[];
  created: number;
  modified: number;
  /** Nonces of verification emails sent and not used, with their expiry. */
  verifications: Map<string, number>;
  /** Reset nonces with their expiry; deleted once used. */
  resets: Map<string, number>;
  usedResets: Set<string>;
  profile: Record<string, string>;
  meta: Record<string, string>;
  ovmode: Record<string, string> | null;
  /** Never verified, its names taken by a newer registration (RegistrationExpired). */
  expired: boolean;
}

export const accountStream = (id: string) => `account-${id}`;
export const accountPrn = (id: string) => `prn:::accounts:/${id}`;
export const servicePrn = (nick: string, domain = '') => `prn:${domain}:auth:/${nick}`;

/** Whether HUB_ADMINS lists this nick (case-insensitively, as nicks are unique). */
export const isAdminNick = (admins: readonly string[], nick: string) =>
  admins.some((a) => a.toLowerCase() === nick.toLowerCase());

export const accounts = {
  snapshot: { kind: 'account', shape: 1 },
  initial: (): AccountState => ({
    id: '',
    prn: '',
    type: 'USER',
    nick: '',
    email: '',
    passwordHash: '',
    passwordChanged: 0,
    active: false,
    challenge: '',
    redirectUris: [],
    created: 0,
    modified: 0,
    verifications: new Map(),
    resets: new Map(),
    usedResets: new Set(),
    profile: {},
    meta: {},
    ovmode: null,
    expired: false,
  }),
  /** Folds one event of the account's stream; any other leaves the state as it is. Asking for an
   * email moves no `time-modified`: it changes nothing the records show (and the accounts
   * projection's listing moves on the other four: registered, verified, password changed, profile
   * updated). */
  evolve(s: AccountState, e: FoldedEvent): AccountState {
    switch (e.type) {
      case 'AccountRegistered': {
        const d = e.data;
        return {
          ...s,
          id: d.account_id,
          prn: d.prn,
          type: accountType(d.type),
          nick: d.nick,
          email: d.email,
          passwordHash: d.password_hash,
          active: d.active,
          challenge: d.challenge,
          redirectUris: d.redirect_uris,
          created: e.created,
          modified: e.created,
        };
      }
      case 'VerificationEmailRequested':
        return { ...s, verifications: new Map(s.verifications).set(e.data.nonce, e.data.expires) };
      case 'AccountVerified':
        return { ...s, active: true, verifications: new Map(), modified: e.created };
      // Its names went to a newer registration: nothing reaches it by them, nor by its challenge.
      case 'RegistrationExpired':
        return {
          ...s,
          challenge: '',
          verifications: new Map(),
          resets: new Map(),
          expired: true,
          modified: e.created,
        };
      case 'PasswordResetRequested':
        return { ...s, resets: new Map(s.resets).set(e.data.nonce, e.data.expires) };
      case 'PasswordChanged': {
        const used = new Set(s.usedResets);
        if (e.data.reset_nonce !== null) used.add(e.data.reset_nonce);
        return {
          ...s,
          passwordHash: e.data.password_hash,
          passwordChanged: e.created,
          // A new password ends every reset link sent before it, not only the one used: one left
          // in a mailbox would otherwise set the password again.
          resets: new Map(),
          usedResets: used,
          modified: e.created,
        };
      }
      case 'ProfileUpdated':
        return {
          ...s,
          profile: e.data.profile,
          meta: e.data.meta,
          ovmode: e.data.ovmode,
          modified: e.created,
        };
      default:
        return s;
    }
  },
};

// ---------------------------------------------------------------- registration

export interface RegisterAccount {
  id: string;
  /** accountPrn(id) for a user, servicePrn(nick) for a service. */
  prn: string;
  type: 'USER' | 'SERVICE';
  /** Already claimed (unique names are their own streams), as are the email and the PRN. */
  nick: string;
  /** Lower-cased. */
  email: string;
  /** The password, hashed (scrypt) by the caller. */
  passwordHash: string;
  /** `<id>.<secret>`: names the browser challenge of a user's registration. */
  challenge: string;
  redirectUris: string[];
}

/** Register: a USER is pending until its email is verified; a SERVICE (an admin registers it) is
 * active at once. */
export function decideRegister(c: RegisterAccount, s: AccountState): DomainEvent<'AccountRegistered'>[] {
  if (s.id) throw refuse.conflict('The account exists already.');
  return [
    {
      type: 'AccountRegistered',
      data: {
        account_id: c.id,
        prn: c.prn,
        type: c.type,
        nick: c.nick,
        email: c.email,
        password_hash: c.passwordHash,
        challenge: c.challenge,
        redirect_uris: c.redirectUris,
        active: c.type === 'SERVICE',
      },
    },
  ];
}

/** A challenge passed again once the account is verified is refused (409). The route asks it
 * before checking the captcha too, as decideRequestVerification does. */
export function refuseVerified(s: AccountState): void {
  if (s.active) throw refuse.conflict('This account is verified already.');
}

export interface RequestEmail {
  /** The emailed token is an HMAC of it (made by the mailer with the server's key). */
  nonce: string;
  /** When the emailed token stops working, ms. */
  expires: number;
}

/** The registration challenge is passed: a verification email goes out. */
export function decideRequestVerification(
  c: RequestEmail,
  s: AccountState,
): DomainEvent<'VerificationEmailRequested'>[] {
  if (!s.id) throw refuse.notFound('No registration with this challenge.');
  refuseVerified(s);
  return [
    {
      type: 'VerificationEmailRequested',
      data: { account_id: s.id, email: s.email, nonce: c.nonce, expires: c.expires },
    },
  ];
}

export interface VerifyEmail {
  /** The nonce of the verification email's token (its HMAC checked by the caller). */
  nonce: string;
  now: number;
}

/** The link of the verification email: activates the account; one verified already stays so. */
export function decideVerify(c: VerifyEmail, s: AccountState): DomainEvent<'AccountVerified'>[] {
  if (!s.id) throw refuse.unauthorized('This verification link is not valid.');
  if (s.active) return [];
  const expires = s.verifications.get(c.nonce);
  if (expires === undefined || expires < c.now)
    throw refuse.unauthorized('This verification link has expired; pass the challenge again for a new one.');
  return [{ type: 'AccountVerified', data: { account_id: s.id, nonce: c.nonce } }];
}

export interface ExpireRegistration {
  now: number;
  /** The verification window (HUB_VERIFY_TTL_S), ms. */
  verifyTtlMs: number;
}

/**
 * A USER's registration never verified within the verification window gives its names up (to a
 * newer registration that wants one): past its window with no link out (verification or reset:
 * its owner may be following one), or past twice its window whatever, so that new links do not
 * keep a name held for good. Any other account: nothing.
 */
export function decideExpireRegistration(
  c: ExpireRegistration,
  s: AccountState,
): DomainEvent<'RegistrationExpired'>[] {
  if (!s.id || s.type !== 'USER' || s.active || s.expired) return [];
  const linksOut = [...s.verifications.values(), ...s.resets.values()].some((expires) => expires >= c.now);
  const stale = s.created + 2 * c.verifyTtlMs < c.now || (s.created + c.verifyTtlMs < c.now && !linksOut);
  if (!stale) return [];
  return [
    {
      type: 'RegistrationExpired',
      data: { account_id: s.id, nick: s.nick.toLowerCase(), email: s.email },
    },
  ];
}

// ---------------------------------------------------------------- recovery

/** A reset link is asked for: it goes to users only (a service has no mailbox to recover by). */
export function decideRequestReset(
  c: RequestEmail,
  s: AccountState,
): DomainEvent<'PasswordResetRequested'>[] {
  if (!s.id || s.type !== 'USER') return [];
  return [
    {
      type: 'PasswordResetRequested',
      data: { account_id: s.id, email: s.email, nonce: c.nonce, expires: c.expires },
    },
  ];
}

export interface ChangePassword {
  /** The new password, hashed by the caller once it knew who asks (scrypt's cost is not for
   * anyone to spend); the current password was checked by it too. */
  passwordHash: string;
}

/** Change the password with one's login and current password. */
export function decideChangePassword(c: ChangePassword, s: AccountState): DomainEvent<'PasswordChanged'>[] {
  if (!s.id) throw refuse.unauthorized('The account of this token no longer exists.');
  return [
    { type: 'PasswordChanged', data: { account_id: s.id, password_hash: c.passwordHash, reset_nonce: null } },
  ];
}

export interface ResetPassword {
  /** The nonce of the emailed reset token (its HMAC checked by the caller). */
  nonce: string;
  passwordHash: string;
  now: number;
}

/**
 * Set the password with the emailed reset token: it works once, until it expires, and not after
 * a newer password. The link reached the mailbox, which is what verification proves: a pending
 * account is verified by it (else whoever registered the address first, and never verified it,
 * would keep its owner out for good).
 */
export function decideResetPassword(
  c: ResetPassword,
  s: AccountState,
): DomainEvent<'AccountVerified' | 'PasswordChanged'>[] {
  if (!s.id) throw refuse.unauthorized('This reset token is not valid.');
  if (s.expired) throw refuse.unauthorized('This registration expired; register again.');
  if (s.usedResets.has(c.nonce)) throw refuse.unauthorized('This reset token was used already.');
  const expires = s.resets.get(c.nonce);
  if (expires === undefined || expires < c.now)
    throw refuse.unauthorized('This reset token has expired; ask for a new one.');
  const verified: DomainEvent<'AccountVerified'>[] = s.active
    ? []
    : [{ type: 'AccountVerified', data: { account_id: s.id, nonce: c.nonce } }];
  return [
    ...verified,
    {
      type: 'PasswordChanged',
      data: { account_id: s.id, password_hash: c.passwordHash, reset_nonce: c.nonce },
    },
  ];
}
