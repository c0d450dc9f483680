// The scale-out benchmark's accounting (bench/scale-audit.ts): a partition with two owners is
// caught, a rebalance's empty moments are not taken for one, and the receiver's POSTs are told
// apart as lost, delivered, repeated (same attempt or a new one) or derived twice.
import assert from 'node:assert/strict';
import {
  type Arrival,
  deliveries,
  type GroupSample,
  longestGap,
  ownership,
} from '../../bench/scale-audit.ts';

const sample = (at: number, state: string, members: Record<string, number[]>): GroupSample => ({
  at,
  group: 'hub-dispatcher',
  state,
  members: Object.entries(members).map(([client, partitions]) => ({ client, partitions })),
});

describe('scale-out accounting (unit)', () => {
  it('ownership: a clean handover has no overlap and counts the partitions that moved', () => {
    const o = ownership(
      [
        sample(0, 'Stable', { a: [0, 1, 2, 3] }),
        sample(1, 'PreparingRebalance', { a: [0, 1, 2, 3], b: [] }),
        sample(2, 'CompletingRebalance', { a: [], b: [] }),
        sample(3, 'Stable', { a: [0, 1], b: [2, 3] }),
      ],
      4,
    );
    assert.deepEqual(o.overlaps, []);
    assert.deepEqual(o.uncovered, []);
    assert.equal(o.stable, 2);
    assert.equal(o.handovers, 2, 'partitions 2 and 3 went from a to b');
    assert.equal(o.mostMembers, 2);
  });

  it('ownership: two owners of one partition in a sample, and a stable sample missing one, are reported', () => {
    const o = ownership(
      [sample(5, 'Stable', { a: [0, 1], b: [1, 2] }), sample(6, 'Stable', { a: [0], b: [1] })],
      3,
    );
    assert.deepEqual(o.overlaps, [{ at: 5, partition: 1, owners: ['a', 'b'] }]);
    assert.deepEqual(o.uncovered, [{ at: 6, partitions: [2] }]);
  });

  it('deliveries: lost, repeated under the same or a new attempt id, derived twice, unaccepted', () => {
    const accepted = new Map([
      ['1', 1000],
      ['2', 1000],
      ['3', 1000],
      ['4', 1000],
    ]);
    const arrivals: Arrival[] = [
      { at: 1010, event: 'e1', n: '1', attempt: 'a1' },
      { at: 1020, event: 'e1', n: '1', attempt: 'a1' }, // the same POST again
      { at: 1030, event: 'e1', n: '1', attempt: 'a1b' }, // attempted again
      { at: 1040, event: 'e2', n: '2', attempt: 'a2' },
      { at: 1050, event: 'e2x', n: '2', attempt: 'a2x' }, // write 2 derived a second event
      { at: 1005, event: 'e3', n: '3', attempt: 'a3' },
      { at: 1060, event: 'e9', n: '9', attempt: 'a9' }, // write 9 was never answered 200
    ];
    const d = deliveries(accepted, arrivals);
    assert.equal(d.accepted, 4);
    assert.equal(d.delivered, 3);
    assert.deepEqual(d.lost, ['4']);
    assert.equal(d.duplicates, 2);
    assert.equal(d.sameAttempt, 1);
    assert.equal(d.newAttempt, 1);
    assert.deepEqual(d.derivedTwice, ['2']);
    assert.equal(d.unaccepted, 1);
    assert.deepEqual(
      [...d.latencies],
      [
        ['1', 10],
        ['2', 40],
        ['3', 5],
      ],
    );
  });

  it('longest gap: counted within the window, its edges included', () => {
    assert.deepEqual(longestGap([110, 120, 300, 310, 990], 100, 1000), { ms: 680, at: 310 });
    assert.deepEqual(longestGap([], 100, 400), { ms: 300, at: 100 });
    assert.deepEqual(longestGap([50, 150], 100, 160), { ms: 50, at: 100 });
  });
});
