// The schema-checked store refuses invalid events before they reach the adapter, and reads
// events stored under an older schema version as the current version.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SchemaCheckedStore } from '../../infra/eventstore/schema-checked.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { SchemaError, SchemaRegistry } from '../../schemas/registry.ts';

const FIXTURES = new URL('../fixtures/schemas/events', import.meta.url).pathname;

describe('schema-checked event store (int)', () => {
  const file = join(mkdtempSync(join(tmpdir(), 'hub-schema-')), 'events.sqlite');
  const raw = new SqliteEventStore(file);
  const store = new SchemaCheckedStore(raw, SchemaRegistry.load([FIXTURES]));
  after(() => store.close());

  it('refuses an invalid event naming the field, and stores nothing', async () => {
    await assert.rejects(
      store.append('device-1', [
        { id: randomUUID(), type: 'DeviceMetaReported', data: { device_id: 'd1', meta: { a: 1 } } },
      ]),
      (err: unknown) => err instanceof SchemaError && err.field === 'meta.a',
    );
    await assert.rejects(
      store.append('device-1', [{ id: randomUUID(), type: 'Unknown', data: {} }]),
      (err: unknown) => err instanceof SchemaError && err.field === 'type',
    );
    assert.equal(await raw.head(), 0);
  });

  it('stamps the schema version and upcasts older stored events on read', async () => {
    await store.append('device-1', [
      { id: randomUUID(), type: 'DeviceMetaReported', data: { device_id: 'd1', meta: { a: '1' } } },
    ]);
    // An event stored by an older deployment, under v1.
    await raw.append('device-1', [
      {
        id: randomUUID(),
        type: 'DeviceMetaReported',
        data: { device_id: 'd1', meta: { b: '2' } },
        metadata: { schema_version: 1 },
      },
    ]);
    const [current, old] = await store.readStream('device-1');
    assert.equal(current!.metadata.schema_version, 2);
    assert.deepEqual(
      { ...(old!.data as object) },
      { device_id: 'd1', meta: { b: '2' }, removed: [], reported_by: null },
    );
  });

  it('passes snapshots through, ignoring those folded under other schema versions', async () => {
    const snapshot = { kind: 'device', shape: '1.abc', revision: 1, state: { meta: { a: '1' } } };
    await store.saveSnapshot('device-1', snapshot);
    assert.deepEqual(await store.readSnapshot('device-1', 'device'), snapshot);
    // Stored with the versions it was folded under; another set of schemas reads none.
    assert.match((await raw.readSnapshot('device-1', 'device'))!.shape, /^1\.abc\+[0-9a-f]{12}$/);
    const otherSchemas = new SchemaCheckedStore(raw, SchemaRegistry.load());
    assert.equal(await otherSchemas.readSnapshot('device-1', 'device'), undefined);
  });
});
