// The read-store and projection contract: one suite, called once per read store adapter, so
// every projection behaves the same on the embedded store and on Redis.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EventStore } from '../../infra/eventstore/port.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import type { ReadStore, Write } from '../../infra/readstore/port.ts';
import { ProjectionLagError, waitForPosition } from '../../projections/consistency.ts';
import { ReplayRunningError, replayProjection } from '../../projections/replay.ts';
import { type Projection, ProjectionRunner } from '../../projections/runner.ts';
import { streamCatalog } from '../../projections/streams.ts';
import { memoryLogger } from '../harness.ts';

export interface ReadStoreHarness {
  open(): Promise<ReadStore>;
  cleanup(): Promise<void>;
}

const logger = memoryLogger('warn').logger;

/** The stream catalog under a name of its own, so suites never share keys. */
export const catalogNamed = (name: string): Projection => ({ ...streamCatalog, name });

export function newEventStore(): EventStore {
  return new SqliteEventStore(join(mkdtempSync(join(tmpdir(), 'hub-proj-')), 'events.sqlite'));
}

export async function appendEvents(store: EventStore, count: number, streams = 50): Promise<number> {
  let position = 0;
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < count; i++) {
    pending.push(
      store
        .append(`device-${i % streams}`, [
          { id: randomUUID(), type: i % 3 ? 'DeviceMetaUpdated' : 'DeviceUpdated', data: { i } },
        ])
        .then((r) => {
          position = Math.max(position, r.position);
        }),
    );
    if (pending.length === 500) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  return position;
}

/** A fresh build of the same projection into another generation: the reference model. */
export async function freshBuild(
  store: EventStore,
  readStore: ReadStore,
  projection: Projection,
  generation: number,
) {
  const runner = new ProjectionRunner({ store, readStore, projection, logger, generation });
  await runner.catchUpOnce();
  return readStore.dump(projection.name, generation);
}

export function readStoreContract(name: string, makeHarness: () => Promise<ReadStoreHarness>): void {
  describe(`read store and projections contract: ${name}`, function () {
    this.timeout(60_000);
    let harness: ReadStoreHarness;
    let rs: ReadStore;
    let store: EventStore;
    const p = () => `t${randomUUID().slice(0, 8)}`;

    beforeEach(async () => {
      harness = await makeHarness();
      rs = await harness.open();
      store = newEventStore();
    });
    afterEach(async () => {
      await rs.close();
      await store.close();
      await harness.cleanup();
    });

    it('keeps a large sorted index, its members moved at random, in (score, member) order for range and count', async () => {
      const name = p();
      // Deterministic pseudo-random moves over 3,000 members with many equal scores.
      let seed = 42;
      const rand = (n: number) => {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        return seed % n;
      };
      const model = new Map<string, number>();
      const writes: Write[] = [];
      for (let k = 0; k < 12_000; k++) {
        const member = `m${rand(3000)}`;
        if (rand(10) === 0) {
          writes.push({ op: 'zrem', key: 'big', member });
          model.delete(member);
        } else {
          const score = rand(500);
          writes.push({ op: 'zadd', key: 'big', member, score });
          model.set(member, score);
        }
      }
      assert.equal(await rs.apply(name, 1, writes, 0, { position: 1, created: 1 }, false), 'ok');
      const sorted = [...model]
        .sort(([am, as], [bm, bs]) => as - bs || (am < bm ? -1 : am > bm ? 1 : 0))
        .map(([m, sc]) => ({ m, sc }));
      const expect = (min: number, max: number) =>
        sorted.filter((e) => e.sc >= min && e.sc <= max).map((e) => e.m);
      assert.deepEqual(await rs.range(name, 1, 'big'), expect(-Infinity, Infinity));
      assert.equal(await rs.count(name, 1, 'big'), model.size);
      for (const [min, max] of [
        [0, 0],
        [17, 250],
        [250, 17],
        [499, 499],
        [100, 1000],
        [-5, 3],
      ] as const) {
        assert.equal(
          await rs.count(name, 1, 'big', min, max),
          expect(min, max).length,
          `count ${min}..${max}`,
        );
        assert.deepEqual(
          await rs.range(name, 1, 'big', { min, max, offset: 7, limit: 600 }),
          expect(min, max).slice(7, 607),
          `range ${min}..${max}`,
        );
        assert.deepEqual(
          await rs.range(name, 1, 'big', { min, max, reverse: true, offset: 3, limit: 700 }),
          expect(min, max).reverse().slice(3, 703),
          `reverse range ${min}..${max}`,
        );
      }
    });

    it('applies documents and indexes with the same semantics', async () => {
      const name = p();
      const outcome = await rs.apply(
        name,
        1,
        [
          { op: 'set', key: 'a', doc: { x: 1, y: 'two', z: { deep: [1, 'é'] }, gone: null } },
          { op: 'patch', key: 'a', doc: { y: 'three', x: null } },
          { op: 'set', key: 'b', doc: { v: true } },
          { op: 'del', key: 'b' },
          { op: 'incr', key: 'c', field: 'n', by: 5 },
          { op: 'incr', key: 'c', field: 'n', by: -2 },
          { op: 'zadd', key: 'idx', member: 'm2', score: 20 },
          { op: 'zadd', key: 'idx', member: 'm1', score: 10 },
          { op: 'zadd', key: 'idx', member: 'm3', score: 20 },
          { op: 'zadd', key: 'idx', member: 'm4', score: 5 },
          { op: 'zadd', key: 'idx', member: 'm4', score: 30 },
          { op: 'zrem', key: 'idx', member: 'm2' },
        ],
        0,
        { position: 7, created: 1000 },
        false,
      );
      assert.equal(outcome, 'ok');
      assert.deepEqual(await rs.get(name, 1, 'a'), { y: 'three', z: { deep: [1, 'é'] } });
      assert.equal(await rs.get(name, 1, 'b'), undefined);
      assert.deepEqual(await rs.get(name, 1, 'c'), { n: 3 });
      assert.deepEqual(await rs.range(name, 1, 'idx'), ['m1', 'm3', 'm4']);
      assert.deepEqual(await rs.range(name, 1, 'idx', { reverse: true, limit: 2 }), ['m4', 'm3']);
      assert.deepEqual(await rs.range(name, 1, 'idx', { offset: 1, limit: 1 }), ['m3']);
      assert.deepEqual(await rs.range(name, 1, 'idx', { min: 15, max: 25 }), ['m3']);
      assert.equal(await rs.count(name, 1, 'idx'), 3);
      assert.equal(await rs.count(name, 1, 'idx', 10, 20), 2);
      assert.deepEqual(await rs.checkpoint(name, 1), { position: 7, created: 1000 });
      assert.deepEqual(await rs.dump(name, 1), {
        a: { y: 'three', z: { deep: [1, 'é'] } },
        c: { n: 3 },
        idx: [
          ['m1', 10],
          ['m3', 20],
          ['m4', 30],
        ],
      });
      assert.ok((await rs.drop(name, 1)) >= 3);
      assert.deepEqual(await rs.dump(name, 1), {});
      assert.deepEqual(await rs.checkpoint(name, 1), { position: 0, created: 0 });
    });

    it('refuses a batch whose checkpoint moved, or whose generation is no longer active, writing nothing', async () => {
      const name = p();
      await rs.apply(
        name,
        1,
        [{ op: 'incr', key: 'k', field: 'n', by: 1 }],
        0,
        { position: 5, created: 1 },
        true,
      );
      assert.equal(
        await rs.apply(
          name,
          1,
          [{ op: 'incr', key: 'k', field: 'n', by: 1 }],
          0,
          { position: 6, created: 1 },
          true,
        ),
        'moved',
      );
      await rs.activate(name, 2);
      assert.equal(await rs.activeGeneration(name, true), 2);
      assert.equal(
        await rs.apply(
          name,
          1,
          [{ op: 'incr', key: 'k', field: 'n', by: 1 }],
          5,
          { position: 6, created: 1 },
          true,
        ),
        'inactive',
      );
      assert.deepEqual(await rs.get(name, 1, 'k'), { n: 1 });
      assert.deepEqual(await rs.checkpoint(name, 1), { position: 5, created: 1 });
    });

    it('a runner builds the model from the log and keeps it current with live appends', async () => {
      const projection = catalogNamed(p());
      await appendEvents(store, 1200);
      const runner = new ProjectionRunner({ store, readStore: rs, projection, logger, batchSize: 100 });
      runner.start();
      await runner.caughtUp();
      const more = await appendEvents(store, 300);
      await waitForPosition(rs, [projection.name], more, 10_000);
      await runner.stop();
      const totals = (await rs.get(projection.name, 1, 'totals')) as Record<string, number>;
      assert.equal(totals.DeviceMetaUpdated! + totals.DeviceUpdated!, 1500);
      assert.deepEqual(await rs.get(projection.name, 1, 'stream:device-7'), {
        ...((await rs.get(projection.name, 1, 'stream:device-7')) as object),
        stream: 'device-7',
        revision: 29,
      });
      const kept = await rs.dump(projection.name, 1);
      assert.equal(Object.keys(kept).filter((k) => k.startsWith('stream:')).length, 50);
      assert.equal((await rs.checkpoint(projection.name, 1)).position, more);
      assert.equal(runner.status().lagEvents, 0);
    });

    it("a read waits for the caller's write, and answers ProjectionLagError (never stale data) past the bound", async () => {
      const projection = catalogNamed(p());
      const runner = new ProjectionRunner({ store, readStore: rs, projection, logger });
      runner.start();
      await runner.caughtUp();
      const written = await appendEvents(store, 10);
      await waitForPosition(rs, [projection.name], written, 5000);
      assert.ok((await rs.checkpoint(projection.name, 1)).position >= written);
      await runner.stop();
      const unseen = await appendEvents(store, 1);
      const started = Date.now();
      await assert.rejects(waitForPosition(rs, [projection.name], unseen, 300), (err: unknown) => {
        assert.ok(err instanceof ProjectionLagError);
        assert.equal(err.wanted, unseen);
        assert.equal(err.reached, written);
        return true;
      });
      assert.ok(Date.now() - started >= 290);
    });

    it('replays into a new generation while reads continue, switches atomically, drops the old keys', async () => {
      const projection = catalogNamed(p());
      const total = await appendEvents(store, 4000);
      const live = new ProjectionRunner({ store, readStore: rs, projection, logger });
      live.start();
      await live.caughtUp();
      const expected = await rs.dump(projection.name, 1);
      let reads = 0;
      let bad = 0;
      let stop = false;
      const reader = (async () => {
        while (!stop) {
          const generation = await rs.activeGeneration(projection.name);
          const totals = (await rs.get(projection.name, generation, 'totals')) as
            | Record<string, number>
            | undefined;
          const sum = totals ? Object.values(totals).reduce((a, b) => a + b, 0) : 0;
          if (sum !== 4000) bad++;
          reads++;
          await new Promise((r) => setImmediate(r));
        }
      })();
      const progress: number[] = [];
      const result = await replayProjection({
        store,
        readStore: rs,
        projection,
        logger,
        owner: 'test',
        dropGraceMs: 1200,
        batchSize: 250,
        onProgress: (pr) => progress.push(pr.checkpoint),
      });
      await new Promise((r) => setTimeout(r, 200));
      stop = true;
      await reader;
      await live.stop();
      assert.equal(result.outcome, 'switched');
      assert.equal(result.previous, 1);
      assert.equal(result.generation, 2);
      assert.equal(result.applied, 4000);
      assert.ok(result.droppedKeys > 50);
      assert.equal(bad, 0, `${bad} of ${reads} reads saw a model that was not whole`);
      assert.ok(reads > 20);
      assert.equal(await rs.activeGeneration(projection.name, true), 2);
      assert.deepEqual(await rs.dump(projection.name, 2), expected);
      assert.deepEqual(await rs.dump(projection.name, 1), {});
      assert.equal((await rs.checkpoint(projection.name, 2)).position, total);
      assert.equal(progress.at(-1), total);
    });

    it('after a switch the live runner follows the new generation', async () => {
      const projection = catalogNamed(p());
      await appendEvents(store, 500);
      const live = new ProjectionRunner({ store, readStore: rs, projection, logger });
      live.start();
      await live.caughtUp();
      await replayProjection({ store, readStore: rs, projection, logger, owner: 'test', dropGraceMs: 0 });
      const after = await appendEvents(store, 100);
      await waitForPosition(rs, [projection.name], after, 10_000);
      await live.stop();
      const totals = (await rs.get(projection.name, 2, 'totals')) as Record<string, number>;
      assert.equal(
        Object.values(totals).reduce((a, b) => a + b, 0),
        600,
      );
    });

    it('an interrupted replay resumes from its checkpoint and ends equal to a fresh build', async () => {
      const projection = catalogNamed(p());
      const total = await appendEvents(store, 3000);
      const controller = new AbortController();
      const first = await replayProjection({
        store,
        readStore: rs,
        projection,
        logger,
        owner: 'a',
        signal: controller.signal,
        batchSize: 200,
        onProgress: (pr) => {
          if (pr.checkpoint >= 1000) controller.abort();
        },
      });
      assert.equal(first.outcome, 'interrupted');
      assert.ok(first.checkpoint >= 1000 && first.checkpoint < total);
      assert.equal(await rs.replayTarget(projection.name), 2);
      assert.equal(await rs.activeGeneration(projection.name, true), 1);
      const second = await replayProjection({
        store,
        readStore: rs,
        projection,
        logger,
        owner: 'b',
        dropGraceMs: 0,
        batchSize: 200,
      });
      assert.equal(second.outcome, 'switched');
      assert.equal(second.generation, 2);
      assert.equal(
        second.applied,
        total - first.checkpoint,
        'the second run started where the first stopped',
      );
      assert.equal(await rs.replayTarget(projection.name), undefined);
      assert.deepEqual(await rs.dump(projection.name, 2), await freshBuild(store, rs, projection, 9));
    });

    it('stops promptly in any phase: starting, catching up, following', async () => {
      const projection = catalogNamed(p());
      await appendEvents(store, 5000);
      for (const delay of [0, 1, 3, 10, 50]) {
        const runner = new ProjectionRunner({ store, readStore: rs, projection, logger, batchSize: 50 });
        runner.start();
        await new Promise((r) => setTimeout(r, delay));
        const started = Date.now();
        await runner.stop();
        assert.ok(Date.now() - started < 2000, `stop after ${delay} ms took ${Date.now() - started} ms`);
      }
      const runner = new ProjectionRunner({ store, readStore: rs, projection, logger, batchSize: 50 });
      runner.start();
      await runner.caughtUp();
      await runner.stop();
      const totals = (await rs.get(projection.name, 1, 'totals')) as Record<string, number>;
      assert.equal(
        Object.values(totals).reduce((a, b) => a + b, 0),
        5000,
        'stopping and restarting applied each event once',
      );
    });

    it('refuses a second replay of the same projection while one runs', async () => {
      const projection = catalogNamed(p());
      assert.equal(await rs.lock(`replay:${projection.name}`, 'someone-else', 10_000), true);
      assert.equal(await rs.lockHolder(`replay:${projection.name}`), 'someone-else');
      await assert.rejects(
        replayProjection({ store, readStore: rs, projection, logger, owner: 'me' }),
        ReplayRunningError,
      );
      await rs.unlock(`replay:${projection.name}`, 'someone-else');
      assert.equal(await rs.lockHolder(`replay:${projection.name}`), undefined);
      const result = await replayProjection({
        store,
        readStore: rs,
        projection,
        logger,
        owner: 'me',
        dropGraceMs: 0,
      });
      assert.equal(result.outcome, 'switched');
    });
  });
}
