// A batch's writes merged per key (coalesceWrites) leave the read model exactly as the writes one
// by one do: random batches over a few keys, fields and members, applied both ways.
import assert from 'node:assert/strict';
import { MemoryReadStore } from '../../infra/readstore/memory.ts';
import type { Write } from '../../infra/readstore/port.ts';
import { coalesceWrites } from '../../projections/runner.ts';

/** A small deterministic generator (mulberry32): the same batches every run. */
function random(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomWrite(next: () => number): Write {
  const pick = <T>(xs: T[]) => xs[Math.floor(next() * xs.length)]!;
  const key = pick(['a', 'b', 'c']);
  const field = pick(['x', 'y', 'z']);
  const value = pick([1, 2, 7, null]);
  switch (pick(['set', 'patch', 'patch', 'del', 'incr', 'incr', 'zadd', 'zadd', 'zrem'] as const)) {
    case 'set':
      return { op: 'set', key, doc: { [field]: value, w: 1 } };
    case 'patch':
      return { op: 'patch', key, doc: { [field]: value, [pick(['x', 'y'])]: pick([3, null]) } };
    case 'del':
      return { op: 'del', key };
    case 'incr':
      return { op: 'incr', key, field, by: pick([1, 2, -1]) };
    case 'zadd':
      return { op: 'zadd', key, member: field, score: Math.floor(next() * 5) };
    case 'zrem':
      return { op: 'zrem', key, member: field };
  }
}

describe('coalesceWrites (unit)', () => {
  it('leaves the same read model as the writes one by one, over 2,000 random batches', async () => {
    const next = random(42);
    let merged = 0;
    for (let batch = 0; batch < 2000; batch++) {
      const writes = Array.from({ length: 1 + Math.floor(next() * 12) }, () => randomWrite(next));
      const coalesced = coalesceWrites(writes);
      merged += writes.length - coalesced.length;
      const oneByOne = new MemoryReadStore();
      const together = new MemoryReadStore();
      await oneByOne.apply('p', 1, writes, 0, { position: 1, created: 1 }, false);
      await together.apply('p', 1, coalesced, 0, { position: 1, created: 1 }, false);
      assert.deepEqual(await together.dump('p', 1), await oneByOne.dump('p', 1), JSON.stringify(writes));
    }
    assert.ok(merged > 500, `${merged} writes merged away`);
  });

  it('merges the stream catalog shape of a batch: one patch per document, one increment per field', () => {
    const writes: Write[] = [];
    for (let i = 0; i < 10; i++)
      writes.push(
        { op: 'patch', key: `stream:d${i % 2}`, doc: { revision: i, last_type: 'T' } },
        { op: 'zadd', key: 'by-update', member: `d${i % 2}`, score: i },
        { op: 'incr', key: 'totals', field: 'T', by: 1 },
      );
    assert.deepEqual(coalesceWrites(writes), [
      { op: 'patch', key: 'stream:d0', doc: { revision: 8, last_type: 'T' } },
      { op: 'zadd', key: 'by-update', member: 'd0', score: 8 },
      { op: 'incr', key: 'totals', field: 'T', by: 10 },
      { op: 'patch', key: 'stream:d1', doc: { revision: 9, last_type: 'T' } },
      { op: 'zadd', key: 'by-update', member: 'd1', score: 9 },
    ]);
  });
});
