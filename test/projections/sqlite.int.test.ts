import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import type { Write } from '../../infra/readstore/port.ts';
import { SqliteReadStore } from '../../infra/readstore/sqlite.ts';
import { type DerivedDatabase, openDerivedDatabase } from '../../infra/sqlite.ts';
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

  it('a file written with a row per field (before 2026-11) opens with the same documents, patched in place after', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite');
    const old = new DatabaseSync(path);
    // The first layout, as its migration left it, with a document and a counter in it.
    old.exec(`CREATE TABLE migrations (component TEXT PRIMARY KEY, version INTEGER NOT NULL) STRICT;
      INSERT INTO migrations VALUES ('readstore', 1);
      CREATE TABLE rm_generations (gen INTEGER PRIMARY KEY, projection TEXT NOT NULL, generation INTEGER NOT NULL,
        position INTEGER NOT NULL DEFAULT 0, created INTEGER NOT NULL DEFAULT 0, UNIQUE (projection, generation)) STRICT;
      CREATE TABLE rm_projections (projection TEXT PRIMARY KEY, active INTEGER NOT NULL DEFAULT 1, replay_target INTEGER) STRICT;
      CREATE TABLE rm_fields (gen INTEGER NOT NULL, key TEXT NOT NULL, field TEXT NOT NULL, value TEXT NOT NULL,
        PRIMARY KEY (gen, key, field)) STRICT, WITHOUT ROWID;
      CREATE TABLE rm_index (gen INTEGER NOT NULL, key TEXT NOT NULL, member TEXT NOT NULL, score REAL NOT NULL,
        PRIMARY KEY (gen, key, member)) STRICT, WITHOUT ROWID;
      CREATE INDEX rm_index_by_score ON rm_index (gen, key, score, member);
      INSERT INTO rm_generations VALUES (1, 'old', 1, 7, 99);
      INSERT INTO rm_fields VALUES (1, 'device:1', 'nick', '"lamp"'), (1, 'device:1', 'meta', '{"a":["x",1]}'),
        (1, 'device:1', 'public', 'true'), (1, 'totals', 'DeviceMetaUpdated', '41');`);
    old.close();
    const derived = openDerivedDatabase(path);
    const rs = new SqliteReadStore(derived);
    try {
      assert.deepEqual(await rs.checkpoint('old', 1), { position: 7, created: 99 });
      assert.deepEqual(await rs.get('old', 1, 'device:1'), {
        nick: 'lamp',
        meta: { a: ['x', 1] },
        public: true,
      });
      const writes: Write[] = [
        { op: 'patch', key: 'device:1', doc: { meta: { b: 2 }, public: null } },
        { op: 'incr', key: 'totals', field: 'DeviceMetaUpdated', by: 1 },
      ];
      assert.equal(await rs.apply('old', 1, writes, 7, { position: 8, created: 100 }, false), 'ok');
      // A patched field is replaced, not merged into; a null removes it.
      assert.deepEqual(await rs.get('old', 1, 'device:1'), { nick: 'lamp', meta: { b: 2 } });
      assert.deepEqual(await rs.get('old', 1, 'totals'), { DeviceMetaUpdated: 42 });
    } finally {
      await rs.close();
      await derived.close();
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

describe('SQLite derived state: savepoints in memory (int)', () => {
  it("a batch's savepoint journal past SQLite's spill size (64 KiB) stays in memory: no temp file written", async () => {
    const derived = openDerivedDatabase(join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite'));
    try {
      derived.migrate('spill', ['CREATE TABLE spill (id INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT']);
      const insert = derived.db.prepare('INSERT INTO spill (id, body) VALUES (?, ?)');
      // Pages written in the open transaction, then changed again by a later batch (savepoint): the
      // savepoint's journal keeps their old images, 200 pages, which SQLite spills to a temp file
      // (deleted at once, open meanwhile) unless temp_store is MEMORY.
      derived.transaction(() => {
        for (let i = 0; i < 200; i++) insert.run(i, 'a'.repeat(3000));
      });
      const tempFiles = derived.transaction(() => {
        derived.db.exec(`UPDATE spill SET body = '${'b'.repeat(3000)}'`);
        return readdirSync('/proc/self/fd').filter((fd) => {
          try {
            return /etilqs_/.test(readlinkSync(`/proc/self/fd/${fd}`));
          } catch {
            return false;
          }
        });
      });
      assert.deepEqual(tempFiles, []);
      assert.equal(
        (derived.db.prepare("SELECT count(*) AS n FROM spill WHERE body LIKE 'b%'").get() as { n: number }).n,
        200,
      );
    } finally {
      await derived.close();
    }
  });
});

describe('SQLite read store: documents held for the commit (int)', () => {
  const rowOf = (derived: DerivedDatabase, key: string) =>
    derived.db.prepare('SELECT doc FROM rm_docs WHERE key = ?').get(key) as { doc: string } | undefined;
  /** One batch of the projection 'held' (generation 1), moving its checkpoint from `from` to the next. */
  const batch = (rs: SqliteReadStore, writes: Write[], from: number) =>
    rs.apply('held', 1, writes, from, { position: from + 1, created: 0 }, false);
  /** Past the derived state's commit (every 500 ms). */
  const committed = () => new Promise((r) => setTimeout(r, 700));

  it('batches of one window change a document in memory, read at once; the commit writes it once', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite');
    const derived = openDerivedDatabase(path);
    const rs = new SqliteReadStore(derived);
    const batches: Write[][] = [
      [{ op: 'set', key: 'device:1', doc: { a: 1, nick: 'lamp' } }],
      [
        { op: 'patch', key: 'device:1', doc: { b: 2 } },
        { op: 'incr', key: 'totals', field: 'x', by: 2 },
      ],
      [
        { op: 'patch', key: 'device:1', doc: { a: null, b: 3 } },
        { op: 'incr', key: 'totals', field: 'x', by: 1 },
        { op: 'patch', key: 'device:2', doc: { c: 'new' } },
      ],
    ];
    for (const [i, writes] of batches.entries()) assert.equal(await batch(rs, writes, i), 'ok');
    assert.deepEqual(await rs.get('held', 1, 'device:1'), { nick: 'lamp', b: 3 });
    assert.deepEqual(await rs.get('held', 1, 'totals'), { x: 3 });
    assert.deepEqual(await rs.get('held', 1, 'device:2'), { c: 'new' });
    assert.equal(rowOf(derived, 'device:1'), undefined, 'held until the commit');
    await derived.close();
    const again = openDerivedDatabase(path);
    const reopened = new SqliteReadStore(again);
    try {
      assert.deepEqual(JSON.parse(rowOf(again, 'device:1')!.doc), { nick: '"lamp"', b: '3' });
      assert.deepEqual(await reopened.get('held', 1, 'totals'), { x: 3 });
      assert.deepEqual(await reopened.checkpoint('held', 1), { position: 3, created: 0 });
      // A patch over a stored row (not held): merged into it when written.
      await batch(reopened, [{ op: 'patch', key: 'device:1', doc: { b: null, d: [1] } }], 3);
      assert.deepEqual(await reopened.get('held', 1, 'device:1'), { nick: 'lamp', d: [1] });
      assert.deepEqual(await reopened.dump('held', 1), {
        'device:1': { nick: 'lamp', d: [1] },
        'device:2': { c: 'new' },
        totals: { x: 3 },
      });
    } finally {
      await again.close();
    }
  });

  it('a transaction SQLite rolled back by itself takes its held documents with it, not into the next', async () => {
    const derived = openDerivedDatabase(join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite'));
    const rs = new SqliteReadStore(derived);
    try {
      await batch(rs, [{ op: 'set', key: 'kept', doc: { v: 1 } }], 0);
      await committed();
      await batch(rs, [{ op: 'incr', key: 'kept', field: 'n', by: 1 }], 1);
      // As SQLite does on an I/O error or a full disk mid-statement: the whole transaction goes.
      derived.db.exec('ROLLBACK');
      assert.deepEqual(await rs.checkpoint('held', 1), { position: 1, created: 0 });
      // The batch derived again from the checkpoint, then committed: counted once.
      await batch(rs, [{ op: 'incr', key: 'kept', field: 'n', by: 1 }], 1);
      await committed();
      assert.deepEqual(await rs.get('held', 1, 'kept'), { v: 1, n: 1 });
    } finally {
      await derived.close();
    }
  });

  it('a commit that fails forgets the held documents with the checkpoint moved in their window', async () => {
    const derived = openDerivedDatabase(join(mkdtempSync(join(tmpdir(), 'hub-rm-')), 'derived.sqlite'));
    // Registered before the read store's: its documents are still held when this one fails.
    let failing = false;
    derived.beforeCommit({
      flush: () => {
        if (failing) throw new Error('disk full');
      },
      discard: () => {},
    });
    const rs = new SqliteReadStore(derived);
    try {
      await batch(rs, [{ op: 'set', key: 'kept', doc: { v: 1 } }], 0);
      await committed();
      failing = true;
      const warned = new Promise<Error>((resolve) => process.once('warning', resolve));
      await batch(rs, [{ op: 'patch', key: 'kept', doc: { v: 2 } }], 1);
      assert.deepEqual(await rs.get('held', 1, 'kept'), { v: 2 });
      assert.match((await warned).message, /derived state not committed.*disk full/);
      failing = false;
      assert.deepEqual(await rs.get('held', 1, 'kept'), { v: 1 });
      assert.deepEqual(await rs.checkpoint('held', 1), { position: 1, created: 0 });
    } finally {
      await derived.close();
    }
  });
});
