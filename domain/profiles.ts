// The profile of an account, kept in the account's own stream (account-<id>): the part of the
// account's state its decision reads, and the decision to replace it. Pure: no I/O, no HTTP; a
// refusal is a DomainError. The account aggregate folds ProfileUpdated into its state, which
// holds this one's fields; `profiles` folds only what the decision reads.
import { type Meta, mergeMeta, replacing } from './devices.ts';
import { refuse } from './errors.ts';
import type { DomainEvent, FoldedEvent } from './events.ts';

export interface ProfileState {
  /** The account's id ('' when it does not exist). */
  id: string;
  nick: string;
  email: string;
  /** The text fields set (bio, company, fullName…). */
  profile: Meta;
  meta: Meta;
  ovmode: Meta | null;
}

export const profiles = {
  initial: (): ProfileState => ({ id: '', nick: '', email: '', profile: {}, meta: {}, ovmode: null }),
  /** Folds the events of an account's stream that the profile's decision reads. */
  evolve(s: ProfileState, e: FoldedEvent): ProfileState {
    switch (e.type) {
      case 'AccountRegistered':
        return { ...s, id: e.data.account_id, nick: e.data.nick, email: e.data.email };
      case 'ProfileUpdated':
        return { ...s, profile: e.data.profile, meta: e.data.meta, ovmode: e.data.ovmode };
      default:
        return s;
    }
  },
};

/** Whether two maps of strings hold the same entries: the metadata merge finds nothing to change. */
function sameMap(a: Meta, b: Meta): boolean {
  const { changed, removed } = mergeMeta(a, replacing(a, b));
  return Object.keys(changed).length === 0 && removed.length === 0;
}

/** The text fields that are set: one set to '' reads as one not sent (both are shown as ''). */
const setFields = (m: Meta) => Object.fromEntries(Object.entries(m).filter(([, v]) => v !== ''));

export interface UpdateProfile {
  /** Read-only here: when sent, the account's own (in any case). */
  nick?: string | undefined;
  email?: string | undefined;
  /** The text fields sent; those left out become empty. */
  profile: Meta;
  meta: Meta;
  ovmode: Meta | null;
}

/** Replace the profile (its account): the same profile again records nothing, as a metadata
 * write that changes nothing. */
export function decideUpdateProfile(c: UpdateProfile, s: ProfileState): DomainEvent<'ProfileUpdated'>[] {
  if (!s.id) throw refuse.notFound('The account of this token no longer exists.');
  for (const field of ['nick', 'email'] as const) {
    const sent = c[field];
    if (sent !== undefined && sent.toLowerCase() !== s[field].toLowerCase())
      throw refuse.invalid(`The ${field} cannot change through the profile.`, [
        { field, problem: 'is read-only' },
      ]);
  }
  if (
    sameMap(setFields(s.profile), setFields(c.profile)) &&
    sameMap(s.meta, c.meta) &&
    sameMap(s.ovmode ?? {}, c.ovmode ?? {})
  )
    return [];
  return [
    {
      type: 'ProfileUpdated',
      data: { account_id: s.id, profile: c.profile, meta: c.meta, ovmode: c.ovmode },
    },
  ];
}
