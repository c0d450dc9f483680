// The device aggregate's decisions, each command's rules in given/when/then form, and the one
// metadata merge they and the readers share. No I/O.
import assert from 'node:assert/strict';
import {
  type CreateDevice,
  checkNewDevice,
  decideClaim,
  decideCreate,
  decideDelete,
  decideMarkPublicProcessed,
  decideRename,
  decideReplaceUserMeta,
  decideReportDeviceMeta,
  decideRotateSecret,
  decideSetPublic,
  devices,
  mergeMeta,
  metaPatchOf,
  refuseUnclaimable,
  replacing,
} from '../../domain/devices.ts';
import type { DomainEvent, EventData } from '../../domain/events.ts';
import { given } from './decider.ts';

const ID = '0123456789abcdef01234567';
const PRN = `prn:::devices:/${ID}`;
const ALICE = { id: 'a1', prn: 'prn:::accounts:/a1', nick: 'alice' };
const BOB = { id: 'b1', prn: 'prn:::accounts:/b1', nick: 'bob' };

const created = (data: Partial<EventData['DeviceCreated']> = {}): DomainEvent<'DeviceCreated'> => ({
  type: 'DeviceCreated',
  data: {
    device_id: ID,
    prn: PRN,
    owner_id: ALICE.id,
    owner_prn: ALICE.prn,
    owner_nick: ALICE.nick,
    nick: 'sensor',
    secret_sealed: 'sealed-1',
    challenge: '',
    user_meta: {},
    device_meta: {},
    certificate: null,
    ...data,
  },
});
/** A device that registered itself: unowned, with a challenge. */
const unowned = created({ owner_id: '', owner_prn: '', owner_nick: '', challenge: 'ch' });
const deleted: DomainEvent<'DeviceMarkedGarbage'> = {
  type: 'DeviceMarkedGarbage',
  data: { device_id: ID, owner_prn: ALICE.prn, nick: 'sensor' },
};
const publicSet = (value: boolean): DomainEvent<'DevicePublicSet'> => ({
  type: 'DevicePublicSet',
  data: { device_id: ID, owner_prn: ALICE.prn, public: value },
});
const metaUpdated = (
  changed: Record<string, string>,
  removed: string[] = [],
): DomainEvent<'DeviceMetaUpdated'> => ({
  type: 'DeviceMetaUpdated',
  data: { device_id: ID, owner_prn: ALICE.prn, changed, removed },
});

describe('devices: decisions (unit)', () => {
  describe('create', () => {
    const command = (c: Partial<CreateDevice> = {}): CreateDevice => ({
      id: ID,
      owner: ALICE,
      nick: 'sensor',
      secretSealed: 'sealed-1',
      challenge: 'ch',
      userMeta: {},
      deviceMeta: {},
      certificate: null,
      maxMetaKeys: 2,
      ...c,
    });

    it("an owner's device: owned, no challenge kept", () => {
      given(devices)()
        .when((s) => decideCreate(command({ userMeta: { room: 'lab' } }), s))
        .thenEmits(created({ user_meta: { room: 'lab' } }));
    });

    it('a device registering itself: unowned, claimed later with its challenge', () => {
      given(devices)()
        .when((s) => decideCreate(command({ owner: undefined }), s))
        .thenEmits(unowned);
    });

    it('a device registering itself sets device-meta only: user-meta is its owner’s', () => {
      given(devices)()
        .when((s) => decideCreate(command({ owner: undefined, userMeta: { tag: 'x' } }), s))
        .thenRefuses('invalid', /user-meta is its owner’s/);
      assert.throws(
        () => checkNewDevice({ owner: undefined, userMeta: { tag: 'x' }, deviceMeta: {}, maxMetaKeys: 2 }),
        (err: { details?: unknown }) => {
          assert.deepEqual(err.details, [
            { field: 'user-meta', problem: 'is set by the owner, not by a device registering itself' },
          ]);
          return true;
        },
      );
    });

    it('each map holds at most the limit of keys', () => {
      const three = { a: '1', b: '2', c: '3' };
      given(devices)()
        .when((s) => decideCreate(command({ userMeta: three }), s))
        .thenRefuses('too_large', /at most 2 keys/);
      given(devices)()
        .when((s) => decideCreate(command({ deviceMeta: three }), s))
        .thenRefuses('too_large', /at most 2 keys/);
    });

    it('a stream that holds a device already takes no second one', () => {
      given(devices)(created())
        .when((s) => decideCreate(command(), s))
        .thenRefuses('conflict', /exists already/);
    });
  });

  describe('claim', () => {
    const claim = { challenge: 'ch', owner: BOB, nick: 'probe' };
    const claimed: DomainEvent<'DeviceClaimed'> = {
      type: 'DeviceClaimed',
      data: {
        device_id: ID,
        owner_id: BOB.id,
        owner_prn: BOB.prn,
        owner_nick: BOB.nick,
        nick: 'probe',
        previous_nick: 'sensor',
      },
    };

    it('an unowned device with its challenge becomes the claimant’s, under the nick reserved', () => {
      given(devices)(unowned)
        .when((s) => decideClaim(claim, s))
        .thenEmits(claimed);
    });

    it('another challenge is refused as if there were no such device', () => {
      given(devices)(unowned)
        .when((s) => decideClaim({ ...claim, challenge: 'guess' }, s))
        .thenRefuses('not_found', /No unowned device with this id and challenge/);
    });

    it('a device claimed since it was found claimable: 409; deleted since, or none: 404', () => {
      given(devices)(unowned, claimed)
        .when((s) => decideClaim(claim, s))
        .thenRefuses('conflict', /claimed meanwhile/);
      given(devices)(unowned, deleted)
        .when((s) => decideClaim(claim, s))
        .thenRefuses('not_found', /No such device/);
      given(devices)()
        .when((s) => decideClaim(claim, s))
        .thenRefuses('not_found', /No such device/);
    });

    it('before the nick is reserved: one answer (404) for none, deleted, owned and another challenge', () => {
      const refusal = (s: ReturnType<typeof devices.initial>, challenge = 'ch') => {
        assert.throws(() => refuseUnclaimable(challenge, s), {
          name: 'DomainError',
          refusal: 'not_found',
          message: 'No unowned device with this id and challenge.',
        });
      };
      refusal(given(devices)().state);
      refusal(given(devices)(unowned, deleted).state);
      refusal(given(devices)(unowned, claimed).state);
      refusal(given(devices)(created()).state, '');
      refusal(given(devices)(unowned).state, 'guess');
      refuseUnclaimable('ch', given(devices)(unowned).state);
    });
  });

  describe('rename', () => {
    it('records the new nick and the one it had', () => {
      given(devices)(created())
        .when((s) => decideRename({ nick: 'Probe' }, s))
        .thenEmits({
          type: 'DeviceRenamed',
          data: { device_id: ID, owner_prn: ALICE.prn, nick: 'Probe', previous_nick: 'sensor' },
        });
    });

    it('the same nick changes nothing', () => {
      given(devices)(created())
        .when((s) => decideRename({ nick: 'sensor' }, s))
        .thenEmits();
    });

    it('a deleted device, or none, is not found', () => {
      given(devices)(created(), deleted)
        .when((s) => decideRename({ nick: 'probe' }, s))
        .thenRefuses('not_found', /No such device/);
      given(devices)()
        .when((s) => decideRename({ nick: 'probe' }, s))
        .thenRefuses('not_found', /No such device/);
    });
  });

  describe('set or unset public', () => {
    it('records the flag when it flips, and nothing when it is already so', () => {
      given(devices)(created())
        .when((s) => decideSetPublic({ public: true }, s))
        .thenEmits(publicSet(true));
      given(devices)(created(), publicSet(true))
        .when((s) => decideSetPublic({ public: false }, s))
        .thenEmits(publicSet(false));
      given(devices)(created())
        .when((s) => decideSetPublic({ public: false }, s))
        .thenEmits();
      given(devices)(created(), publicSet(true))
        .when((s) => decideSetPublic({ public: true }, s))
        .thenEmits();
    });

    it('a deleted device is not found', () => {
      given(devices)(created(), deleted)
        .when((s) => decideSetPublic({ public: true }, s))
        .thenRefuses('not_found', /No such device/);
    });
  });

  describe('delete', () => {
    it('marks the device garbage, recording the nick it gives back', () => {
      given(devices)(created())
        .when((s) => decideDelete(s))
        .thenEmits(deleted);
    });

    it('deleting again changes nothing; no device is not found', () => {
      given(devices)(created(), deleted)
        .when((s) => decideDelete(s))
        .thenEmits();
      given(devices)()
        .when((s) => decideDelete(s))
        .thenRefuses('not_found', /No such device/);
    });
  });

  describe('rotate the secret', () => {
    it('records the new sealed secret; the fold dates the change (logins before it end)', () => {
      const rotated: DomainEvent<'DeviceSecretRotated'> = {
        type: 'DeviceSecretRotated',
        data: { device_id: ID, owner_prn: ALICE.prn, secret_sealed: 'sealed-2' },
      };
      given(devices)(created())
        .when((s) => decideRotateSecret({ secretSealed: 'sealed-2' }, s))
        .thenEmits(rotated);
      const after = given(devices)(created(), rotated).state;
      assert.equal(after.secretSealed, 'sealed-2');
      assert.equal(after.secretChanged, 1_001);
    });

    it('a deleted device is not found', () => {
      given(devices)(created(), deleted)
        .when((s) => decideRotateSecret({ secretSealed: 'sealed-2' }, s))
        .thenRefuses('not_found', /No such device/);
    });
  });

  describe('report device-meta', () => {
    const report = (patch: Record<string, string | null>) => ({ patch, maxMetaKeys: 3 });

    it('records only what changes: the keys set to new values, the keys removed that were there', () => {
      given(devices)(created({ device_meta: { fw: '1.0', temp: '20' } }))
        .when((s) => decideReportDeviceMeta(report({ fw: '1.1', temp: '20', gone: null, temp2: null }), s))
        .thenEmits(metaUpdated({ fw: '1.1' }));
      given(devices)(created({ device_meta: { fw: '1.0', temp: '20' } }))
        .when((s) => decideReportDeviceMeta(report({ temp: null, up: '1' }), s))
        .thenEmits(metaUpdated({ up: '1' }, ['temp']));
    });

    it('a patch that changes nothing records nothing (even over the limit of keys)', () => {
      given(devices)(created({ device_meta: { a: '1', b: '2', c: '3', d: '4' } }))
        .when((s) => decideReportDeviceMeta(report({ a: '1', x: null }), s))
        .thenEmits();
    });

    it('the merged map holds at most the limit of keys', () => {
      given(devices)(created({ device_meta: { a: '1', b: '2', c: '3' } }))
        .when((s) => decideReportDeviceMeta(report({ d: '4' }), s))
        .thenRefuses('too_large', /at most 3 keys/);
      // One in, one out: still three.
      given(devices)(created({ device_meta: { a: '1', b: '2', c: '3' } }))
        .when((s) => decideReportDeviceMeta(report({ d: '4', a: null }), s))
        .thenEmits(metaUpdated({ d: '4' }, ['a']));
    });

    it('the fold merges what was recorded', () => {
      const s = given(devices)(
        created({ device_meta: { fw: '1.0', temp: '20' } }),
        metaUpdated({ fw: '1.1', up: '1' }, ['temp']),
      ).state;
      assert.deepEqual(s.deviceMeta, { fw: '1.1', up: '1' });
    });

    it('a deleted device is not found', () => {
      given(devices)(created(), deleted)
        .when((s) => decideReportDeviceMeta(report({ fw: '2' }), s))
        .thenRefuses('not_found', /No such device/);
    });
  });

  describe('replace user-meta', () => {
    const replace = (meta: Record<string, string>) => ({ meta, maxMetaKeys: 2 });

    it('records the map with the keys added or changed and the keys removed', () => {
      given(devices)(created({ user_meta: { room: 'lab', floor: '1' } }))
        .when((s) => decideReplaceUserMeta(replace({ room: 'hall', tag: 'x' }), s))
        .thenEmits({
          type: 'UserMetaReplaced',
          data: {
            device_id: ID,
            owner_prn: ALICE.prn,
            meta: { room: 'hall', tag: 'x' },
            changed_keys: ['room', 'tag'],
            removed_keys: ['floor'],
          },
        });
    });

    it('the same map records nothing', () => {
      given(devices)(created({ user_meta: { room: 'lab' } }))
        .when((s) => decideReplaceUserMeta(replace({ room: 'lab' }), s))
        .thenEmits();
    });

    it('a map over the limit is refused, before the device is looked at', () => {
      given(devices)(created(), deleted)
        .when((s) => decideReplaceUserMeta(replace({ a: '1', b: '2', c: '3' }), s))
        .thenRefuses('too_large', /at most 2 keys/);
    });

    it('a deleted device is not found', () => {
      given(devices)(created(), deleted)
        .when((s) => decideReplaceUserMeta(replace({ a: '1' }), s))
        .thenRefuses('not_found', /No such device/);
    });
  });

  describe('mark the public flag processed', () => {
    const processed = (
      pub: boolean,
      marked: number,
      nonPublic: number,
    ): DomainEvent<'DevicePublicProcessed'> => ({
      type: 'DevicePublicProcessed',
      data: { device_id: ID, public: pub, steps_marked_public: marked, steps_marked_non_public: nonPublic },
    });
    const mark = (markedPublic: number, markedNonPublic: number) => ({
      deviceId: ID,
      markedPublic,
      markedNonPublic,
    });

    it('after the flag changed, recorded with the steps carried, even none', () => {
      given(devices)(created(), publicSet(true))
        .when((s) => decideMarkPublicProcessed(mark(0, 0), s))
        .thenEmits(processed(true, 0, 0));
    });

    it('once processed: only when steps were marked', () => {
      given(devices)(created())
        .when((s) => decideMarkPublicProcessed(mark(0, 0), s))
        .thenEmits();
      given(devices)(created(), publicSet(true), processed(true, 0, 0))
        .when((s) => decideMarkPublicProcessed(mark(2, 1), s))
        .thenEmits(processed(true, 2, 1));
    });
  });
});

describe('devices: the metadata merge (unit)', () => {
  it('answers the map after a patch and only the real changes', () => {
    assert.deepEqual(mergeMeta({ a: '1', b: '2' }, { a: '1', b: '3', c: '4', a2: null }), {
      meta: { a: '1', b: '3', c: '4' },
      changed: { b: '3', c: '4' },
      removed: [],
    });
    assert.deepEqual(mergeMeta({ a: '1', b: '2' }, { b: '3', c: '4', a: null }), {
      meta: { b: '3', c: '4' },
      changed: { b: '3', c: '4' },
      removed: ['a'],
    });
  });

  it('keys named like inherited properties are keys like any', () => {
    assert.deepEqual(mergeMeta({}, { constructor: null, toString: 'x' }), {
      meta: { toString: 'x' },
      changed: { toString: 'x' },
      removed: [],
    });
    assert.deepEqual(mergeMeta({ constructor: 'x' }, { constructor: null }).meta, {});
    const proto = mergeMeta({}, JSON.parse('{"__proto__": "x"}'));
    assert.deepEqual(Object.entries(proto.meta), [['__proto__', 'x']]);
    assert.deepEqual(Object.entries(proto.changed), [['__proto__', 'x']]);
  });

  it('a replacement is the patch that removes the keys left out', () => {
    assert.deepEqual(replacing({ a: '1', b: '2' }, { b: '3', c: '4' }), { b: '3', c: '4', a: null });
    const { meta, changed, removed } = mergeMeta(
      { a: '1', b: '2' },
      replacing({ a: '1', b: '2' }, { b: '3' }),
    );
    assert.deepEqual([meta, changed, removed], [{ b: '3' }, { b: '3' }, ['a']]);
  });

  it("an event's change as a patch: what the read model applies and the fold merges", () => {
    assert.deepEqual(metaPatchOf({ a: '1' }, ['b']), { a: '1', b: null });
    assert.deepEqual(mergeMeta({ b: '2', c: '3' }, metaPatchOf({ a: '1' }, ['b'])).meta, { c: '3', a: '1' });
  });
});
