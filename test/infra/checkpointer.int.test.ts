import assert from 'node:assert/strict';
import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { BACKSTOP_PAGES, unwatch, watch } from '../../infra/checkpointer.ts';

describe('SQLite checkpoints on their own thread (int)', () => {
  it('copies a file’s log back into it while its writer only commits', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'hub-checkpointer-')), 'file.sqlite');
    const db = new DatabaseSync(path);
    db.exec(`PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = ${BACKSTOP_PAGES};
      CREATE TABLE t (body TEXT NOT NULL) STRICT;`);
    const insert = db.prepare('INSERT INTO t (body) VALUES (?)');
    db.exec('BEGIN');
    for (let i = 0; i < 500; i++) insert.run('x'.repeat(2000)); // ~1 MB: far below the backstop
    db.exec('COMMIT');
    const before = statSync(path).size;
    assert.ok(before < 100_000, `the commit stays in the log (the file is ${before} bytes)`);
    watch(path);
    try {
      const deadline = Date.now() + 5000;
      while (statSync(path).size < 1_000_000 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      assert.ok(
        statSync(path).size >= 1_000_000,
        `checkpointed into the file (${statSync(path).size} bytes)`,
      );
      assert.equal((db.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, 500);
    } finally {
      unwatch(path);
      db.close();
    }
  });
});
