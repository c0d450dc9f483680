// The event follower with a handler that takes a batch and makes it durable later (the relay's
// hand-off to the processor of its process): its checkpoint moves only past batches made durable,
// in order, and a batch that is not is read again, with every batch after it. A real SQLite event
// store.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryCheckpoints } from '../../infra/checkpoints.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { EventFollower, type FollowerOptions } from '../../processors/followers/follower.ts';
import { memoryLogger } from '../harness.ts';

const until = async (what: () => boolean, why: () => string) => {
  for (const end = Date.now() + 5000; !what() && Date.now() < end; )
    await new Promise((r) => setTimeout(r, 10));
  assert.ok(what(), why());
};

/** A follower, a batch at a time, of a fresh store holding three events (positions 1 to 3). */
const following = async (handle: FollowerOptions['handle']) => {
  const store = new SqliteEventStore(join(mkdtempSync(join(tmpdir(), 'hub-follower-')), 'events.sqlite'));
  for (let i = 0; i < 3; i++)
    await store.append('probe-1', [{ id: randomUUID(), type: 'Probed', data: { i } }]);
  const checkpoints = new MemoryCheckpoints();
  const follower = new EventFollower({
    name: 'durable-later',
    store,
    checkpoints,
    logger: memoryLogger().logger,
    batchSize: 1,
    handle,
  });
  return { store, checkpoints, follower };
};

describe('event follower, batches durable later (int)', function () {
  this.timeout(30_000);

  it('moves its checkpoint only past batches made durable, in order, and reads a batch that was not again, with those after it', async () => {
    const read: number[] = [];
    const settles: ((err?: Error) => void)[] = [];
    const { store, checkpoints, follower } = await following(async (batch) => {
      read.push(batch[0]!.position);
      const durable = new Promise<void>((resolve, reject) =>
        settles.push((err) => (err ? reject(err) : resolve())),
      );
      return { durable };
    });
    const why = () => `read ${JSON.stringify(read)}`;
    follower.start();
    try {
      await until(() => read.length === 3, why);
      assert.deepEqual(read, [1, 2, 3], 'taken one after the other, none waiting for the last to be durable');
      settles[1]!(); // the second durable, the first not yet
      settles[0]!(new Error('the dispatcher did not store its jobs'));
      await until(() => read.length === 6, why);
      assert.deepEqual(read.slice(3), [1, 2, 3], 'read again from the batch that was not durable');
      // The second round: the first batch never durable, the later ones are.
      settles[4]!();
      settles[5]!();
    } finally {
      const stopped = follower.stop(); // waits a while for the first, then saves what is durable
      settles[3]?.(new Error('stopping'));
      await stopped;
      store.close?.();
    }
    assert.equal(await checkpoints.get('durable-later'), 0, 'never past a batch not durable');
  });

  it('saves the last batch made durable at its stop', async () => {
    let taken = 0;
    const { store, checkpoints, follower } = await following(async () => {
      taken++;
      return { durable: new Promise<void>((r) => setTimeout(r, 50)) };
    });
    follower.start();
    await until(
      () => taken === 3,
      () => `taken ${taken}`,
    );
    await follower.stop();
    store.close?.();
    assert.equal(await checkpoints.get('durable-later'), 3);
  });
});
