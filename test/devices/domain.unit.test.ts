// The device domain's pure decisions, and the callbacks' timestamp parsing, without I/O.
import assert from 'node:assert/strict';
import { deviceRecord } from '../../api/devices/records.ts';
import { parseRfc3339 } from '../../api/http.ts';
import { devices, type Meta, type MetaPatch, mergeMeta, replacing } from '../../domain/devices.ts';
import type { FoldedEvent } from '../../domain/events.ts';
import { referencedObjects, stepsToMark, trails } from '../../domain/trails.ts';

// What device-meta's PATCH and user-meta's PUT make of the one metadata merge (domain/devices.ts):
// the real changes of a patch, and the keys a replacement adds or changes and removes.
const metaPatch = (current: Meta, patch: MetaPatch) => {
  const { changed, removed } = mergeMeta(current, patch);
  return { changed, removed };
};
const metaReplace = (current: Meta, next: Meta) => {
  const { changed, removed } = mergeMeta(current, replacing(current, next));
  return { changedKeys: Object.keys(changed), removedKeys: removed };
};

describe('device domain (unit)', () => {
  it('metaPatch records only real changes; null removes existing keys only', () => {
    assert.deepEqual(metaPatch({ a: '1', b: '2' }, { a: '1', b: '3', c: '4', d: null, b2: null }), {
      changed: { b: '3', c: '4' },
      removed: [],
    });
    assert.deepEqual(metaPatch({ a: '1' }, { a: null }), { changed: {}, removed: ['a'] });
    assert.deepEqual(metaPatch({ a: '1' }, { a: '1' }), { changed: {}, removed: [] });
    // Keys named like inherited properties are keys like any: only own keys are removed.
    assert.deepEqual(metaPatch({}, { constructor: null, toString: null }), { changed: {}, removed: [] });
    assert.deepEqual(metaPatch({ constructor: 'x' }, { constructor: null }), {
      changed: {},
      removed: ['constructor'],
    });
  });

  it('metaReplace names the keys added or changed and the keys removed', () => {
    assert.deepEqual(metaReplace({ a: '1', b: '2' }, { a: '1', b: '9', c: '3' }), {
      changedKeys: ['b', 'c'],
      removedKeys: [],
    });
    assert.deepEqual(metaReplace({ a: '1', b: '2' }, { a: '1' }), { changedKeys: [], removedKeys: ['b'] });
    assert.deepEqual(metaReplace({ constructor: 'x' }, {}), {
      changedKeys: [],
      removedKeys: ['constructor'],
    });
  });

  it("a record's ovmode says how the device was enrolled, what vouches for it and whether it is owned", () => {
    const created = (data: Record<string, unknown>) =>
      devices.evolve(devices.initial(), {
        type: 'DeviceCreated',
        created: 1,
        data: { device_id: 'd', prn: 'p', owner_id: '', user_meta: {}, device_meta: {}, ...data },
      } as FoldedEvent);
    const ov = (s: ReturnType<typeof created>) => deviceRecord(s, 'owner').ovmode;
    assert.deepEqual(ov(created({ owner_id: 'u' })), {
      mode: 'owned',
      root_of_trust: 'secret',
      status: 'verified',
    });
    const unowned = created({});
    assert.deepEqual(ov(unowned), { mode: 'claim', root_of_trust: 'secret', status: 'unverified' });
    const claimed = devices.evolve(unowned, {
      type: 'DeviceClaimed',
      created: 2,
      data: { owner_id: 'u' },
    } as FoldedEvent);
    assert.deepEqual(ov(claimed), { mode: 'claim', root_of_trust: 'secret', status: 'verified' });
    assert.deepEqual(ov(created({ owner_id: 'u', certificate: 'PEM' })), {
      mode: 'idevid',
      root_of_trust: 'certificate',
      status: 'verified',
    });
  });

  it('referencedObjects finds every sha256 among string values, once, sorted', () => {
    const a = 'a'.repeat(64);
    const b = `${'0'.repeat(63)}b`;
    assert.deepEqual(
      referencedObjects({ x: b, y: [a, { z: b }], n: 5, short: 'abc', upper: 'A'.repeat(64) }),
      [b, a].sort(),
    );
  });

  it('stepsToMark lists the steps whose flags differ from their device', () => {
    const at = (type: string, data: unknown) => ({ type, data, created: 1 }) as FoldedEvent;
    let device = devices.evolve(
      devices.initial(),
      at('DeviceCreated', {
        device_id: 'd',
        prn: 'p',
        owner_id: 'o',
        owner_prn: 'op',
        owner_nick: 'on',
        nick: 'n',
        secret_sealed: 's',
        challenge: '',
        user_meta: {},
        device_meta: {},
        certificate: null,
      }),
    );
    let trail = trails.evolve(
      trails.initial(),
      at('StepPushed', {
        device_id: 'd',
        owner_prn: 'op',
        rev: 0,
        state: '{}',
        commit_msg: '',
        objects: [],
        public: false,
      }),
    );
    trail = trails.evolve(
      trail,
      at('StepPushed', {
        device_id: 'd',
        owner_prn: 'op',
        rev: 1,
        state: '{}',
        commit_msg: '',
        objects: [],
        public: true,
      }),
    );
    assert.deepEqual(stepsToMark(device, trail), [{ rev: 1, public: false, garbage: false }]);
    device = devices.evolve(device, at('DevicePublicSet', { device_id: 'd', owner_prn: 'op', public: true }));
    assert.deepEqual(stepsToMark(device, trail), [{ rev: 0, public: true, garbage: false }]);
    assert.equal(device.publicProcessed, false);
  });

  it('parseRfc3339 reads RFC 3339 with nanoseconds and offsets, and refuses anything else', () => {
    assert.equal(parseRfc3339('1970-01-01T00:00:01.000000002Z'), 1_000_000_002n);
    assert.equal(parseRfc3339('1970-01-01T02:00:00+02:00'), 0n);
    assert.equal(parseRfc3339('1970-01-01T02:00:00 02:00'), 0n, 'an unencoded + arrives as a space');
    assert.equal(
      parseRfc3339('2026-11-21T10:00:00.5Z')! - parseRfc3339('2026-11-21T10:00:00Z')!,
      500_000_000n,
    );
    assert.equal(parseRfc3339('1970-01-01T00:00:00-01:30'), 5_400_000_000_000n);
    assert.equal(parseRfc3339('2024-02-29T00:00:00Z'), BigInt(Date.UTC(2024, 1, 29)) * 1_000_000n);
    assert.equal(parseRfc3339('0001-01-01T00:00:00Z'), -62_135_596_800_000_000_000n, 'year 1, not 1901');
    assert.equal(
      parseRfc3339('2016-12-31T23:59:60Z'),
      parseRfc3339('2016-12-31T23:59:59.999999999Z'),
      'a leap second is the last instant of the second before',
    );
    for (const bad of [
      'yesterday',
      '2026-11-21',
      '2026-11-21T10:00:00',
      '2026-11-21T10:00:00.1234567890Z',
      // Dates and times that do not exist are refused, not rolled over.
      '2026-11-31T00:00:00Z',
      '2026-02-31T00:00:00Z',
      '2025-02-29T00:00:00Z',
      '2026-13-01T00:00:00Z',
      '2026-00-10T00:00:00Z',
      '2026-11-00T00:00:00Z',
      '2030-01-01T24:00:00Z',
      '2030-01-01T23:60:00Z',
      '2030-01-01T23:59:61Z',
      '2030-01-01T23:00:00+24:00',
      '2030-01-01T23:00:00+01:60',
    ]) {
      assert.equal(parseRfc3339(bad), undefined, bad);
    }
  });
});
