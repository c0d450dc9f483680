// The account aggregate (stream account-<id>): its state, folded from events, and the record
// the API shows. Pure: no I/O here.
import type { RecordedEvent } from '../../infra/eventstore/port.ts';
import type { AccountType } from './tokens.ts';

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

/** Events that move no `time-modified`: asking for an email changes nothing the records show, and
 * the accounts projection's listing moves on the other four (registered, verified, password
 * changed, profile updated). */
const EMAIL_REQUESTS = new Set(['VerificationEmailRequested', 'PasswordResetRequested']);

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
  evolve(s: AccountState, e: RecordedEvent): AccountState {
    const d = e.data as Record<string, unknown>;
    const next = EMAIL_REQUESTS.has(e.type) ? { ...s } : { ...s, modified: e.created };
    switch (e.type) {
      case 'AccountRegistered':
        return {
          ...next,
          id: d.account_id as string,
          prn: d.prn as string,
          type: d.type as AccountType,
          nick: d.nick as string,
          email: d.email as string,
          passwordHash: d.password_hash as string,
          active: d.active as boolean,
          challenge: d.challenge as string,
          redirectUris: d.redirect_uris as string[],
          created: e.created,
        };
      case 'VerificationEmailRequested':
        return {
          ...next,
          verifications: new Map(s.verifications).set(d.nonce as string, d.expires as number),
        };
      case 'AccountVerified':
        return { ...next, active: true, verifications: new Map() };
      // Its names went to a newer registration: nothing reaches it by them, nor by its challenge.
      case 'RegistrationExpired':
        return { ...next, challenge: '', verifications: new Map(), resets: new Map(), expired: true };
      case 'PasswordResetRequested':
        return { ...next, resets: new Map(s.resets).set(d.nonce as string, d.expires as number) };
      case 'PasswordChanged': {
        const used = new Set(s.usedResets);
        if (typeof d.reset_nonce === 'string') used.add(d.reset_nonce);
        return {
          ...next,
          passwordHash: d.password_hash as string,
          passwordChanged: e.created,
          // A new password ends every reset link sent before it, not only the one used: one left
          // in a mailbox would otherwise set the password again.
          resets: new Map(),
          usedResets: used,
        };
      }
      case 'ProfileUpdated':
        return {
          ...next,
          profile: d.profile as Record<string, string>,
          meta: d.meta as Record<string, string>,
          ovmode: d.ovmode as Record<string, string> | null,
        };
      default:
        return s;
    }
  },
};

/** The account as the API shows it: never a password or a hash, whatever the resource table lists. */
export function accountRecord(s: AccountState): Record<string, unknown> {
  return {
    prn: s.prn,
    type: s.type,
    nick: s.nick,
    email: s.email,
    status: s.active ? 'active' : 'pending',
    challenge: s.active ? '' : s.challenge,
    redirect_uris: s.redirectUris,
    'time-created': new Date(s.created).toISOString(),
    'time-modified': new Date(s.modified).toISOString(),
  };
}

/** The profile's text fields (all strings; '' when not set). */
export const PROFILE_TEXT = [
  'bio',
  'company',
  'fullName',
  'github',
  'gitlab',
  'location',
  'picture',
  'twitter',
  'website',
] as const;

/** The Profile: request and response share one shape (the spec), so every field is there, a text
 * field not set as '' and an ovmode not set as {}. */
export function profileRecord(s: AccountState): Record<string, unknown> {
  return {
    nick: s.nick,
    email: s.email,
    ...Object.fromEntries(PROFILE_TEXT.map((f) => [f, s.profile[f] ?? ''])),
    meta: s.meta,
    ovmode: s.ovmode ?? {},
    'time-created': new Date(s.created).toISOString(),
    'time-modified': new Date(s.modified).toISOString(),
  };
}
