// Aggregates load from their snapshot and the events after it: the same state as folding the whole
// stream, read in a fraction of the events; the policy writes one every N events; a snapshot of
// another shape is ignored. On the embedded SQLite store as the hub runs it (a writer thread, this
// process its only writer) and on PostgreSQL (shared by processes), the events read counted at the
// real store.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type DeviceState, devices } from '../../domain/devices.ts';
import type { FoldedEvent } from '../../domain/events.ts';
import { trails } from '../../domain/trails.ts';
import { type Evolver, handle, load, StateCache, snapshotShape } from '../../infra/eventstore/aggregate.ts';
import type { EventStore, NewEvent, Snapshot } from '../../infra/eventstore/port.ts';
import { PostgresEventStore } from '../../infra/eventstore/postgres.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { dropSchema, testConfig } from '../harness.ts';

/** The store as a process sees it, counting the events it reads and the snapshots it saves. Each
 * is a new identity, so it starts with empty caches: a process just started. */
function watched(inner: EventStore, snapshotEvery = inner.snapshotEvery) {
  const seen = { eventsRead: 0, saved: [] as Snapshot[], saving: [] as Promise<void>[] };
  const store: EventStore = {
    kind: inner.kind,
    exclusiveWriter: inner.exclusiveWriter,
    snapshotEvery,
    append: (...a) => inner.append(...a),
    readStream: async (...a) => {
      const page = await inner.readStream(...a);
      seen.eventsRead += page.length;
      return page;
    },
    readAll: (...a) => inner.readAll(...a),
    subscribe: (...a) => inner.subscribe(...a),
    head: () => inner.head(),
    close: () => inner.close(),
    readSnapshot: (...a) => inner.readSnapshot!(...a),
    saveSnapshot: (stream, snapshot) => {
      seen.saved.push(snapshot);
      const saving = inner.saveSnapshot!(stream, snapshot);
      seen.saving.push(saving);
      return saving;
    },
  };
  /** Waits for the snapshots the loads and commands so far asked for (written after their turn). */
  const settled = async () => {
    await new Promise((resolve) => setImmediate(resolve));
    await Promise.all(seen.saving);
  };
  return { store, seen, settled };
}

const id = 'c'.repeat(24);
const created = (): NewEvent => ({
  id: randomUUID(),
  type: 'DeviceCreated',
  data: {
    device_id: id,
    prn: `prn:::devices:/${id}`,
    owner_id: 'o',
    owner_prn: 'prn:::accounts:/o',
    owner_nick: 'owner',
    nick: 'dev',
    secret_sealed: 's',
    challenge: '',
    user_meta: {},
    device_meta: {},
    certificate: null,
  },
});
const metaUpdated = (n: number): NewEvent => ({
  id: randomUUID(),
  type: 'DeviceMetaUpdated',
  data: {
    device_id: id,
    owner_prn: 'prn:::accounts:/o',
    changed: { [`key-${n % 50}`]: String(n), $tagged: String(n) },
    removed: n % 7 === 0 ? [`key-${(n + 1) % 50}`] : [],
  },
});

/** Appends a device stream of `count` events in batches, as the store holds them. */
async function deviceStream(store: EventStore, stream: string, count: number): Promise<void> {
  await store.append(stream, [created()]);
  for (let n = 1; n < count; n += 500)
    await store.append(
      stream,
      Array.from({ length: Math.min(500, count - n) }, (_, i) => metaUpdated(n + i)),
    );
}

/** The state folded from every event of the stream, with snapshots off. */
async function fullFold(inner: EventStore, stream: string) {
  const { store, seen } = watched(inner, 0);
  const loaded = await load(store, stream, devices);
  return { loaded, read: seen.eventsRead };
}

const { postgresUrl } = testConfig();
const adapters: [string, () => { store: EventStore; cleanup: () => Promise<void> }][] = [
  [
    'SQLite with its writer thread',
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'hub-snapshots-'));
      const store = new SqliteEventStore(join(dir, 'events.sqlite'), {
        writerThread: true,
        snapshotEvery: 100,
      });
      return { store, cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
    },
  ],
  [
    'PostgreSQL',
    () => {
      const schema = `test_${randomBytes(6).toString('hex')}`;
      const store = new PostgresEventStore({ url: postgresUrl, schema, snapshotEvery: 100 });
      return { store, cleanup: () => dropSchema(postgresUrl, schema) };
    },
  ],
];

for (const [name, open] of adapters)
  describe(`aggregates load from snapshots (int, ${name})`, () => {
    let adapter: EventStore;
    let cleanup: () => Promise<void>;
    beforeEach(() => {
      ({ store: adapter, cleanup } = open());
    });
    afterEach(async () => {
      await adapter.close();
      await cleanup();
    });

    it('a long stream loads from its snapshot, reading only the events after it, to the state of the full fold', async () => {
      const stream = `device-${randomUUID()}`;
      await deviceStream(adapter, stream, 5_000);
      const first = watched(adapter);
      await load(first.store, stream, devices); // no snapshot yet: the whole stream, then one is written
      await first.settled();
      assert.equal(first.seen.eventsRead, 5_000);
      assert.deepEqual(
        first.seen.saved.map((s) => s.revision),
        [4_999],
      );

      await adapter.append(stream, [metaUpdated(5_000), metaUpdated(5_001), metaUpdated(5_002)]);
      const restarted = watched(adapter);
      const loaded = await load(restarted.store, stream, devices);
      assert.equal(restarted.seen.eventsRead, 3, 'only the events after the snapshot');
      const full = await fullFold(adapter, stream);
      assert.equal(full.read, 5_003);
      assert.deepEqual(loaded.state, full.loaded.state);
      assert.equal(loaded.revision, 5_002);
      assert.equal(loaded.state.deviceMeta.$tagged, '5002');
    });

    it('a snapshot of another shape is ignored: the stream is read from its start', async () => {
      const stream = `device-${randomUUID()}`;
      await deviceStream(adapter, stream, 300);
      // A snapshot written by a process whose evolve differs (another text, the same declared shape).
      const changed: Evolver<DeviceState> = {
        ...devices,
        evolve: (s, e: FoldedEvent) => ({ ...devices.evolve(s, e), nick: 'wrong' }),
      };
      assert.notEqual(snapshotShape(changed), snapshotShape(devices));
      const other = watched(adapter);
      assert.equal((await load(other.store, stream, changed)).state.nick, 'wrong');
      await other.settled();
      assert.equal(other.seen.saved.length, 1);
      // And one of the same shape whose declared number moved on.
      const bumped = { ...devices, snapshot: { kind: 'device', shape: 2 } };
      assert.notEqual(snapshotShape(bumped), snapshotShape(devices));

      const restarted = watched(adapter);
      const loaded = await load(restarted.store, stream, devices);
      assert.equal(restarted.seen.eventsRead, 300);
      assert.equal(loaded.state.nick, 'dev');
      assert.deepEqual(loaded.state, (await fullFold(adapter, stream)).loaded.state);
      // It writes one of its own shape (same revision): the next start reads none of the events.
      await restarted.settled();
      const again = watched(adapter);
      assert.deepEqual((await load(again.store, stream, devices)).state, loaded.state);
      assert.equal(again.seen.eventsRead, 0);
    });

    it('commands write a snapshot every N events; none with snapshots off', async () => {
      const stream = `trail-${randomUUID()}`;
      const push = (rev: number) => () => ({
        events: [
          {
            type: 'StepPushed',
            data: {
              device_id: id,
              owner_prn: 'o',
              rev,
              state: '{}',
              commit_msg: '',
              objects: [],
              public: false,
            },
          },
        ],
        result: rev,
      });
      const { store, seen, settled } = watched(adapter);
      for (let rev = 0; rev < 350; rev++) await handle(store, stream, trails, push(rev));
      await settled();
      assert.deepEqual(
        seen.saved.map((s) => s.revision),
        [99, 199, 299],
      );
      const stored = await adapter.readSnapshot!(stream, 'trail');
      assert.equal(stored?.revision, 299);

      const off = watched(adapter, 0);
      const other = `trail-${randomUUID()}`;
      for (let rev = 0; rev < 150; rev++) await handle(off.store, other, trails, push(rev));
      await off.settled();
      assert.deepEqual(off.seen.saved, []);
      // Off, a load reads no snapshot either: the whole stream.
      const offAgain = watched(adapter, 0);
      assert.equal((await load(offAgain.store, stream, trails)).state.steps.size, 350);
      assert.equal(offAgain.seen.eventsRead, 350);
    });

    it('a load that leaves the stream N events past its snapshot writes a new one', async () => {
      const stream = `device-${randomUUID()}`;
      await deviceStream(adapter, stream, 150);
      const first = watched(adapter);
      await load(first.store, stream, devices);
      await first.settled();
      await adapter.append(
        stream,
        Array.from({ length: 60 }, (_, i) => metaUpdated(150 + i)),
      );
      const second = watched(adapter);
      await load(second.store, stream, devices); // 60 past the snapshot at 149: not yet
      await second.settled();
      await adapter.append(
        stream,
        Array.from({ length: 60 }, (_, i) => metaUpdated(210 + i)),
      );
      const third = watched(adapter);
      await load(third.store, stream, devices); // 120 past it
      await third.settled();
      assert.deepEqual(
        [first, second, third].map((w) => w.seen.saved.map((s) => s.revision)),
        [[149], [], [269]],
      );
      assert.deepEqual(
        [first, second, third].map((w) => w.seen.eventsRead),
        [150, 60, 120],
      );
    });

    it('a snapshot that fails to save or to read fails no command and no load', async () => {
      const stream = `device-${randomUUID()}`;
      await deviceStream(adapter, stream, 120);
      const { store } = watched(adapter);
      const failing: EventStore = {
        ...store,
        readSnapshot: async () => {
          throw new Error('unreadable');
        },
        saveSnapshot: async () => {
          throw new Error('disk full');
        },
      };
      const cache = new StateCache<DeviceState>();
      const loaded = await load(failing, stream, devices, cache);
      assert.equal(loaded.revision, 119);
      const renamed = await handle(
        failing,
        stream,
        devices,
        () => ({
          events: [
            {
              type: 'DeviceRenamed',
              data: { device_id: id, owner_prn: 'o', nick: 'n', previous_nick: 'dev' },
            },
          ],
          result: 1,
        }),
        { cache },
      );
      assert.equal(renamed.after.nick, 'n');
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(await adapter.readSnapshot!(stream, 'device'), undefined);
    });
  });
