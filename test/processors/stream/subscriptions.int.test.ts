// The processor's view of an owner's subscriptions on the embedded read stores (in memory and the
// real SQLite): cached until the projector writes the webhooks model or switches its generation,
// so a change holds at once without a read of the model for every batch.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MemoryReadStore } from '../../../infra/readstore/memory.ts';
import type { ReadStore, Write } from '../../../infra/readstore/port.ts';
import { SqliteReadStore } from '../../../infra/readstore/sqlite.ts';
import { openDerivedDatabase } from '../../../infra/sqlite.ts';
import { projectedSubscriptions } from '../../../processors/stream/processor.ts';
import { webhookKeys } from '../../../projections/webhooks.ts';

const OWNER = 'prn:::accounts:/alice';

/** Counts the model's reads a store answers; each answer waits for `gate` (open unless shut). */
function counted(store: ReadStore) {
  let reads = 0;
  let gate: Promise<void> = Promise.resolve();
  const range = store.range.bind(store);
  store.range = async (...args) => {
    reads++;
    const ids = await range(...args);
    await gate;
    return ids;
  };
  return {
    store,
    reads: () => reads,
    shut: () => {
      let open = () => {};
      gate = new Promise<void>((resolve) => {
        open = resolve;
      });
      return open;
    },
  };
}

const subscription = (id: string, url: string): Write[] => [
  { op: 'set', key: webhookKeys.record(id), doc: { id, owner: OWNER, url, enabled: true } },
  { op: 'zadd', key: webhookKeys.ofOwner(OWNER), member: id, score: 1 },
];

for (const [name, open] of [
  ['memory', () => new MemoryReadStore()],
  [
    'SQLite',
    () =>
      new SqliteReadStore(openDerivedDatabase(join(mkdtempSync(join(tmpdir(), 'hub-subs-')), 'd.sqlite'))),
  ],
] as const) {
  describe(`processor subscriptions until the model is written: ${name} (int)`, () => {
    it('reads once, then again only after a write to the webhooks model or a switch of its generation', async () => {
      const { store, reads } = counted(open());
      let at = 0;
      const apply = (projection: string, writes: Write[], generation = 1) =>
        store.apply(projection, generation, writes, at, { position: ++at, created: at }, false);
      await apply('webhooks', subscription('w1', 'https://a.example/'));
      const subs = projectedSubscriptions(store, 'until-written');

      assert.deepEqual(
        (await subs.of(OWNER)).map((s) => `${s.id} ${s.enabled}`),
        ['w1 true'],
      );
      await subs.of(OWNER);
      assert.equal(reads(), 1); // the second batch used the list

      // Batches that write nothing to it, or write another model, leave the list as it was.
      await apply('webhooks', []);
      at = 0;
      await store.apply(
        'devices',
        1,
        [{ op: 'set', key: 'device:x', doc: { a: 1 } }],
        0,
        { position: 1, created: 1 },
        false,
      );
      at = 2;
      await subs.of(OWNER);
      assert.equal(reads(), 1);

      // A subscription changed: the next batch sees it.
      await apply('webhooks', [{ op: 'patch', key: webhookKeys.record('w1'), doc: { enabled: false } }]);
      assert.deepEqual(
        (await subs.of(OWNER)).map((s) => `${s.id} ${s.enabled}`),
        ['w1 false'],
      );
      assert.equal(reads(), 2);

      // A replay built generation 2 and switched reads to it.
      await store.apply(
        'webhooks',
        2,
        subscription('w2', 'https://c.example/'),
        0,
        { position: 9, created: 9 },
        false,
      );
      // Its writes ended the list; read again from generation 1, still the active one…
      assert.deepEqual(
        (await subs.of(OWNER)).map((s) => `${s.id} ${s.enabled}`),
        ['w1 false'],
      );
      assert.equal(reads(), 3);
      await store.activate('webhooks', 2);
      // …the switch, with no write after it, ends that list too.
      assert.deepEqual(
        (await subs.of(OWNER)).map((s) => `${s.id} ${s.enabled}`),
        ['w2 true'],
      );
      assert.equal(reads(), 4);
      await store.close();
    });

    it('a list being read when the model is written is not kept', async () => {
      const { store, reads, shut } = counted(open());
      await store.apply(
        'webhooks',
        1,
        subscription('w1', 'https://a.example/'),
        0,
        { position: 1, created: 1 },
        false,
      );
      const subs = projectedSubscriptions(store, 'until-written');
      const release = shut();
      const reading = subs.of(OWNER);
      await new Promise((r) => setImmediate(r)); // its index read, its answer held…
      await store.apply(
        'webhooks',
        1,
        subscription('w2', 'https://b.example/'),
        1,
        { position: 2, created: 2 },
        false,
      );
      release(); // …past the write that added w2
      assert.deepEqual(
        (await reading).map((s) => s.id),
        ['w1'],
      );
      assert.deepEqual(
        (await subs.of(OWNER)).map((s) => s.id),
        ['w1', 'w2'],
      );
      assert.equal(reads(), 2);
      await store.close();
    });
  });
}
