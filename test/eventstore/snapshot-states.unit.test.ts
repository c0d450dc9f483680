// Every snapshotting aggregate's state survives its snapshot exactly: folded from realistic
// streams (schema-valid events, read back as a store reads them), each state along the way reads
// back from its JSON equal to itself, Maps, Sets and properties set to undefined included.
import assert from 'node:assert/strict';
import { accounts } from '../../domain/accounts.ts';
import { apps } from '../../domain/apps.ts';
import { devices } from '../../domain/devices.ts';
import { codes, refreshFamilies } from '../../domain/logins.ts';
import { names } from '../../domain/names.ts';
import { subscriptions } from '../../domain/subscriptions.ts';
import { trails } from '../../domain/trails.ts';
import { type Evolver, fromSnapshot, snapshotShape, toSnapshot } from '../../infra/eventstore/aggregate.ts';
import type { RecordedEvent } from '../../infra/eventstore/port.ts';
import { SchemaRegistry } from '../../schemas/registry.ts';

const registry = SchemaRegistry.load();

/** A stream as a load reads it: each event complete under its schema, through JSON. */
function stream(name: string, events: [type: string, data: Record<string, unknown>][]): RecordedEvent[] {
  return events.map(([type, data], revision) => {
    registry.validate(type, data);
    return {
      id: `${name}-${revision}`,
      type,
      stream: name,
      revision,
      position: revision + 1,
      data: JSON.parse(JSON.stringify(registry.normalize(type, data))),
      metadata: {},
      created: 1_700_000_000_000 + revision * 1000,
    };
  });
}

const roundTrip = (state: unknown) => fromSnapshot(JSON.parse(JSON.stringify(toSnapshot(state))));

/** Folds the stream, checking the round trip of the initial state and of each state after it. */
function foldChecked<S>(evolver: Evolver<S>, events: RecordedEvent[]): S {
  let state = evolver.initial();
  assert.deepEqual(roundTrip(state), state, 'the initial state');
  for (const e of events) {
    state = evolver.evolve(state, e);
    assert.deepEqual(roundTrip(state), state, `after ${e.type} (revision ${e.revision})`);
  }
  return state;
}

const device = 'a'.repeat(24);
const owner = 'prn:::accounts:/b';

describe('snapshot states (unit)', () => {
  it('every aggregate the API loads declares its snapshot, each of its own kind and shape', () => {
    const evolvers = [devices, trails, accounts, apps, subscriptions, refreshFamilies, codes, names];
    const kinds = evolvers.map((e) => e.snapshot?.kind);
    assert.equal(new Set(kinds).size, evolvers.length);
    for (const e of evolvers) assert.match(snapshotShape(e as Evolver<unknown>)!, /^\d+\.[0-9a-f]{12}$/);
  });

  it('a device, its metadata keys whatever they are named', () => {
    const state = foldChecked(
      devices,
      stream('device-1', [
        [
          'DeviceCreated',
          {
            device_id: device,
            prn: `prn:::devices:/${device}`,
            owner_id: '',
            owner_prn: '',
            owner_nick: '',
            nick: 'thing',
            secret_sealed: 'sealed',
            challenge: 'c',
            user_meta: { $map: 'tagged?', $$: 'two', constructor: 'x' },
            device_meta: { a: '1' },
            certificate: null,
          },
        ],
        [
          'DeviceMetaUpdated',
          { device_id: device, owner_prn: '', changed: { b: '2', $set: 's' }, removed: [] },
        ],
        ['DeviceMetaUpdated', { device_id: device, owner_prn: '', changed: { a: '3' }, removed: ['b'] }],
        [
          'DeviceClaimed',
          {
            device_id: device,
            owner_id: 'b',
            owner_prn: owner,
            owner_nick: 'bob',
            nick: 'mine',
            previous_nick: 'thing',
          },
        ],
        ['DeviceRenamed', { device_id: device, owner_prn: owner, nick: 'renamed', previous_nick: 'mine' }],
        ['DevicePublicSet', { device_id: device, owner_prn: owner, public: true }],
        [
          'DevicePublicProcessed',
          { device_id: device, public: true, steps_marked_public: 1, steps_marked_non_public: 0 },
        ],
        [
          'UserMetaReplaced',
          {
            device_id: device,
            owner_prn: owner,
            meta: { $undefined: 'u' },
            changed_keys: ['$undefined'],
            removed_keys: [],
          },
        ],
        ['DeviceMarkedGarbage', { device_id: device, owner_prn: owner, nick: 'renamed' }],
      ]),
    );
    assert.deepEqual(state.deviceMeta, { a: '3', $set: 's' });
    assert.deepEqual(state.userMeta, { $undefined: 'u' });
  });

  it('a trail, its steps a Map', () => {
    const step = (rev: number) => [
      'StepPushed',
      {
        device_id: device,
        owner_prn: owner,
        rev,
        state: '{"a":1}',
        commit_msg: `step ${rev}`,
        objects: [],
        public: false,
      },
    ];
    const state = foldChecked(
      trails,
      stream('trail-1', [
        step(0),
        step(1),
        [
          'StepProgressReported',
          {
            device_id: device,
            owner_prn: owner,
            rev: 1,
            progress: 50,
            status: 'STARTED',
            status_msg: 'half',
            prev_progress: 0,
            prev_status: 'NEW',
          },
        ],
        ['StepPublicitySet', { device_id: device, rev: 0, public: true, garbage: false }],
        step(2),
      ] as [string, Record<string, unknown>][]),
    );
    assert.equal(state.steps.size, 3);
  });

  it('an account, its nonces Maps and its used resets a Set', () => {
    const state = foldChecked(
      accounts,
      stream('account-1', [
        [
          'AccountRegistered',
          {
            account_id: 'b',
            prn: owner,
            type: 'USER',
            nick: 'bob',
            email: 'bob@example.com',
            password_hash: 'hash',
            challenge: 'ch',
            redirect_uris: [],
            active: false,
          },
        ],
        [
          'VerificationEmailRequested',
          { account_id: 'b', email: 'bob@example.com', nonce: 'v1', expires: 1 },
        ],
        ['AccountVerified', { account_id: 'b', nonce: 'v1' }],
        [
          'VerificationEmailRequested',
          { account_id: 'b', email: 'bob@example.com', nonce: 'v2', expires: 2 },
        ],
        ['PasswordResetRequested', { account_id: 'b', email: 'bob@example.com', nonce: 'r1', expires: 3 }],
        ['PasswordChanged', { account_id: 'b', password_hash: 'hash2', reset_nonce: 'r1' }],
        ['PasswordResetRequested', { account_id: 'b', email: 'bob@example.com', nonce: 'r2', expires: 4 }],
        ['ProfileUpdated', { account_id: 'b', profile: { name: 'Bob' }, meta: { $k: 'v' }, ovmode: null }],
        ['ProfileUpdated', { account_id: 'b', profile: {}, meta: {}, ovmode: { mode: 'x' } }],
      ]),
    );
    assert.deepEqual([...state.verifications], [['v2', 2]]);
    assert.deepEqual([...state.resets], [['r2', 4]]);
    assert.deepEqual([...state.usedResets], ['r1']);
  });

  it('an app', () => {
    const fields = {
      nick: 'app',
      name: 'App',
      scopes: [{ id: 'read', description: 'reads' }],
      exposed_scopes: [],
    };
    foldChecked(
      apps,
      stream('app-1', [
        [
          'AppRegistered',
          {
            app_id: 'p',
            prn: 'prn:::apps:/p',
            owner_id: 'b',
            owner_prn: owner,
            owner_nick: 'bob',
            type: 'confidential',
            secret_hash: 'h',
            fields,
          },
        ],
        ['AppUpdated', { app_id: 'p', fields: { ...fields, name: 'App 2', redirect_uris: ['https://x'] } }],
        ['AppDeleted', { app_id: 'p', owner_prn: owner }],
      ]),
    );
  });

  it('a webhook subscription', () => {
    const fields = {
      webhook_id: 'w',
      owner_prn: owner,
      nick: 'hook',
      url: 'https://example.com/hook',
      event_types: ['device.created'],
      enabled: true,
      custom_headers: { 'X-A': 'b' },
    };
    foldChecked(
      subscriptions,
      stream('webhook-1', [
        ['WebhookCreated', { ...fields, secret_sealed: 's1' }],
        ['WebhookUpdated', { ...fields, retry_policy: { max_attempts: 3, delays_s: [1, 2] } }],
        [
          'WebhookSecretRotated',
          { webhook_id: 'w', owner_prn: owner, secret_sealed: 's2', previous_sealed: 's1' },
        ],
        ['WebhookDeleted', { webhook_id: 'w', owner_prn: owner }],
      ]),
    );
  });

  it('a login (refresh family), acting as no one (undefined), its spent tokens a Set', () => {
    const state = foldChecked(
      refreshFamilies,
      stream('refresh-1', [
        [
          'RefreshTokenIssued',
          { family: 'f', account_id: 'b', token_hash: 't1', expires: 10, acting_as: null },
        ],
        ['RefreshTokenRotated', { token_hash: 't2', expires: 20 }],
        ['RefreshTokenRotated', { token_hash: 't3', expires: 30 }],
        ['RefreshFamilyRevoked', { reason: 'logout' }],
      ]),
    );
    assert.ok('actingAs' in state && state.actingAs === undefined);
    assert.deepEqual([...state.spent], ['t1', 't2']);
  });

  it('an access code, and a unique name claimed and released (undefined holders)', () => {
    foldChecked(
      codes,
      stream('code-1', [
        [
          'AccessCodeIssued',
          { account_id: 'b', account_prn: owner, service: 's', scopes: ['read'], expires: 5 },
        ],
        ['AccessCodeRedeemed', { service: 's' }],
      ]),
    );
    const released = foldChecked(
      names,
      stream('unique-nick-bob', [
        ['NameClaimed', { kind: 'nick', value: 'bob', owner_id: 'b' }],
        ['NameReleased', { kind: 'nick', value: 'bob' }],
      ]),
    );
    assert.ok('owner' in released && released.owner === undefined);
  });
});

describe('snapshot encoding (unit)', () => {
  it('reads back Maps with any keys, Sets, undefined and $-keys at any depth, exactly', () => {
    const value = {
      map: new Map<unknown, unknown>([
        [1, { $map: 'not a tag' }],
        ['k', new Set([undefined, null, 'x'])],
      ]),
      list: [undefined, 1.5, -2, '', true, [new Map()]],
      $: 'dollar',
      $$$: 'three',
      nested: { $undefined: true, $set: [1] },
      none: undefined,
      own: JSON.parse('{"__proto__": "a key like any"}'),
    };
    assert.deepEqual(roundTrip(value), value);
    assert.deepEqual(Object.keys(roundTrip(value.own) as object), ['__proto__']);
  });

  it('reads records of other classes (Avro records) back as plain objects of the same fields', () => {
    const record = registry.type('AccessCodeRedeemed').clone({ service: 's' });
    assert.notEqual(Object.getPrototypeOf(record), Object.prototype);
    assert.deepEqual(roundTrip({ r: record }), { r: { service: 's' } });
  });

  it('refuses what it cannot read back exactly: such a state is not snapshotted', () => {
    for (const bad of [new Date(0), Number.NaN, Number.POSITIVE_INFINITY, 1n, () => 1, Symbol('s')])
      assert.throws(() => toSnapshot({ nested: [bad] }), /a snapshot cannot hold/);
  });
});
