import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Write } from '../../infra/readstore/port.ts';
import { SqliteReadStore } from '../../infra/readstore/sqlite.ts';
import { openDerivedDatabase } from '../../infra/sqlite.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { memoryLogger } from '../harness.ts';
import { appendEvents, catalogNamed, newEventStore, readStoreContract } from './contract.ts';

readStoreContract('embedded (SQLite)', async () => {
  const derived = openDerivedDatabase(join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite'));
  return {
    open: async () => new SqliteReadStore(derived),
    cleanup: () => derived.close(),
  };
});

describe('SQLite read store: kept across a reopen (int)', () => {
  it('a reopened file answers the documents, indexes, checkpoints and active generation it held', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite');
    const first = openDerivedDatabase(path);
    const rs = new SqliteReadStore(first);
    const writes: Write[] = [
      { op: 'set', key: 'doc:1', doc: { a: 1, b: 'two' } },
      { op: 'zadd', key: 'idx', member: 'm1', score: 5 },
    ];
    assert.equal(await rs.apply('kept', 2, writes, 0, { position: 9, created: 1234 }, false), 'ok');
    await rs.activate('kept', 2);
    await rs.close();
    await first.close();
    const again = openDerivedDatabase(path);
    const reopened = new SqliteReadStore(again);
    try {
      assert.equal(await reopened.activeGeneration('kept'), 2);
      assert.deepEqual(await reopened.checkpoint('kept', 2), { position: 9, created: 1234 });
      assert.deepEqual(await reopened.get('kept', 2, 'doc:1'), { a: 1, b: 'two' });
      assert.deepEqual(await reopened.range('kept', 2, 'idx'), ['m1']);
    } finally {
      await reopened.close();
      await again.close();
    }
  });

  it('a long catch-up says in the log where it starts, how far it is, and when it is done', async () => {
    const derived = openDerivedDatabase(join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite'));
    const store = newEventStore();
    const { logger, lines } = memoryLogger('info');
    try {
      const head = await appendEvents(store, 12_000);
      const runner = new ProjectionRunner({
        store,
        readStore: new SqliteReadStore(derived),
        projection: catalogNamed('built'),
        logger,
      });
      await runner.catchUpOnce();
      const said = lines().join('\n');
      assert.match(said, new RegExp(`projection built: building from position 0 to ${head}`));
      assert.match(said, new RegExp(`projection built: built, caught up at position ${head}`));
    } finally {
      await store.close();
      await derived.close();
    }
  });
});
