// The dispatcher with a real receiver and the embedded stores: a burst for one subscription is held
// only as far as its queue goes, and the rest waits in the schedule, due, instead of being taken
// and sent back for a second; a take from the topic beyond the process's room waits for room
// rather than storing its jobs due; jobs handed off are delivered before they are stored, and
// stored only when they stay too long.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Registry } from 'prom-client';
import { benchSubscription } from '../../../bench/report.ts';
import { MemoryBus } from '../../../infra/bus/memory.ts';
import { TOPICS } from '../../../infra/bus/port.ts';
import { openEventStore } from '../../../infra/eventstore/open.ts';
import {
  Dispatcher,
  ROOM_WAIT_MS,
  SPILL_MS,
  WAITS_PER_HANDOFF,
} from '../../../processors/delivery/dispatcher.ts';
import { Egress } from '../../../processors/delivery/egress.ts';
import { CIRCUIT_OPENS_AFTER, MIN_PROBE_DELAY_S } from '../../../processors/delivery/health.ts';
import type { Job } from '../../../processors/delivery/port.ts';
import { SqliteDeliveryStore } from '../../../processors/delivery/sqlite.ts';
import { SchemaRegistry } from '../../../schemas/registry.ts';
import { memoryLogger, testConfig } from '../../harness.ts';
import { Receiver } from '../../webhooks/receiver.ts';
import { event } from '../stream/eventlog.ts';

/** The embedded stores, a receiver, and a dispatcher on the in-process bus with two attempts in
 * flight per subscription (and a queue of 16 waiting beside them); `close` ends them all. */
async function rig(o: {
  timeoutMs: number;
  metrics?: Registry;
  maxInFlight?: number;
  httpThreads: number;
  disableAfterMs?: number;
}) {
  const config = testConfig();
  const store = await openEventStore(config);
  const file = join(config.dataDir, 'deliveries.sqlite');
  const deliveries = new SqliteDeliveryStore(file, { retentionMs: 86_400_000 });
  const rx = await new Receiver().start();
  const sealKey = randomBytes(32);
  const bus = new MemoryBus({ logger: memoryLogger().logger });
  await bus.ensureTopics([{ topic: TOPICS.deliveries, partitions: 1 }]);
  const dispatcher = new Dispatcher({
    bus,
    registry: new SchemaRegistry(),
    deliveries,
    store,
    sealKey,
    egress: new Egress({ allowHttp: true, allowNetworks: ['127.0.0.0/8'] }),
    logger: memoryLogger().logger,
    metrics: o.metrics ?? new Registry(),
    version: 'test',
    timeoutMs: o.timeoutMs,
    maxInFlight: o.maxInFlight ?? 1024,
    maxInFlightPerSubscription: 2,
    rotationWindowMs: 0,
    httpThreads: o.httpThreads,
    // Every attempt on the HTTP thread, as under load (SpilloverHttp keeps a test's few on this one).
    httpInlineUpToPerSecond: 0,
    disableAfterMs: o.disableAfterMs ?? 432_000_000,
  });
  const close = async () => {
    await dispatcher.stop();
    await deliveries.close();
    await store.close();
    await rx.stop();
    await bus.close();
  };
  /** A subscription of `owner` to device.created at the receiver's `path`. */
  const subscribe = (owner: string, path: string) =>
    benchSubscription(store, { owner, url: `${rx.url}${path}`, eventType: 'device.created', sealKey });
  /** Starts the dispatcher and delivers one job of `sub` (at `path`): the HTTP side (its thread,
   * its connection) is then up, and a later wait for room is attempts', not a start's, which may
   * outlast a wait. */
  const started = async (owner: string, sub: string, path: string) => {
    await dispatcher.start();
    await dispatcher.handOff(jobsFor(owner, sub, 1));
    await rx.waitFor(path, 1);
  };
  return { store, file, deliveries, rx, sealKey, dispatcher, close, subscribe, started };
}

/** The rows of the schedule in the store's file (those `where` holds for), read beside the store. */
function scheduleRows(file: string, where = 'TRUE', ...args: number[]): number {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    return (db.prepare(`SELECT count(*) AS n FROM schedule WHERE ${where}`).get(...args) as { n: number }).n;
  } finally {
    db.close();
  }
}

/** `n` jobs of a subscription, as the processor hands them off. */
function jobsFor(owner: string, sub: string, n: number): Job[] {
  return Array.from({ length: n }, (_, i) => ({
    job_id: `job_${sub}_${i}_${randomBytes(3).toString('hex')}`,
    subscription_id: sub,
    owner,
    kind: 'event',
    event: event(owner, 'device.created', `d${i}`, Math.floor(Date.now() / 1000)),
    attempt: 0,
    enqueued: Date.now(),
  }));
}

// Every case with the HTTP side on a thread of its own (the default on two cores) and on the
// dispatching thread.
for (const httpThreads of [1, 0])
  describe(`dispatcher bounds per subscription, HTTP on ${httpThreads ? 'its own thread' : 'the dispatching thread'} (int)`, () => {
    it('holds a burst only as far as its subscription’s queue goes; the rest stays due', async () => {
      const metrics = new Registry();
      const { deliveries, rx, dispatcher, close, subscribe } = await rig({
        httpThreads,
        timeoutMs: 1000,
        metrics,
      });
      const owner = 'prn:::accounts:/bounds';
      const sub = await subscribe(owner, '/hang');
      try {
        await dispatcher.start();
        const before = Date.now();
        const jobs: Job[] = Array.from({ length: 100 }, (_, i) => ({
          job_id: `job_bounds_${i}`,
          subscription_id: sub,
          owner,
          kind: 'event',
          event: event(owner, 'device.created', `d${i}`, Math.floor(before / 1000)),
          attempt: 0,
          enqueued: before,
        }));
        await dispatcher.handOff(jobs);
        await rx.waitFor('/hang', 2);
        await new Promise((r) => setTimeout(r, 300)); // claims in between find no room for the subscription
        const held = (await metrics.getSingleMetric('hub_webhook_jobs_held')!.get()).values[0]!.value;
        assert.ok(held >= 16 && held <= 18, `two attempts in flight and at most sixteen waiting: ${held}`);
        assert.equal(rx.at('/hang').length, 2, 'no more attempts than the subscription’s slots');
        // The held ones are stored (leased here) once they have waited SPILL_MS.
        await new Promise((r) => setTimeout(r, SPILL_MS));
        const pending = await deliveries.pending();
        assert.equal(pending.count, 100);
        assert.ok(pending.oldestDue! <= Date.now(), 'the other 82 are due now, not sent back for later');
      } finally {
        await close();
      }
    });

    it('a hand-off beyond the process’s room waits for room instead of storing the jobs due', async () => {
      const { file, rx, dispatcher, close, subscribe, started } = await rig({
        httpThreads,
        timeoutMs: 5000,
        maxInFlight: 8,
      });
      const owner = 'prn:::accounts:/room';
      try {
        // Four subscriptions, ten jobs each, interleaved: no subscription's queue fills, the
        // process's eight slots do.
        const subs = await Promise.all([0, 1, 2, 3].map(() => subscribe(owner, '/ok')));
        await started(owner, subs[0]!, '/ok');
        const batches = subs.map((sub) => jobsFor(owner, sub, 10));
        const jobs = batches[0]!.flatMap((_, i) => batches.map((b) => b[i]!));
        await dispatcher.handOff(jobs);
        const due = scheduleRows(file, 'due <= ?', Date.now());
        assert.equal(due, 0, 'every job was held or finished when the hand-off resolved, none left due');
        await rx.waitFor('/ok', 41);
      } finally {
        await close();
      }
    });

    it('a hand-off beyond its subscription’s queue waits while the queue drains instead of storing the rest', async () => {
      // A backlog (a topic read after an outage, a burst of one account's changes) is durable where
      // it is: stored instead, each job cost the schedule a write, a claim and a finish of its own.
      const { file, rx, dispatcher, close, subscribe, started } = await rig({
        httpThreads,
        timeoutMs: 5000,
      });
      const owner = 'prn:::accounts:/backlog';
      try {
        const sub = await subscribe(owner, '/ok');
        await started(owner, sub, '/ok');
        // 60 jobs of one subscription: 2 in flight and 16 waiting at a time.
        await dispatcher.handOff(jobsFor(owner, sub, 60));
        assert.equal(
          scheduleRows(file),
          0,
          'every job was held or finished when the hand-off resolved, none stored',
        );
        await rx.waitFor('/ok', 61);
        assert.equal(scheduleRows(file), 0);
      } finally {
        await close();
      }
    });

    it('a subscription whose queue a wait saw full is slow: later hand-offs store its jobs at once until its queue drains', async () => {
      const { file, dispatcher, close, subscribe } = await rig({ httpThreads, timeoutMs: 5000 });
      const owner = 'prn:::accounts:/slow';
      try {
        const hanging = await subscribe(owner, '/hang/slow');
        await dispatcher.start();
        const first = Date.now();
        await dispatcher.handOff(jobsFor(owner, hanging, 20)); // 18 held, 2 wait for room, then stored
        assert.ok(Date.now() - first >= 200, 'the first hand-off waited for room');
        const second = Date.now();
        await dispatcher.handOff(jobsFor(owner, hanging, 5));
        assert.ok(Date.now() - second < 150, `the next one stored them at once: ${Date.now() - second} ms`);
        assert.equal(scheduleRows(file), 7);
      } finally {
        await close();
      }
    });

    it('subscriptions that drain at the process’s pace are not slow: a hand-off waits for them past a wait without room, storing nothing', async () => {
      // Each receiver answers in 150 ms: with 2 attempts in flight a subscription frees fewer places
      // than a chunk (4) in ROOM_WAIT_MS, yet keeps pace with the other. Until 2026-11-30 a wait
      // that saw no chunk free stored the rest: on a loaded machine a healthy subscription's tail.
      const { file, rx, dispatcher, close, subscribe, started } = await rig({ httpThreads, timeoutMs: 5000 });
      const owner = 'prn:::accounts:/paced';
      try {
        const warm = await subscribe(owner, '/ok/paced-warm');
        const subs = await Promise.all(['a', 'b'].map((n) => subscribe(owner, `/ok/paced-${n}?delay=150`)));
        await started(owner, warm, '/ok/paced-warm');
        // 22 jobs each: 18 held at once (2 in flight, 16 waiting), 4 waiting for room.
        const [a, b] = subs.map((sub) => jobsFor(owner, sub, 22));
        const began = Date.now();
        await dispatcher.handOff(a!.flatMap((job, i) => [job, b![i]!]));
        const waited = Date.now() - began;
        assert.equal(
          scheduleRows(file),
          0,
          `every job held when the hand-off resolved, none stored (${waited} ms)`,
        );
        assert.ok(waited >= 250, `the hand-off waited past a wait without room: ${waited} ms`);
        await rx.waitFor('/ok/paced-a', 22);
        await rx.waitFor('/ok/paced-b', 22);
      } finally {
        await close();
      }
    });

    it('a hand-off’s subscriptions wait each for its own room: a hanging one’s jobs are stored, every other’s held', async () => {
      // Until 2026-11-30 a hand-off waited job by job, and once one subscription's wait gave up,
      // the jobs of every other that found no room at that moment were stored too.
      const { file, rx, dispatcher, close, subscribe, started } = await rig({ httpThreads, timeoutMs: 5000 });
      const owner = 'prn:::accounts:/apart';
      try {
        const hanging = await subscribe(owner, '/hang/apart');
        const healthy = await subscribe(owner, '/ok/apart');
        await started(owner, healthy, '/ok/apart');
        // 30 jobs each, the hanging one's first: each subscription holds 18 at once, and the
        // healthy one's last 12 find its queue full only after the hanging one's wait gave up.
        const [h, ok] = [hanging, healthy].map((sub) => jobsFor(owner, sub, 30));
        await dispatcher.handOff([...h!, ...ok!]);
        assert.equal(
          scheduleRows(file),
          12,
          'the hanging subscription’s 12 without room stored, nothing else',
        );
        await rx.waitFor('/ok/apart', 31);
        assert.equal(rx.at('/hang/apart').length, 2, 'the hanging one holds its 2 slots');
      } finally {
        await close();
      }
    });

    it('a hand-off has at most WAITS_PER_HANDOFF subscriptions waiting at once: the next waits for one of them', async () => {
      // Every attempt's end asks each waiter whether its room freed: an account with hundreds of
      // subscriptions would otherwise make as many waiters at saturation.
      const { file, rx, dispatcher, close, subscribe, started } = await rig({ httpThreads, timeoutMs: 2000 });
      const owner = 'prn:::accounts:/waiters';
      try {
        const healthy = await subscribe(owner, '/ok/waiters');
        await started(owner, healthy, '/ok/waiters');
        // One more hanging subscription than may wait, each with one job past its room (2 in
        // flight, 16 queued), then a job of the healthy one, last in the batch.
        const hanging: string[] = [];
        for (let i = 0; i <= WAITS_PER_HANDOFF; i++)
          hanging.push(await subscribe(owner, `/hang/waiters-${i}`));
        const from = Date.now();
        const handedOff = dispatcher.handOff([
          ...hanging.flatMap((sub) => jobsFor(owner, sub, 19)),
          ...jobsFor(owner, healthy, 1),
        ]);
        const [, second] = await rx.waitFor('/ok/waiters', 2);
        await handedOff;
        // The healthy job is taken in only once a waiter gave up (ROOM_WAIT_MS without room).
        assert.ok(
          second!.at - from >= ROOM_WAIT_MS - 20,
          `the healthy job went out ${second!.at - from} ms after the hand-off, before a waiter left`,
        );
        assert.equal(
          scheduleRows(file),
          WAITS_PER_HANDOFF + 1,
          'each hanging subscription’s job without room stored',
        );
      } finally {
        await close();
      }
    });

    it('a batch handed off twice while its hand-offs wait for room delivers each job once', async () => {
      // The processor's retry of a batch whose other write failed, while the first hand-off of it
      // still waits for its subscription's queue: the two must not both take a job in.
      const { rx, dispatcher, close, subscribe, started } = await rig({ httpThreads, timeoutMs: 5000 });
      const owner = 'prn:::accounts:/twice';
      try {
        const sub = await subscribe(owner, '/ok/twice');
        await started(owner, sub, '/ok/twice');
        const batch = jobsFor(owner, sub, 60);
        await Promise.all([dispatcher.handOff(batch), dispatcher.handOff(batch)]);
        await rx.waitFor('/ok/twice', 61);
        await new Promise((r) => setTimeout(r, 300)); // time for any second delivery to arrive
        const ids = rx.at('/ok/twice').map((r) => (JSON.parse(r.body) as { id: string }).id);
        assert.equal(ids.length, 61, 'no job delivered twice');
        assert.equal(new Set(ids).size, 61);
      } finally {
        await close();
      }
    });

    it('delivers handed-off jobs before storing them; stores those that stay too long, and those waiting at a stop', async () => {
      const { file, deliveries, rx, dispatcher, close, subscribe } = await rig({
        httpThreads,
        timeoutMs: 3 * SPILL_MS,
      });
      const rows = () => scheduleRows(file);
      const owner = 'prn:::accounts:/handoff';
      const [fast, slow, stopped] = [
        await subscribe(owner, '/ok'),
        await subscribe(owner, '/hang'),
        await subscribe(owner, '/hang/2'),
      ];
      const jobsOf = (sub: string, n: number) => jobsFor(owner, sub, n);
      try {
        await dispatcher.start();
        // Delivered and recorded, and the schedule never held them.
        await (await dispatcher.handOff(jobsOf(fast, 5))).durable;
        assert.equal(rx.at('/ok').length, 5);
        assert.equal((await deliveries.attempts(fast, { limit: 10, skip: 0 })).total, 5);
        assert.equal(rows(), 0, 'no schedule row for a job delivered first');

        // A hanging endpoint: two attempts in flight, two waiting; stored once they stay too long,
        // and only then is their hand-off durable. Another subscription's jobs go out meanwhile.
        const handedAt = Date.now();
        const { durable } = await dispatcher.handOff(jobsOf(slow, 4));
        let durableAt = 0;
        void durable.then(() => {
          durableAt = Date.now();
        });
        await rx.waitFor('/hang', 2);
        await (await dispatcher.handOff(jobsOf(fast, 3))).durable;
        assert.equal(rx.at('/ok').length, 8, 'the other subscription’s jobs were delivered meanwhile');
        assert.equal(durableAt, 0, 'the hanging jobs are not durable yet');
        assert.equal(rows(), 0);
        await durable;
        const waited = durableAt - handedAt;
        assert.ok(waited >= SPILL_MS && waited < SPILL_MS + 1500, `durable after ${waited} ms`);
        assert.equal(rows(), 4, 'the four stored, leased to this dispatcher');
        assert.equal(rx.at('/hang').length, 2, 'stored, not sent again');

        // Stopped while jobs wait: those waiting are stored, due; those in flight are recorded (they
        // time out) with their retries.
        const last = await dispatcher.handOff(jobsOf(stopped, 5));
        await rx.waitFor('/hang/2', 2);
        await dispatcher.stop();
        await last.durable;
        const left = await deliveries.claim(Date.now() + 1, 100, 1000);
        assert.equal(left.filter((c) => c.job.subscription_id === stopped).length, 3, 'the three waiting');
        assert.equal(
          (await deliveries.attempts(stopped, { limit: 10, skip: 0 })).items.filter(
            (a) => a.outcome === 'timeout',
          ).length,
          2,
          'the two in flight, recorded',
        );
        const db = new DatabaseSync(file, { readOnly: true });
        const bySub = db
          .prepare('SELECT sub, due IS NULL AS done, count(*) AS n FROM schedule GROUP BY 1, 2')
          .all();
        db.close();
        assert.equal(
          (await deliveries.pending()).count,
          4 + 5,
          `every hanging job is pending: ${JSON.stringify(bySub)} ${fast} ${slow} ${stopped}`,
        );
      } finally {
        await close();
      }
    });

    it('a batch handed off again after its store write failed is durable only once the jobs it left held are', async () => {
      const { file, deliveries, dispatcher, close, subscribe } = await rig({
        httpThreads,
        timeoutMs: 3 * SPILL_MS,
      });
      const owner = 'prn:::accounts:/handoff-again';
      const hanging = await subscribe(owner, '/hang/again');
      // Two in flight and sixteen waiting are held; the last two find no room freeing (the
      // receiver hangs) and are stored, each hand-off a quarter of a second later.
      const batch = jobsFor(owner, hanging, 20);
      const enqueue = deliveries.enqueue;
      try {
        await dispatcher.start();
        deliveries.enqueue = async () => {
          throw new Error('disk full');
        };
        await assert.rejects(dispatcher.handOff(batch), /disk full/);
        deliveries.enqueue = enqueue;
        const { durable } = await dispatcher.handOff(batch); // the processor's retry
        let durableAt = 0;
        void durable.then(() => {
          durableAt = Date.now();
        });
        // Well before the held jobs have stayed SPILL_MS (the two hand-offs took about half of it).
        await new Promise((r) => setTimeout(r, 100));
        assert.equal(durableAt, 0, 'eighteen jobs are held in memory only: not durable yet');
        assert.equal(scheduleRows(file), 2);
        await durable; // once they are stored, as jobs that stayed too long
        assert.equal(scheduleRows(file), 20);
      } finally {
        deliveries.enqueue = enqueue;
        await close();
      }
    });

    it('a handed-off job whose attempt could not start is stored at once: a stop does not leave its hand-off waiting', async () => {
      const { store, file, deliveries, rx, dispatcher, close } = await rig({
        httpThreads,
        timeoutMs: 3 * SPILL_MS,
      });
      const owner = 'prn:::accounts:/unsealable';
      // Sealed with another key: the dispatcher cannot open its secret, so no attempt is made.
      const sub = await benchSubscription(store, {
        owner,
        url: `${rx.url}/ok/unsealable`,
        eventType: 'device.created',
        sealKey: randomBytes(32),
      });
      try {
        await dispatcher.start();
        const { durable } = await dispatcher.handOff(jobsFor(owner, sub, 3));
        await new Promise((r) => setTimeout(r, 100));
        await dispatcher.stop();
        const settled = await Promise.race([
          durable.then(() => 'durable'),
          new Promise((r) => setTimeout(() => r('still waiting'), 3 * SPILL_MS)),
        ]);
        assert.equal(settled, 'durable');
        assert.equal(scheduleRows(file), 3);
        assert.equal((await deliveries.pending()).count, 3, 'pending, for a claim');
        assert.equal(rx.at('/ok/unsealable').length, 0);
      } finally {
        await close();
      }
    });

    it('an attempt’s end does not send the claim loop to a schedule with nothing due', async () => {
      const { deliveries, rx, dispatcher, close, subscribe, started } = await rig({
        httpThreads,
        timeoutMs: 1000,
      });
      const owner = 'prn:::accounts:/claims';
      const sub = await subscribe(owner, '/ok');
      const claim = deliveries.claim.bind(deliveries);
      let claims = 0;
      deliveries.claim = (...args) => {
        claims++;
        return claim(...args);
      };
      try {
        await started(owner, sub, '/ok');
        const before = claims;
        const from = Date.now();
        // Thirty deliveries one after another, each ending while the loop sleeps: before, each end
        // woke it to claim from the empty schedule (and to read its next due time).
        for (let i = 0; i < 30; i++) await (await dispatcher.handOff(jobsFor(owner, sub, 1))).durable;
        assert.equal(rx.at('/ok').length, 31);
        // Its own poll, once a second, still runs (jobs other processes schedule).
        const polls = Math.ceil((Date.now() - from) / 1000);
        assert.ok(claims - before <= polls + 1, `${claims - before} claims in ${Date.now() - from} ms`);
      } finally {
        await close();
      }
    });

    it('a job enqueued while the claim loop reads the schedule is claimed at once, not at the next poll', async () => {
      const { deliveries, rx, close, subscribe, started } = await rig({ httpThreads, timeoutMs: 1000 });
      const owner = 'prn:::accounts:/claims-meanwhile';
      const sub = await subscribe(owner, '/ok');
      try {
        await started(owner, sub, '/ok');
        // Another caller's enqueue lands while the loop waits for the schedule's next due time:
        // its wake comes before the loop sleeps on an answer that does not know the job.
        const nextDue = deliveries.nextDue.bind(deliveries);
        let enqueuedAt = 0;
        deliveries.nextDue = async () => {
          const next = await nextDue();
          if (!enqueuedAt) {
            enqueuedAt = Date.now();
            await deliveries.enqueue(jobsFor(owner, sub, 1));
          }
          return next;
        };
        const [, got] = await rx.waitFor('/ok', 2);
        const waited = got!.at - enqueuedAt;
        assert.ok(enqueuedAt > 0 && waited < 700, `delivered ${waited} ms after it was enqueued`);
      } finally {
        await close();
      }
    });

    it('slow subscriptions’ queues leave room for other subscriptions’ jobs: these start at once', async () => {
      // 24 jobs a process, 2 in flight and 16 waiting a subscription: two hanging subscriptions
      // with backlogs would hold them all, and the healthy one's jobs then waited for their timeouts.
      const timeoutMs = 3 * SPILL_MS;
      const { rx, dispatcher, deliveries, close, subscribe } = await rig({
        httpThreads,
        timeoutMs,
        maxInFlight: 24,
      });
      const owner = 'prn:::accounts:/isolation';
      const [slowA, slowB, healthy] = [
        await subscribe(owner, '/hang/a'),
        await subscribe(owner, '/hang/b'),
        await subscribe(owner, '/ok/healthy'),
      ];
      try {
        await dispatcher.start();
        const startedAt = Date.now();
        await dispatcher.handOff(jobsFor(owner, slowA, 20));
        await dispatcher.handOff(jobsFor(owner, slowB, 20));
        await rx.waitFor('/hang/a', 2);
        await rx.waitFor('/hang/b', 2);
        await dispatcher.handOff(jobsFor(owner, healthy, 5));
        const arrived = await Promise.race([
          rx.waitFor('/ok/healthy', 5).then(() => Date.now() - startedAt),
          new Promise<number>((r) => setTimeout(() => r(Number.POSITIVE_INFINITY), timeoutMs)),
        ]);
        assert.ok(arrived < timeoutMs, 'all five delivered before any hanging attempt timed out');
        assert.equal(
          (await deliveries.attempts(slowA, { limit: 10, skip: 0 })).total,
          0,
          'none timed out yet',
        );
      } finally {
        await close();
      }
    });

    it('times end-to-end latency for deliveries of changes only: not tests, replays or redeliveries', async () => {
      const metrics = new Registry();
      const { rx, dispatcher, close, subscribe } = await rig({
        httpThreads,
        timeoutMs: 3 * SPILL_MS,
        metrics,
      });
      const owner = 'prn:::accounts:/latency';
      const sub = await subscribe(owner, '/ok/latency');
      const latency = async () =>
        (await metrics.getSingleMetric('hub_webhook_delivery_latency_seconds')!.get()).values.find((v) =>
          (v as { metricName?: string }).metricName?.endsWith('_count'),
        )!.value;
      try {
        await dispatcher.start();
        // An event of 20 days ago, sent again by an operator in three ways, then a change of now.
        const [old, now] = [jobsFor(owner, sub, 1)[0]!, jobsFor(owner, sub, 1)[0]!];
        old.event.created_ms = Date.now() - 20 * 86_400_000;
        now.event.created_ms = Date.now();
        const again = (['test', 'replay', 'redeliver'] as const).map((kind, i) => ({
          ...old,
          job_id: `${old.job_id}_${i}`,
          kind,
        }));
        await (await dispatcher.handOff(again)).durable;
        assert.equal(rx.at('/ok/latency').length, 3);
        assert.equal(await latency(), 0);
        await (await dispatcher.handOff([now])).durable;
        assert.equal(await latency(), 1);
        const sum = (
          await metrics.getSingleMetric('hub_webhook_delivery_latency_seconds')!.get()
        ).values.find((v) => (v as { metricName?: string }).metricName?.endsWith('_sum'))!.value;
        assert.ok(sum < 60, `the change's own latency only (${sum} s)`);
      } finally {
        await close();
      }
    });
  });

describe('dispatcher: a failing subscription’s circuit (int)', () => {
  it('once open, holds at most one attempt of it in flight (the probe, after its delay), its jobs waiting in the schedule; another subscription is delivered meanwhile', async function () {
    this.timeout(60_000);
    const metrics = new Registry();
    const { deliveries, rx, dispatcher, close, subscribe } = await rig({
      httpThreads: 0,
      timeoutMs: 1000,
      metrics,
    });
    const owner = 'prn:::accounts:/circuit';
    const failing = await subscribe(owner, '/hang/circuit');
    const healthy = await subscribe(owner, '/ok/circuit');
    try {
      await dispatcher.start();
      await dispatcher.handOff([...jobsFor(owner, failing, 30), ...jobsFor(owner, healthy, 20)]);
      while ((await deliveries.health([failing]))[0]!.consecutiveFailures < CIRCUIT_OPENS_AFTER)
        await new Promise((r) => setTimeout(r, 50));
      // Open. Attempts that started as it opened (before the failure that opened it was recorded)
      // end within their timeout; from the last of them on, the next is the probe, 5 s later.
      assert.equal((await rx.waitFor('/ok/circuit', 20)).length, 20, 'the healthy one is delivered');
      await new Promise((r) => setTimeout(r, 1500));
      const opened = (await deliveries.health([failing]))[0]!.lastFailure!;
      const held = (await metrics.getSingleMetric('hub_webhook_jobs_held')!.get()).values[0]!.value;
      assert.equal(held, 0, 'nothing of it held in memory while open');
      assert.equal((await deliveries.pending()).count, 30, 'every job of it waits in the schedule');
      const open = (await metrics.getSingleMetric('hub_webhook_circuits_open')!.get()).values[0]!.value;
      assert.equal(open, 1);
      // The probe, 5 s after the last failure, all 30 jobs due by then: one attempt, alone.
      const before = rx.at('/hang/circuit').length;
      await rx.waitFor('/hang/circuit', before + 1, 10_000);
      await new Promise((r) => setTimeout(r, 2500)); // past its timeout: any other would have started
      const all = (await deliveries.attempts(failing, { limit: 100, skip: 0 })).items;
      const after = all.filter((a) => Date.parse(a.started_at) > opened);
      assert.equal(after.length, 1, 'one probe at a time');
      const lastFailure = Math.max(
        ...all.filter((a) => Date.parse(a.started_at) <= opened).map((a) => Date.parse(a.finished_at)),
      );
      const waited = Date.parse(after[0]!.started_at) - lastFailure;
      assert.ok(waited >= MIN_PROBE_DELAY_S * 1000 - 50, `the probe waits its delay: ${waited} ms`);
      assert.equal((await deliveries.pending()).count, 30, 'its jobs still wait in the schedule');
      assert.equal(rx.at('/hang/circuit').length, all.length, 'every attempt reached the receiver');
    } finally {
      await close();
    }
  });
});
