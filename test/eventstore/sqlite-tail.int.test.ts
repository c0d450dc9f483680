// The embedded store serves the newest events from memory and older ones from the file; a reader
// cannot tell which: same events, same order, across the boundary and after a restart.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';

describe('SQLite event store: in-memory tail (int)', () => {
  it('reads the same events across the memory/file boundary and after a restart', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'hub-tail-')), 'events.sqlite');
    const store = new SqliteEventStore(file, { tailEvents: 10 });
    for (let i = 0; i < 50; i++)
      await store.append(`s-${i % 3}`, [{ id: randomUUID(), type: 'Tested', data: { i } }]);
    const all = await store.readAll(0, 100); // the oldest from the file, the newest 10 to 12 from memory
    assert.deepEqual(
      all.map((e) => (e.data as { i: number }).i),
      [...Array(50).keys()],
    );
    assert.deepEqual(
      (await store.readAll(45, 100)).map((e) => e.position),
      [46, 47, 48, 49, 50],
    );
    assert.deepEqual(
      (await store.readAll(38, 4)).map((e) => e.position),
      [39, 40, 41, 42],
    );
    assert.deepEqual(await store.readAll(50, 10), []);
    await store.close();
    const reopened = new SqliteEventStore(file, { tailEvents: 10 });
    assert.deepEqual(await reopened.readAll(0, 100), all);
    await reopened.close();
  });
});
