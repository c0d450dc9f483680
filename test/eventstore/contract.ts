// The event store contract: one suite, called once per adapter. Every adapter must pass it
// against a real server (or file).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { handle } from '../../infra/eventstore/aggregate.ts';
import {
  DuplicateEventIdError,
  type EventStore,
  type NewEvent,
  type RecordedEvent,
  type Snapshot,
  WrongExpectedRevisionError,
} from '../../infra/eventstore/port.ts';

export interface StoreHarness {
  /** Opens the store under test; called again after close() it must open the same data. */
  open(): Promise<EventStore>;
  /** Removes what the suite created. */
  cleanup(): Promise<void>;
}

const ev = (type = 'Tested', data: unknown = { n: 1 }): NewEvent => ({ id: randomUUID(), type, data });

/** The first `count` events of a subscription, in the order its batches deliver them. */
async function take(sub: AsyncIterable<RecordedEvent[]>, count: number, onEach?: (e: RecordedEvent) => void) {
  const out: RecordedEvent[] = [];
  if (count === 0) return out;
  for await (const batch of sub) {
    for (const e of batch) {
      out.push(e);
      onEach?.(e);
      if (out.length === count) return out;
    }
  }
  return out;
}

export function eventStoreContract(
  name: string,
  makeHarness: () => Promise<StoreHarness>,
  /** Several processes append to the store (not so the embedded file, which has one writer). */
  options: { sharedWriters: boolean },
): void {
  describe(`event store contract: ${name}`, function () {
    this.timeout(120_000);
    let harness: StoreHarness;
    let store: EventStore;
    const stream = () => `test-${randomUUID()}`;

    beforeEach(async () => {
      harness = await makeHarness();
      store = await harness.open();
    });
    afterEach(async () => {
      await store.close();
      await harness.cleanup();
    });

    describe('expected revision', () => {
      it('no_stream: succeeds on a new stream, conflicts on an existing one', async () => {
        const s = stream();
        const first = await store.append(s, [ev()], 'no_stream');
        assert.equal(first.nextRevision, 0);
        await assert.rejects(store.append(s, [ev()], 'no_stream'), (err: unknown) => {
          assert.ok(err instanceof WrongExpectedRevisionError);
          assert.equal(err.stream, s);
          assert.equal(err.expected, 'no_stream');
          assert.equal(err.actual, 0);
          return true;
        });
      });

      it('stream_exists: conflicts on a missing stream, succeeds on an existing one', async () => {
        const s = stream();
        await assert.rejects(store.append(s, [ev()], 'stream_exists'), (err: unknown) => {
          assert.ok(err instanceof WrongExpectedRevisionError);
          assert.equal(err.actual, -1);
          return true;
        });
        await store.append(s, [ev()], 'no_stream');
        assert.equal((await store.append(s, [ev(), ev()], 'stream_exists')).nextRevision, 2);
      });

      it('exact revision: succeeds when it matches, conflicts (with the actual revision) when not', async () => {
        const s = stream();
        await store.append(s, [ev(), ev()], 'no_stream');
        await assert.rejects(store.append(s, [ev()], 0), (err: unknown) => {
          assert.ok(err instanceof WrongExpectedRevisionError);
          assert.equal(err.expected, 0);
          assert.equal(err.actual, 1);
          return true;
        });
        await assert.rejects(store.append(s, [ev()], 5), WrongExpectedRevisionError);
        assert.equal((await store.append(s, [ev()], 1)).nextRevision, 2);
        assert.equal((await store.readStream(s)).length, 3);
      });

      it('any: always appends', async () => {
        const s = stream();
        assert.equal((await store.append(s, [ev()], 'any')).nextRevision, 0);
        assert.equal((await store.append(s, [ev()])).nextRevision, 1);
      });

      it('a conflict writes nothing', async () => {
        const s = stream();
        await store.append(s, [ev()], 'no_stream');
        const head = await store.head();
        await assert.rejects(store.append(s, [ev(), ev()], 'no_stream'));
        assert.equal(await store.head(), head);
        assert.equal((await store.readStream(s)).length, 1);
      });

      it('only one of two racing appends at the same revision wins', async () => {
        const s = stream();
        await store.append(s, [ev()], 'no_stream');
        const results = await Promise.allSettled([store.append(s, [ev()], 0), store.append(s, [ev()], 0)]);
        assert.deepEqual(results.map((r) => r.status).sort(), ['fulfilled', 'rejected']);
        assert.equal((await store.readStream(s)).length, 2);
      });
    });

    describe('ordering', () => {
      it('keeps per-stream order and a strictly increasing global order', async () => {
        const a = stream();
        const b = stream();
        const before = await store.head();
        const written: string[] = [];
        for (let i = 0; i < 10; i++) {
          const e = ev('Tested', { i });
          written.push(e.id);
          await store.append(i % 2 ? a : b, [e]);
        }
        const readA = await store.readStream(a);
        assert.deepEqual(
          readA.map((e) => e.revision),
          [0, 1, 2, 3, 4],
        );
        assert.deepEqual(
          readA.map((e) => (e.data as { i: number }).i),
          [1, 3, 5, 7, 9],
        );
        const all = (await store.readAll(before, 1000)).filter((e) => e.stream === a || e.stream === b);
        assert.deepEqual(
          all.map((e) => e.id),
          written,
        );
        for (let i = 1; i < all.length; i++) assert.ok(all[i]!.position > all[i - 1]!.position);
        const tail = await store.readStream(a, 3, 10);
        assert.deepEqual(
          tail.map((e) => e.revision),
          [3, 4],
        );
        const page = await store.readAll(before, 3);
        assert.equal(page.length, 3);
      });

      it('returns the revision and the global position of the append', async () => {
        const s = stream();
        const result = await store.append(s, [ev(), ev(), ev()]);
        const read = await store.readStream(s);
        assert.equal(result.nextRevision, 2);
        assert.equal(result.position, read[2]!.position);
        assert.equal(await store.head(), result.position);
      });
    });

    describe('concurrency', () => {
      it('1,000 concurrent appenders to 100 streams: no event lost or duplicated', async () => {
        const streams = Array.from({ length: 100 }, () => stream());
        const before = await store.head();
        const events = Array.from({ length: 1000 }, (_, i) => ({
          stream: streams[i % 100]!,
          event: ev('Tested', { i }),
        }));
        await Promise.all(events.map(({ stream: s, event }) => store.append(s, [event])));
        const all = await readEverything(store, before);
        const mine = all.filter((e) => streams.includes(e.stream));
        assert.equal(mine.length, 1000);
        assert.equal(new Set(mine.map((e) => e.id)).size, 1000);
        for (const s of streams) {
          const read = await store.readStream(s);
          assert.deepEqual(
            read.map((e) => e.revision),
            [...Array(10).keys()],
          );
        }
      });

      it('commands on one stream in one process take turns: 40 at once, none conflicts', async () => {
        // attempts = 1: a command that raced another would fail with a conflict instead of retrying.
        const s = stream();
        const counter = { initial: () => 0, evolve: (n: number) => n + 1 };
        const results = await Promise.all(
          Array.from({ length: 40 }, () =>
            handle(store, s, counter, (n) => ({ events: [{ type: 'Counted', data: { n } }], result: n }), {
              attempts: 1,
            }),
          ),
        );
        assert.deepEqual(
          results.map((r) => r.result),
          [...Array(40).keys()],
          'each decided on the state its predecessor left, in arrival order',
        );
        assert.equal((await store.readStream(s)).length, 40);
      });

      if (options.sharedWriters)
        it('a command decided on a cached state that another writer moved past is decided again on the stored one', async () => {
          const other = await harness.open(); // another process's store
          let reads = 0;
          const counted: EventStore = {
            kind: store.kind,
            append: (...a) => store.append(...a),
            readStream: (...a) => {
              reads++;
              return store.readStream(...a);
            },
            readAll: (...a) => store.readAll(...a),
            subscribe: (...a) => store.subscribe(...a),
            head: () => store.head(),
            close: () => store.close(),
          };
          try {
            const s = stream();
            const sum = {
              initial: () => 0,
              evolve: (n: number, e: RecordedEvent) => n + (e.data as { k: number }).k,
            };
            const add = (k: number) => (n: number) => ({
              events: [{ type: 'Added', data: { k } }],
              result: n + k,
            });
            await handle(counted, s, sum, add(1)); // this process now caches the state 1
            const before = reads;
            assert.equal((await handle(counted, s, sum, add(2))).result, 3);
            assert.equal(reads, before, 'decided on the cached state, the stream unread');
            await other.append(s, [ev('Added', { k: 10 })]);
            // attempts = 1: the cached state's miss is not an attempt; the stored state is 13.
            assert.equal((await handle(counted, s, sum, add(100), { attempts: 1 })).result, 113);
            // A decision that changes nothing is never taken on a cached state alone ...
            await other.append(s, [ev('Added', { k: 1000 })]);
            assert.equal(
              (await handle(counted, s, sum, (n) => ({ events: [], result: n }), { attempts: 1 })).result,
              1113,
            );
            // ... nor is a refusal.
            await other.append(s, [ev('Added', { k: -1113 })]);
            const refuseUnlessZero = (n: number) => {
              if (n !== 0) throw new Error(`refused at ${n}`);
              return { events: [], result: n };
            };
            assert.equal((await handle(counted, s, sum, refuseUnlessZero, { attempts: 1 })).result, 0);
            assert.deepEqual(
              (await store.readStream(s)).map((e) => (e.data as { k: number }).k),
              [1, 2, 10, 100, 1000, -1113],
            );
          } finally {
            await other.close();
          }
        });

      it('a subscriber started mid-load sees every event exactly once, in order', async () => {
        const streams = Array.from({ length: 100 }, () => stream());
        const before = await store.head();
        const ids = new Set<string>();
        const load = (async () => {
          const pending: Promise<unknown>[] = [];
          for (let i = 0; i < 1000; i++) {
            const e = ev('Tested', { i });
            ids.add(e.id);
            pending.push(store.append(streams[i % 100]!, [e]));
            if (i % 50 === 49) await Promise.all(pending.splice(0));
          }
          await Promise.all(pending);
        })();
        await new Promise((r) => setTimeout(r, 20));
        const sub = store.subscribe(before, { batchSize: 64 });
        const seen = (await take(sub, 1000)).filter((e) => ids.has(e.id));
        sub.close();
        await load;
        assert.equal(seen.length, 1000);
        assert.equal(new Set(seen.map((e) => e.id)).size, 1000);
        for (let i = 1; i < seen.length; i++) assert.ok(seen[i]!.position > seen[i - 1]!.position);
      });
    });

    describe('subscriptions', () => {
      it('follows live appends after catching up', async () => {
        const s = stream();
        const before = await store.head();
        await store.append(s, [ev('Tested', { n: 1 })]);
        const sub = store.subscribe(before);
        const got = take(sub, 3);
        await new Promise((r) => setTimeout(r, 50));
        await store.append(s, [ev('Tested', { n: 2 })]);
        await store.append(s, [ev('Tested', { n: 3 })]);
        const events = await got;
        sub.close();
        assert.deepEqual(
          events.map((e) => (e.data as { n: number }).n),
          [1, 2, 3],
        );
      });

      it('delivers batches of what has arrived, none empty or larger than asked', async () => {
        const s = stream();
        const before = await store.head();
        const events = Array.from({ length: 150 }, (_, i) => ev('Tested', { i }));
        for (let i = 0; i < 150; i += 50) await store.append(s, events.slice(i, i + 50));
        const sub = store.subscribe(before, { batchSize: 64 });
        const sizes: number[] = [];
        const seen: string[] = [];
        for await (const batch of sub) {
          sizes.push(batch.length);
          seen.push(...batch.map((e) => e.id));
          if (seen.length >= 150) break;
        }
        sub.close();
        assert.deepEqual(
          seen,
          events.map((e) => e.id),
        );
        assert.ok(
          sizes.every((n) => n > 0 && n <= 64),
          `batch sizes ${sizes.join(', ')}`,
        );
        assert.ok(sizes.length < 150, 'events arrive together, not one at a time');
      });

      it('closed while its consumer holds a batch, it ends at once instead of waiting for a poll', async () => {
        const s = stream();
        const before = await store.head();
        await store.append(s, [ev(), ev()]);
        // A poll a minute apart: ending within seconds is the close's doing, not the next poll's.
        const sub = store.subscribe(before, { pollMs: 60_000 });
        let batches = 0;
        let closedAt = 0;
        for await (const _batch of sub) {
          batches++;
          sub.close(); // as a stopping follower does while it handles a batch
          closedAt = performance.now();
        }
        const ended = performance.now() - closedAt;
        assert.equal(batches, 1);
        assert.ok(ended < 15_000, `ended ${Math.round(ended)} ms after the close: it waited for the poll`);
      });

      it('wakes on an append, well before its fallback poll would', async () => {
        const s = stream();
        // A poll a minute apart: an event that comes within seconds came by the append's signal.
        const sub = store.subscribe(await store.head(), { pollMs: 60_000 });
        const first = take(sub, 1);
        await new Promise((r) => setTimeout(r, 100)); // caught up, waiting
        const appended = performance.now();
        await store.append(s, [ev()]);
        let timer: NodeJS.Timeout | undefined;
        const woken = await Promise.race([
          first.then(() => true),
          new Promise<false>((r) => (timer = setTimeout(() => r(false), 15_000))),
        ]);
        clearTimeout(timer);
        const waited = performance.now() - appended;
        sub.close();
        assert.ok(
          woken,
          `not delivered ${Math.round(waited)} ms after the append: no wake, waiting for the poll`,
        );
      });

      it('resumes from a checkpoint after a restart, with nothing missed or repeated', async () => {
        const s = stream();
        const before = await store.head();
        const first = Array.from({ length: 20 }, (_, i) => ev('Tested', { i }));
        for (const e of first) await store.append(s, [e]);
        const sub = store.subscribe(before);
        const seen = await take(sub, 12);
        sub.close();
        const checkpoint = seen[seen.length - 1]!.position;
        await store.close();
        store = await harness.open();
        const more = Array.from({ length: 5 }, (_, i) => ev('Tested', { i: 20 + i }));
        for (const e of more) await store.append(s, [e]);
        const resumed = store.subscribe(checkpoint);
        const rest = await take(resumed, 13);
        resumed.close();
        assert.deepEqual(
          [...seen, ...rest].map((e) => e.id),
          [...first, ...more].map((e) => e.id),
        );
      });
    });

    describe('idempotency', () => {
      it('re-appending stored ids returns the original result and stores nothing new', async () => {
        const s = stream();
        const events = [ev(), ev()];
        const original = await store.append(s, events, 'no_stream');
        await store.append(s, [ev()]);
        const again = await store.append(s, events, 'no_stream');
        assert.deepEqual(again, original);
        assert.equal((await store.readStream(s)).length, 3);
      });

      it('concurrent retries of one append store it once', async () => {
        const s = stream();
        const events = [ev(), ev()];
        const results = await Promise.all([
          store.append(s, events),
          store.append(s, events),
          store.append(s, events),
        ]);
        assert.deepEqual(results[1], results[0]);
        assert.deepEqual(results[2], results[0]);
        assert.equal((await store.readStream(s)).length, 2);
      });

      it('an append that repeats only some stored ids is refused', async () => {
        const s = stream();
        const stored = ev();
        await store.append(s, [stored]);
        await assert.rejects(store.append(s, [stored, ev()]), DuplicateEventIdError);
        assert.equal((await store.readStream(s)).length, 1);
      });
    });

    describe('failures', () => {
      it('one append that cannot be stored fails alone; its neighbours in the batch are stored', async () => {
        const s = stream();
        const results = await Promise.allSettled([
          store.append(s, [ev('Tested', { n: 1 })]),
          store.append(s, [ev('Tested', { n: 10n })]),
          store.append(s, [ev('Tested', { n: 3 })]),
        ]);
        assert.deepEqual(
          results.map((r) => r.status),
          ['fulfilled', 'rejected', 'fulfilled'],
        );
        assert.deepEqual(
          (await store.readStream(s)).map((e) => (e.data as { n: number }).n),
          [1, 3],
        );
      });

      it('an append after close is refused, not lost in silence', async () => {
        await store.close();
        await assert.rejects(store.append(stream(), [ev()]));
        store = await harness.open();
      });
    });

    describe('payloads', () => {
      it('round-trips a 1 MiB payload and unicode text exactly', async () => {
        const s = stream();
        const big = { blob: 'x'.repeat(1024 * 1024), nested: { list: [1, 2.5, true, null, 'a'] } };
        const unicode = { text: 'Grüße, 设备, مرحبا, 🚀🛰️, \u0000-free, "quoted" \\ back', emoji: '👩‍👩‍👧' };
        await store.append(s, [
          { id: randomUUID(), type: 'Big', data: big, metadata: { who: 'tëst' } },
          { id: randomUUID(), type: 'Ünïcode', data: unicode },
        ]);
        const [a, b] = await store.readStream(s);
        assert.deepEqual(a!.data, big);
        assert.deepEqual(a!.metadata, { who: 'tëst' });
        assert.deepEqual(b!.data, unicode);
        assert.equal(b!.type, 'Ünïcode');
        assert.ok(Math.abs(b!.created - Date.now()) < 60_000);
      });

      it('reads a missing stream as empty', async () => {
        assert.deepEqual(await store.readStream(stream()), []);
      });
    });

    describe('snapshots', () => {
      const snapshot = (revision: number, state: unknown = { revision }, shape = '1.a'): Snapshot => ({
        kind: 'tested',
        shape,
        revision,
        state,
      });
      const save = (s: string, snap: Snapshot) => store.saveSnapshot!(s, snap);
      const read = (s: string, kind = 'tested') => store.readSnapshot!(s, kind);

      it('reads a missing snapshot as undefined', async () => {
        assert.equal(typeof store.readSnapshot, 'function');
        assert.equal(typeof store.saveSnapshot, 'function');
        assert.equal(await read(stream()), undefined);
      });

      it('reads back what was saved, exactly, also after a restart; one per stream and kind', async () => {
        const s = stream();
        const state = {
          text: 'Grüße, 设备, 🚀, "quoted" \\ back',
          list: [1, 2.5, true, null, { $map: [['k', 'v']] }],
          nested: { empty: {}, none: [] },
        };
        await store.append(s, [ev(), ev()]);
        await save(s, snapshot(1, state));
        await save(s, { ...snapshot(0), kind: 'other' });
        assert.deepEqual(await read(s), snapshot(1, state));
        assert.deepEqual(await read(s, 'other'), { ...snapshot(0), kind: 'other' });
        assert.equal(await read(stream()), undefined);
        await store.close();
        store = await harness.open();
        assert.deepEqual(await read(s), snapshot(1, state));
      });

      it('a newer revision replaces the stored one; an older one does not', async () => {
        const s = stream();
        await save(s, snapshot(10));
        await save(s, snapshot(20));
        assert.deepEqual(await read(s), snapshot(20));
        await save(s, snapshot(15));
        assert.deepEqual(await read(s), snapshot(20));
        // The same revision in another shape (folded by an upgraded process) replaces it.
        await save(s, snapshot(20, { other: true }, '2.b'));
        assert.deepEqual(await read(s), snapshot(20, { other: true }, '2.b'));
      });

      it('racing saves leave the newest', async () => {
        const s = stream();
        await Promise.all([5, 30, 10, 25, 20].map((r) => save(s, snapshot(r))));
        assert.deepEqual(await read(s), snapshot(30));
      });

      it('are not events: the stream, the log and the head stay as they were', async () => {
        const s = stream();
        await store.append(s, [ev()]);
        const head = await store.head();
        const log = await readEverything(store);
        await save(s, snapshot(0));
        await save(stream(), snapshot(3));
        assert.equal(await store.head(), head);
        assert.deepEqual(await readEverything(store), log);
        assert.equal((await store.readStream(s)).length, 1);
      });
    });
  });
}

export async function readEverything(store: EventStore, after = 0): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  for (
    let page = await store.readAll(after, 500);
    page.length > 0;
    page = await store.readAll(out.at(-1)!.position, 500)
  ) {
    out.push(...page);
  }
  return out;
}
