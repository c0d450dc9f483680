// catchUpSubscription, the following half of every polling adapter, over an array: every event once
// and in order, and with a linger, one read per interval under a steady trickle of appends.
import assert from 'node:assert/strict';
import { catchUpSubscription, type RecordedEvent } from '../../infra/eventstore/port.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** An append-only log whose reads are counted, and a subscription on it. */
function followed(options: { batchSize?: number; lingerMs?: number }) {
  const log: RecordedEvent[] = [];
  const wakers = new Set<() => void>();
  let reads = 0;
  const subscription = catchUpSubscription(
    async (after, max) => {
      reads++;
      return log.slice(after, after + max);
    },
    (wake) => {
      wakers.add(wake);
      return () => wakers.delete(wake);
    },
    0,
    { ...options, pollMs: 10_000 },
  );
  const append = () => {
    const position = log.length + 1;
    log.push({
      id: `e${position}`,
      type: 'T',
      stream: 's',
      revision: position - 1,
      position,
      data: {},
      metadata: {},
      created: 0,
    });
    for (const wake of wakers) wake();
  };
  const seen: { position: number; at: number }[] = [];
  const consumed = (async () => {
    for await (const page of subscription)
      for (const e of page) seen.push({ position: e.position, at: performance.now() });
  })();
  return {
    append,
    seen,
    reads: () => reads,
    close: async () => {
      subscription.close();
      await consumed;
    },
  };
}

describe('catchUpSubscription (unit)', () => {
  it('with a linger, reads a steady trickle once per interval; without, once per append; each event once, in order', async () => {
    const results: Record<string, { reads: number; appended: number }> = {};
    for (const lingerMs of [0, 25]) {
      const f = followed({ lingerMs });
      const end = performance.now() + 250;
      let appended = 0;
      while (performance.now() < end) {
        f.append();
        appended++;
        await sleep(1);
      }
      for (let waited = 0; waited < 2000 && f.seen.length < appended; waited += 5) await sleep(5);
      await f.close();
      assert.deepEqual(
        f.seen.map((s) => s.position),
        Array.from({ length: appended }, (_, i) => i + 1),
      );
      results[lingerMs] = { reads: f.reads(), appended };
    }
    // 250 ms at 25 ms: about ten reads (the timers' lateness only lowers it).
    assert.ok(results[25]!.reads <= 14, JSON.stringify(results));
    // Without a linger most appends are read on their own.
    assert.ok(results[0]!.reads > results[0]!.appended / 2, JSON.stringify(results));
  });

  it('reads the first append after a quiet interval at once, and catches up without waiting', async () => {
    const f = followed({ lingerMs: 300, batchSize: 10 });
    await sleep(400); // quiet for longer than the linger since the first (empty) read
    const t = performance.now();
    f.append();
    for (let waited = 0; waited < 2000 && f.seen.length < 1; waited += 2) await sleep(2);
    assert.equal(f.seen.length, 1);
    assert.ok(f.seen[0]!.at - t < 150, `first after a quiet interval: ${f.seen[0]!.at - t} ms`);
    // Thirty at once, within the linger of that read: they wait it out, then come as full pages
    // read one after another, not a linger apart.
    for (let i = 0; i < 30; i++) f.append();
    for (let waited = 0; waited < 3000 && f.seen.length < 31; waited += 5) await sleep(5);
    assert.equal(f.seen.length, 31);
    assert.ok(f.seen[1]!.at - f.seen[0]!.at >= 250, `the linger: ${f.seen[1]!.at - f.seen[0]!.at} ms`);
    assert.ok(f.seen[30]!.at - f.seen[1]!.at < 150, `catching up: ${f.seen[30]!.at - f.seen[1]!.at} ms`);
    await f.close();
  });
});
