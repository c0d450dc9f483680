import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type MessagePort, Worker } from 'node:worker_threads';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { eventStoreContract } from './contract.ts';

eventStoreContract(
  'embedded SQLite',
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    return {
      open: async () => new SqliteEventStore(join(dir, 'events.sqlite')),
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
  { sharedWriters: false },
);

// What the hub runs: commits on a writer thread, reads on the caller's.
eventStoreContract(
  'embedded SQLite, writer thread',
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    return {
      open: async () => new SqliteEventStore(join(dir, 'events.sqlite'), { writerThread: true }),
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
  { sharedWriters: false },
);

// The queue posted every two appends: the thread merges what waits into one transaction and
// answers each batch for its own appends (expected revisions and ids hold across the merge).
eventStoreContract(
  'embedded SQLite, writer thread, posted every two appends',
  async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    return {
      open: async () =>
        new SqliteEventStore(join(dir, 'events.sqlite'), { writerThread: true, postEvery: 2 }),
      cleanup: async () => rmSync(dir, { recursive: true, force: true }),
    };
  },
  { sharedWriters: false },
);

// Under load, an API thread's answer waited for every subscriber's work on the commit (the
// projector, the event log, the actors), which ran first in the same turn of the main thread.
describe('SQLite event store: subscribers after appenders (int)', () => {
  it('wakes its subscribers only after the turn in which the appenders heard of the commit', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    const store = new SqliteEventStore(join(dir, 'events.sqlite'), { writerThread: true });
    const order: string[] = [];
    const subscription = store.subscribe(0);
    const consumed = (async () => {
      for await (const page of subscription) {
        order.push(`subscriber read ${page.length}`);
        return;
      }
    })();
    await new Promise((resolve) => setTimeout(resolve, 50)); // the subscription waits, caught up
    // As an API thread's channel does: the answer goes out at the end of the appender's turn.
    await store
      .append('s-1', [{ id: randomUUID(), type: 'Tested', data: {} }])
      .then(
        () => new Promise<void>((resolve) => setImmediate(() => resolve(void order.push('answer sent')))),
      );
    await consumed;
    assert.deepEqual(order, ['answer sent', 'subscriber read 1']);
    subscription.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
});

// The embedded hub's API threads append straight to the writer thread (connectAppender): their
// answers wait for no turn of the store's own thread, which hears of each commit after.
describe('SQLite event store: threads appending straight to its writer (int)', () => {
  type Answer = { result?: { position: number }; at?: number; error?: string; wrong?: boolean };
  function appender(port: MessagePort) {
    const answeredAt = new Float64Array(new SharedArrayBuffer(8));
    const worker = new Worker(new URL('./appender-thread.ts', import.meta.url), {
      workerData: { port, answeredAt },
      transferList: [port],
    });
    const news: Array<{ stream: string; events: Array<{ revision: number; data: string }> }> = [];
    let closed = false;
    const answers: Answer[] = [];
    let waiting: ((a: Answer) => void) | undefined;
    worker.on('message', (m: Answer & { appended?: (typeof news)[number]; closed?: boolean }) => {
      if (m.appended) news.push(m.appended);
      else if (m.closed) closed = true;
      else if (waiting) waiting(m);
      else answers.push(m);
    });
    const next = () =>
      answers.length > 0 ? Promise.resolve(answers.shift()!) : new Promise<Answer>((r) => (waiting = r));
    return {
      answeredAt,
      news,
      closed: () => closed,
      send: (stream: string, types: string[], expected: number | 'no_stream') =>
        worker.postMessage({ stream, types, expected }),
      ask: (stream: string, types: string[], expected: number | 'no_stream') => {
        worker.postMessage({ stream, types, expected });
        return next();
      },
      next,
      stop: () => worker.terminate(),
    };
  }
  const until = async (what: () => boolean) => {
    for (const started = Date.now(); !what(); await new Promise((r) => setTimeout(r, 5)))
      if (Date.now() - started > 5000) throw new Error('waited 5 s in vain');
  };

  it("answers a thread while the store's own thread is blocked; head() and reads cover the answered write before the store hears of it", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    const store = new SqliteEventStore(join(dir, 'events.sqlite'), {
      writerThread: true,
      sharedWithThreads: true,
    });
    const a = appender(store.connectAppender()!.port);
    const b = appender(store.connectAppender()!.port);
    const subscription = store.subscribe(0);
    const seen: number[] = [];
    const reading = (async () => {
      for await (const page of subscription) for (const e of page) seen.push(e.revision);
    })();
    assert.equal((await a.ask('s-1', ['Tested'], 'no_stream')).result?.position, 1);
    await until(() => seen.length === 1); // the store heard of the first commit

    a.send('s-1', ['Tested', 'Tested'], 0);
    const blockedUntil = Date.now() + 500;
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500); // this thread stands still
    // Still in the same turn: this thread has heard of nothing since, yet the answer went out.
    assert.ok(
      a.answeredAt[0]! > 0 && a.answeredAt[0]! < blockedUntil - 100,
      'answered while the store was blocked',
    );
    const head = store.head();
    const tail = store.readStream('s-1', 1);
    assert.equal(await head, 3);
    assert.deepEqual(
      (await tail).map((e) => e.revision),
      [1, 2],
    );
    assert.equal((await a.next()).result?.position, 3);

    // The store follows: its subscribers read every event in order; the other thread heard of them.
    await until(() => seen.length === 3);
    assert.deepEqual(seen, [0, 1, 2]);
    await until(() => b.news.length === 2);
    assert.deepEqual(
      b.news.map((n) => [n.stream, n.events.map((e) => e.revision)]),
      [
        ['s-1', [0]],
        ['s-1', [1, 2]],
      ],
    );
    assert.deepEqual(JSON.parse(b.news[1]!.events[0]!.data), { type: 'Tested' });
    assert.equal(a.news.length, 0, 'a thread is not told of its own appends');

    // The revision holds across threads, and the refusal crosses as itself.
    const stale = await b.ask('s-1', ['Tested'], 0);
    assert.equal(stale.wrong, true);
    assert.equal((await b.ask('s-1', ['Tested'], 2)).result?.position, 4);

    subscription.close();
    await reading;
    await store.close();
    await until(() => a.closed() && b.closed()); // the writer thread is gone: its ports close
    await a.stop();
    await b.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  it("holds the news of the threads' commits for a batch (newsLingerMs), sends them at once to a reader waiting for one, and before its own batches", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-sqlite-'));
    const store = new SqliteEventStore(join(dir, 'events.sqlite'), {
      writerThread: true,
      sharedWithThreads: true,
      newsLingerMs: 400,
    });
    const a = appender(store.connectAppender()!.port);
    const subscription = store.subscribe(0);
    const seen: string[] = [];
    const reading = (async () => {
      for await (const page of subscription) for (const e of page) seen.push(`${e.stream}@${e.revision}`);
    })();
    const heard = async (n: number) => {
      const started = Date.now();
      await until(() => seen.length === n);
      return Date.now() - started;
    };

    // Answered at once; the store hears of it only when the hold is up.
    assert.equal((await a.ask('s-1', ['Tested'], 'no_stream')).result?.position, 1);
    assert.equal(await store.head(), 1, 'the shared head has it already');
    assert.ok((await heard(1)) >= 300, 'held for the batch');

    // A reader waiting for the position: sent now.
    assert.equal((await a.ask('s-1', ['Tested'], 0)).result?.position, 2);
    store.hasten(2);
    assert.ok((await heard(2)) < 300, 'sent for the waiting reader');

    // The store's own append: its news go at once, the held ones first, in position order.
    assert.equal((await a.ask('s-1', ['Tested'], 1)).result?.position, 3);
    assert.equal(
      (await store.append('s-2', [{ id: crypto.randomUUID(), type: 'Tested', data: {} }])).position,
      4,
    );
    assert.ok((await heard(4)) < 300, 'sent with the own batch');
    assert.deepEqual(seen, ['s-1@0', 's-1@1', 's-1@2', 's-2@0']);

    subscription.close();
    await reading;
    await store.close();
    await a.stop();
    rmSync(dir, { recursive: true, force: true });
  });
});
