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
