import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { eventStoreContract } from './contract.ts';

eventStoreContract(
  'embedded SQLite',
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    return {
      open: async () => new SqliteEventStore(join(dir, 'events.sqlite')),
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
  { sharedWriters: false },
);

// What the hub runs: commits on a writer thread, reads on the caller's.
eventStoreContract(
  'embedded SQLite, writer thread',
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    return {
      open: async () => new SqliteEventStore(join(dir, 'events.sqlite'), { writerThread: true }),
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
  { sharedWriters: false },
);

// The queue posted every two appends: the thread merges what waits into one transaction and
// answers each batch for its own appends (expected revisions and ids hold across the merge).
eventStoreContract(
  'embedded SQLite, writer thread, posted every two appends',
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    return {
      open: async () =>
        new SqliteEventStore(join(dir, 'events.sqlite'), { writerThread: true, postEvery: 2 }),
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
  { sharedWriters: false },
);

// Under load, an API thread's answer waited for every subscriber's work on the commit (the
// projector, the event log, the actors), which ran first in the same turn of the main thread.
describe('SQLite event store: subscribers after appenders (int)', () => {
  it('wakes its subscribers only after the turn in which the appenders heard of the commit', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    const store = new SqliteEventStore(join(dir, 'events.sqlite'), { writerThread: true });
    const order: string[] = [];
    const subscription = store.subscribe(0);
    const consumed = (async () => {
      for await (const page of subscription) {
        order.push(`subscriber read ${page.length}`);
        return;
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 50)); // the subscription waits, caught up
    // As an API thread's channel does: the answer goes out at the end of the appender's turn.
    await store
      .append('s-1', [{ id: randomUUID(), type: 'Tested', data: {} }])
      .then(
        () => new Promise<void>((resolve) => setImmediate(() => resolve(void order.push('answer sent')))),
      );
    await consumed;
    assert.deepEqual(order, ['answer sent', 'subscriber read 1']);
    subscription.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
});
