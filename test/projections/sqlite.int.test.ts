import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteReadStore } from '../../infra/readstore/sqlite.ts';
import { openDerivedDatabase } from '../../infra/sqlite.ts';
import { readStoreContract } from './contract.ts';

readStoreContract('embedded (SQLite)', async () => {
  const derived = openDerivedDatabase(join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite'));
  return {
    open: async () => new SqliteReadStore(derived),
    cleanup: () => derived.close(),
  };
});
