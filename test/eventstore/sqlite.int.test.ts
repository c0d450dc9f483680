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
