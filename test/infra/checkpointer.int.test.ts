import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { BACKSTOP_PAGES, unwatch, watch } from '../../infra/checkpointer.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { SqliteDeliveryStore } from '../../processors/delivery/sqlite.ts';
import { job } from '../processors/delivery/contract.ts';

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
      await unwatch(path);
      db.close();
    }
  });

  // A hub restarted on its data directory: the last connection to close checkpoints the log and
  // removes it, holding the file meanwhile. Were it the checkpointer's, closing a moment after the
  // store's, the store reopened at once would find the file locked.
  it('a store closed with its log full reopens at once on the same file, every time', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-reopen-'));
    const body = 'x'.repeat(3000);
    for (let i = 0; i < 6; i++) {
      const events = new SqliteEventStore(join(dir, 'events.sqlite'), { writerThread: true });
      // One commit each: the log holds every commit's pages, which the checkpointer has not had
      // the time to copy back.
      for (let k = 0; k < 400; k++)
        await events.append(`s-${i}-${k}`, [
          { id: randomUUID(), type: 'filled', data: { body }, metadata: {} },
        ]);
      await events.close();
    }
    for (let i = 0; i < 6; i++) {
      const deliveries = new SqliteDeliveryStore(join(dir, 'deliveries.sqlite'), { retentionMs: 60_000 });
      for (let k = 0; k < 400; k++) await deliveries.enqueue([{ ...job('sub'), owner: body }]);
      await deliveries.close();
    }
    const events = new SqliteEventStore(join(dir, 'events.sqlite'));
    assert.equal(await events.head(), 2400);
    await events.close();
  });

  it('a store closed twice at once closes once, and refuses writes after', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-close-'));
    const events = new SqliteEventStore(join(dir, 'events.sqlite'), { writerThread: true });
    await events.append('s-1', [{ id: randomUUID(), type: 'filled', data: {}, metadata: {} }]);
    await Promise.all([events.close(), events.close()]);
    await assert.rejects(
      events.append('s-1', [{ id: randomUUID(), type: 'filled', data: {}, metadata: {} }]),
      /closed/,
    );
    const deliveries = new SqliteDeliveryStore(join(dir, 'deliveries.sqlite'), { retentionMs: 60_000 });
    const j = job('sub');
    await deliveries.enqueue([j]);
    await Promise.all([deliveries.close(), deliveries.close()]);
    await assert.rejects(deliveries.finish(j, null, null), /closed/);
  });
});
