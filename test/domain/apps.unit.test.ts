// The app aggregate's decisions, each command's rules in given/when/then form, and the record the
// API shows. No I/O.
import assert from 'node:assert/strict';
import {
  type AppFields,
  appRecord,
  apps,
  checkAppUpdate,
  decideDelete,
  decideRegister,
  decideUpdate,
  type RegisterApp,
} from '../../domain/apps.ts';
import type { DomainEvent } from '../../domain/events.ts';
import { given } from './decider.ts';

const ID = '0123456789abcdef01234567';
const ALICE = { id: 'a1', prn: 'prn:::accounts:/a1', nick: 'alice' };
const FIELDS: AppFields = {
  nick: 'myapp',
  name: 'My app',
  logo: '',
  redirect_uris: ['https://example.com/cb'],
  scopes: [{ id: 'devices.read', description: '', required: true, service: '' }],
  exposed_scopes: [],
};

const registered = (type: 'public' | 'confidential' = 'public'): DomainEvent<'AppRegistered'> => ({
  type: 'AppRegistered',
  data: {
    app_id: ID,
    prn: `prn:::apps:/${ID}`,
    owner_id: ALICE.id,
    owner_prn: ALICE.prn,
    owner_nick: ALICE.nick,
    type,
    secret_hash: type === 'confidential' ? 'hash' : null,
    fields: FIELDS,
  },
});
const deleted: DomainEvent<'AppDeleted'> = { type: 'AppDeleted', data: { app_id: ID, owner_prn: ALICE.prn } };

describe('apps: decisions (unit)', () => {
  describe('register', () => {
    const command = (c: Partial<RegisterApp> = {}): RegisterApp => ({
      id: ID,
      owner: ALICE,
      type: 'public',
      secretHash: null,
      fields: FIELDS,
      ...c,
    });

    it('a public app, and a confidential one with the hash of its secret', () => {
      given(apps)()
        .when((a) => decideRegister(command(), a))
        .thenEmits(registered());
      given(apps)()
        .when((a) => decideRegister(command({ type: 'confidential', secretHash: 'hash' }), a))
        .thenEmits(registered('confidential'));
    });

    it('refuses a stream that exists already', () => {
      given(apps)(registered())
        .when((a) => decideRegister(command(), a))
        .thenRefuses('conflict', /exists already/);
    });
  });

  describe('update', () => {
    const renamed = { ...FIELDS, nick: 'other', name: 'Other' };

    it("replaces the app's fields, its type sent or not", () => {
      given(apps)(registered())
        .when((a) => decideUpdate({ fields: renamed }, a))
        .thenEmits({ type: 'AppUpdated', data: { app_id: ID, fields: renamed } });
      given(apps)(registered('confidential'))
        .when((a) => decideUpdate({ type: 'confidential', fields: renamed }, a))
        .thenEmits({ type: 'AppUpdated', data: { app_id: ID, fields: renamed } });
    });

    it('refuses another type, before any nick is reserved too (checkAppUpdate)', () => {
      given(apps)(registered())
        .when((a) => decideUpdate({ type: 'confidential', fields: renamed }, a))
        .thenRefuses('invalid', /^An app's type cannot change; register a new app\.$/);
      assert.throws(
        () => checkAppUpdate({ type: 'public' }, { type: 'confidential' }),
        (err: { details?: unknown }) => {
          assert.deepEqual(err.details, [{ field: 'type', problem: 'cannot change' }]);
          return true;
        },
      );
    });

    it('refuses a deleted or unknown app', () => {
      given(apps)(registered(), deleted)
        .when((a) => decideUpdate({ fields: renamed }, a))
        .thenRefuses('not_found', /^No such app\.$/);
      given(apps)()
        .when((a) => decideUpdate({ fields: renamed }, a))
        .thenRefuses('not_found', /^No such app\.$/);
    });
  });

  describe('delete', () => {
    it('deletes the app; deleting again changes nothing', () => {
      given(apps)(registered()).when(decideDelete).thenEmits(deleted);
      given(apps)(registered(), deleted).when(decideDelete).thenEmits();
    });

    it('refuses an unknown app', () => {
      given(apps)()
        .when(decideDelete)
        .thenRefuses('not_found', /^No such app\.$/);
    });
  });

  it('the record: its fields, the count of exposed scopes, deleted-at once deleted, no secret hash', () => {
    const record = appRecord(given(apps)(registered('confidential'), deleted).state);
    assert.equal(record.type, 'confidential');
    assert.equal(record.nick, 'myapp');
    assert.equal(record.exposedScopesLength, 0);
    assert.equal(record['deleted-at'], new Date(1_001).toISOString());
    assert.ok(!('secret_hash' in record) && !('secret' in record));
    assert.equal(appRecord(given(apps)(registered()).state, 's3cret').secret, 's3cret');
  });
});
