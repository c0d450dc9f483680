// A group member's offset commits (OffsetCommits in the Kafka bus), without a broker: what is
// committed, and when, as chunks finish at once or once durable, in order, or fail to be.
import assert from 'node:assert/strict';
import { OffsetCommits } from '../../infra/bus/kafka.ts';
import { createLogger } from '../../infra/telemetry.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Commits recorded as "partition:offset", flushed by hand (the interval is an hour). */
function commits() {
  const sent: string[] = [];
  const c = new OffsetCommits({
    topic: 't',
    intervalMs: 3_600_000,
    commit: async (offsets) => {
      for (const o of offsets) sent.push(`${o.partition}:${o.offset}`);
    },
    log: createLogger('silent'),
  });
  c.keep([0, 1]);
  return { c, sent };
}

/** A promise settled from outside. */
function later() {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {}); // rejected on purpose in the cases below
  return { promise, resolve, reject };
}

describe('Kafka offset commits (unit)', () => {
  it('a chunk finished at once after one waiting to be durable commits only once that one is', async () => {
    const { c, sent } = commits();
    const first = later();
    c.finishWhen(0, '4', first.promise);
    c.finish(0, '9');
    c.finish(1, '2'); // another partition is not held back
    await sleep(0);
    await c.flush();
    assert.deepEqual(sent, ['1:3']);
    first.resolve();
    await sleep(0);
    await c.flush();
    assert.deepEqual(sent, ['1:3', '0:10']);
    c.stop();
  });

  it('after a chunk that was not made durable, nothing more of its partition commits until the next join', async () => {
    const { c, sent } = commits();
    c.finish(0, '1');
    const failing = later();
    c.finishWhen(0, '4', failing.promise);
    c.finish(0, '6'); // waiting behind it
    failing.reject(new Error('not stored'));
    await sleep(0);
    c.finish(0, '9'); // finished after the failure was known
    c.finishWhen(0, '12', Promise.resolve());
    await sleep(0);
    await c.flush();
    // Offset 2 is the failed chunk's first: its next holder reads from there again.
    assert.deepEqual(sent, ['0:2']);
    // A join: the partition's holder starts from the committed offset; its chunks commit again.
    c.keep([0]);
    c.finish(0, '3');
    await c.flush();
    assert.deepEqual(sent, ['0:2', '0:4']);
    c.stop();
  });

  it('a chunk handed in after its partition failed may fail too: its failure is taken, not left unhandled', async () => {
    const { c } = commits();
    const unhandled: unknown[] = [];
    const listener = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', listener);
    try {
      const failing = later();
      c.finishWhen(0, '4', failing.promise);
      failing.reject(new Error('not stored'));
      await sleep(0);
      // The next chunk's durable part, as the processor answers (its states' save), failing later.
      let reject!: (err: Error) => void;
      c.finishWhen(0, '6', new Promise<void>((_, rej) => (reject = rej)));
      reject(new Error('Redis went away'));
      await sleep(10);
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', listener);
      c.stop();
    }
  });
});
