// Accounts as the API shows them: the account record of /auth and the profile of /profiles/. The
// aggregate itself is domain/accounts.ts.
import type { AccountState } from '../../domain/accounts.ts';

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
