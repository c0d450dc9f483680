// Every per-caller table of a process is bounded by HUB_CALLER_CACHE_ENTRIES: a burst of new
// callers cannot grow it, and the least recently used leave first.
import assert from 'node:assert/strict';
import { MemoryLastWrites } from '../../api/consistency.ts';
import { MemoryFixedWindows, MemoryTokenBuckets } from '../../infra/rate-limits.ts';

const sizeOf = (o: object, field: string) => (o as Record<string, { size: number }>)[field]!.size;

describe('per-caller tables are bounded (unit)', () => {
  it('rate-limit buckets: at most the bound, the recent callers kept with their spent budget', () => {
    const limiter = new MemoryTokenBuckets(1, 2, 1000);
    limiter.take('steady');
    limiter.take('steady');
    for (let i = 0; i < 5000; i++) {
      limiter.take(`caller-${i}`);
      if (i % 500 === 0) limiter.take('steady'); // used now and then: never the least recent
    }
    assert.equal(sizeOf(limiter, 'buckets'), 1000);
    assert.ok(limiter.take('steady') > 0, "the steady caller's spent budget was kept");
  });

  it('login windows and last writes: at most the bound, the newest kept', async () => {
    const windows = new MemoryFixedWindows(1000);
    const writes = new MemoryLastWrites(1000);
    for (let i = 0; i < 5000; i++) {
      await windows.hit(`k${i}`, 10, 60_000);
      await writes.record(`c${i}`, i + 1);
    }
    assert.equal(sizeOf(windows, 'windows'), 1000);
    assert.equal(sizeOf(writes, 'positions'), 1000);
    assert.equal(await writes.get('c4999'), 5000);
    assert.equal(await writes.get('c0'), 0, 'the oldest left');
  });
});
