// Accounts for the admin listing: one document per account (no password material), newest last.
import type { StoredEvent } from '../infra/eventstore/port.ts';
import type { Projection } from './runner.ts';

/** The read model's keys, for the projection and for those who read it. */
export const accountKeys = {
  record: (id: string) => `account:${id}`,
  /** Every account, by registration. */
  byCreated: 'by-created',
};

export const accountList: Projection = {
  name: 'accounts',
  version: 1,
  description: 'Every account (prn, type, nick, email, status, times) and an index by creation.',
  project(e: StoredEvent) {
    const modified = new Date(e.created).toISOString();
    switch (e.type) {
      case 'AccountRegistered': {
        const d = e.data;
        return [
          {
            op: 'set',
            key: accountKeys.record(d.account_id),
            doc: {
              prn: d.prn,
              type: d.type,
              nick: d.nick,
              email: d.email,
              status: d.active ? 'active' : 'pending',
              redirect_uris: d.redirect_uris,
              'time-created': modified,
              'time-modified': modified,
            },
          },
          { op: 'zadd', key: accountKeys.byCreated, member: d.account_id, score: e.position },
        ];
      }
      case 'AccountVerified':
        return [
          {
            op: 'patch',
            key: accountKeys.record(e.data.account_id),
            doc: { status: 'active', 'time-modified': modified },
          },
        ];
      // Its names went to a newer registration: the listing drops it (its stream keeps it).
      case 'RegistrationExpired':
        return [
          { op: 'del', key: accountKeys.record(e.data.account_id) },
          { op: 'zrem', key: accountKeys.byCreated, member: e.data.account_id },
        ];
      case 'PasswordChanged':
      case 'ProfileUpdated':
        return [
          { op: 'patch', key: accountKeys.record(e.data.account_id), doc: { 'time-modified': modified } },
        ];
      default:
        return [];
    }
  },
};
