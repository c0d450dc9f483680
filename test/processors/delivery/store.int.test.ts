// The delivery store contract on every adapter: SQLite, SQLite on its own thread (embedded), the
// real Redis, and the real Redis with its attempt records in the real PostgreSQL (distributed).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Redis } from 'ioredis';
import { afterAttempt, NO_ATTEMPTS } from '../../../processors/delivery/health.ts';
import { type Attempt, type AttemptRecord, recordOf } from '../../../processors/delivery/port.ts';
import { PostgresAttemptLog } from '../../../processors/delivery/postgres.ts';
import { RedisDeliveryStore } from '../../../processors/delivery/redis.ts';
import { SqliteDeliveryStore } from '../../../processors/delivery/sqlite.ts';
import { ThreadedDeliveryStore } from '../../../processors/delivery/threaded.ts';
import { PostgresLogs } from '../../../processors/stream/postgres-logs.ts';
import { dropSchema, inSchema, redisDb, testConfig } from '../../harness.ts';
import { attemptOf, deliveryStoreContract, job } from './contract.ts';

const RETENTION_MS = 86_400_000;

/** A new file for a SQLite store. */
const freshPath = () => join(mkdtempSync(join(tmpdir(), 'hub-deliveries-')), 'deliveries.db');

// A database of its own: the schedule's keys are global to a Redis database.
const redis = new Redis(redisDb(testConfig().redisUrl, 11));
after(() => redis.disconnect());

// The attempt records' schema of its own, kept for the whole file (ids are random, and every list
// of the contract is of a subscription or an event of its own test).
const { postgresUrl } = testConfig();
const schema = `test_attlog_${randomBytes(4).toString('hex')}`;
const logs = new PostgresLogs({
  url: inSchema(postgresUrl, schema),
  retentionMs: RETENTION_MS,
});
after(async () => {
  await logs.close();
  await dropSchema(postgresUrl, schema);
});

/** Every adapter, each opened empty. */
const STORES = [
  ['SQLite', async () => new SqliteDeliveryStore(freshPath(), { retentionMs: RETENTION_MS })],
  [
    'SQLite on its own thread',
    async () => new ThreadedDeliveryStore(freshPath(), { retentionMs: RETENTION_MS }),
  ],
  [
    'Redis',
    async () => {
      await redis.flushdb();
      return new RedisDeliveryStore(redis, { retentionMs: RETENTION_MS });
    },
  ],
  [
    'Redis, its attempt records in PostgreSQL',
    async () => {
      await redis.flushdb();
      return new RedisDeliveryStore(redis, {
        retentionMs: RETENTION_MS,
        records: new PostgresAttemptLog(logs),
      });
    },
  ],
] as const;

for (const [name, open] of STORES) deliveryStoreContract(name, open);

describe('delivery stores: a finish that cannot be written', () => {
  for (const [name, open] of STORES)
    it(`${name}: fails alone; the finishes of its window or batch are written whole`, async () => {
      const store = await open();
      try {
        const j = job('sub_bad');
        const before = attemptOf(j, 1, 'failed');
        // Headers JSON cannot hold: its values cannot be made.
        const bad = {
          ...attemptOf(j, 2, 'failed'),
          request: { url: 'https://example.com/hook', headers: { x: 1n }, body: '{}' },
        } as unknown as Attempt;
        const after = attemptOf(j, 3, 'succeeded');
        const finishing = [before, bad, after].map((a) =>
          store.finish({ ...j, attempt: a.attempt }, a, null, true),
        );
        const settled = await Promise.allSettled(finishing);
        assert.deepEqual(
          settled.map((x) => x.status),
          ['fulfilled', 'rejected', 'fulfilled'],
        );
        assert.deepEqual(await store.attempt(before.id), recordOf(before));
        assert.deepEqual(await store.attempt(after.id), recordOf(after));
        assert.equal(await store.attempt(bad.id), undefined);
      } finally {
        await store.close();
      }
    });
});

describe('Redis delivery store: retention', () => {
  it('attempts older than the retention leave the indexes, trimmed once a call for finishes of one subscription', async () => {
    await redis.flushdb();
    const store = new RedisDeliveryStore(redis, { retentionMs: 2000 });
    const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
    try {
      const j = job('sub_ttl');
      // The waits leave a second's slack each way on a busy machine.
      const old = attemptOf(j, 1, 'failed');
      await store.finish({ ...j, attempt: 1 }, old, null);
      await wait(1200);
      // Keeps the subscription's indexes alive past the old attempt's retention.
      const mid = { ...attemptOf(j, 2, 'failed'), started: Date.now() };
      await store.finish({ ...j, attempt: 2 }, mid, null);
      await wait(1000);
      // Finished in one turn: one script call, the subscription's keys in both finishes.
      const [a, b] = [3, 4].map((n) => ({
        ...attemptOf(j, n, n === 3 ? 'failed' : 'dead_lettered'),
        started: Date.now() + n, // in this order in the index
      }));
      await Promise.all([a!, b!].map((x) => store.finish({ ...j, attempt: x.attempt }, x, null)));
      const all = await store.attempts('sub_ttl', { limit: 10, skip: 0 });
      assert.equal(all.total, 3, 'the old attempt is trimmed from the index');
      assert.deepEqual(await redis.zrange('hub:atts:sub_ttl', '0', '-1'), [mid.id, a!.id, b!.id]);
      assert.deepEqual(
        (await redis.zrange('hub:atts:sub_ttl:failed', '0', '-1')).sort(),
        [mid.id, a!.id, b!.id].sort(),
      );
      for (const key of ['hub:atts:sub_ttl', 'hub:atts:sub_ttl:failed', 'hub:atts:sub_ttl:dead_lettered']) {
        const ttl = await redis.pttl(key);
        assert.ok(
          ttl > 1000 && ttl <= 2000,
          `${key} expires with the retention from the last finish (${ttl} ms)`,
        );
      }
    } finally {
      await store.close();
    }
  });

  it('a quiet subscription lists and counts only attempts within the retention (no finish trims its index)', async () => {
    await redis.flushdb();
    const store = new RedisDeliveryStore(redis, { retentionMs: 2000 });
    const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));
    try {
      const j = job('sub_quiet');
      const old = attemptOf(j, 1, 'failed');
      await store.finish({ ...j, attempt: 1 }, old, null);
      await wait(1200);
      const recent = { ...attemptOf(j, 2, 'failed'), started: Date.now() };
      await store.finish({ ...j, attempt: 2 }, recent, null); // the index lives on with both
      await wait(1000); // the old attempt's record has expired; nothing has finished since
      assert.equal(await redis.zcard('hub:atts:sub_quiet'), 2, 'the index still holds the old id');
      for (const status of [undefined, 'failed'] as const) {
        const page = await store.attempts('sub_quiet', { status, limit: 10, skip: 0 });
        assert.deepEqual([page.total, page.items.map((a) => a.id)], [1, [recent.id]], `status ${status}`);
      }
      assert.deepEqual(
        (await store.attemptsOfEvent(j.owner, j.event.id)).map((a) => a.id),
        [recent.id],
      );
    } finally {
      await store.close();
    }
  });
});

describe('Redis delivery store: done jobs', () => {
  it("a done job's body goes at once and its id after doneJobsMs; a retried job keeps its body; sent again meanwhile, it is not delivered again", async () => {
    await redis.flushdb();
    const store = new RedisDeliveryStore(redis, { retentionMs: RETENTION_MS, doneJobsMs: 1500 });
    try {
      const [done, retried] = [job('sub_done'), job('sub_done')];
      await store.enqueue([done, retried]);
      assert.equal((await store.claim(Date.now() + 1, 10, 30_000)).length, 2);
      await store.finish({ ...done, attempt: 1 }, attemptOf(done, 1, 'succeeded'), null);
      await store.finish({ ...retried, attempt: 1 }, attemptOf(retried, 1, 'failed'), Date.now() + 60_000);
      assert.equal(await redis.get(`hub:job:${done.job_id}`), '', 'no body kept for a done job');
      const ttl = await redis.pttl(`hub:job:${done.job_id}`);
      assert.ok(ttl > 0 && ttl <= 1500, `its id kept for doneJobsMs (${ttl} ms)`);
      assert.ok((await redis.get(`hub:job:${retried.job_id}`))!.length > 10, 'a pending job keeps its body');
      assert.ok((await redis.pttl(`hub:job:${retried.job_id}`)) > 1500);
      await store.enqueue([done]); // sent again by a processor that restarted
      assert.equal((await store.pending()).count, 1, 'the done job is not scheduled again');
      await new Promise((r) => setTimeout(r, 1700));
      assert.equal(await redis.exists(`hub:job:${done.job_id}`), 0, 'gone after doneJobsMs');
    } finally {
      await store.close();
    }
  });

  it('knows the jobs pending and done, those delivered before they were stored too: the dispatcher leaves them out when they come again', async () => {
    await redis.flushdb();
    const store = new RedisDeliveryStore(redis, { retentionMs: RETENTION_MS, doneJobsMs: 60_000 });
    try {
      const [pending, fresh, retried, unseen] = [job('sub_k'), job('sub_k'), job('sub_k'), job('sub_k')];
      await store.enqueue([pending]);
      // Delivered first (the deliveries topic's way): finished without a row before.
      await store.finish({ ...fresh, attempt: 1 }, attemptOf(fresh, 1, 'succeeded'), null);
      await store.finish({ ...retried, attempt: 1 }, attemptOf(retried, 1, 'failed'), Date.now() + 60_000);
      const known = await store.known([pending, fresh, retried, unseen].map((j) => j.job_id));
      assert.deepEqual(known, new Set([pending.job_id, fresh.job_id, retried.job_id]));
      assert.deepEqual(await store.known([]), new Set());
    } finally {
      await store.close();
    }
  });
});

describe('Redis delivery store, its attempt records in PostgreSQL: a batch of finishes delivered before they were stored', () => {
  it('in one script call: done, known, recorded, the health as one by one; a job another holds stays its own', async () => {
    await redis.flushdb();
    const open = () =>
      new RedisDeliveryStore(redis, { retentionMs: RETENTION_MS, records: new PostgresAttemptLog(logs) });
    const [store, other] = [open(), open()];
    try {
      const plain = [job('sub_plain'), job('sub_plain'), job('sub_plain')];
      const [held, ok, failed] = [job('sub_plain'), job('sub_mixed'), job('sub_mixed')];
      await other.enqueue([held]);
      assert.equal((await other.claim(Date.now() + 1, 10, 30_000)).length, 1);
      const holder = await redis.hget('hub:jobs:holder', held.job_id);
      assert.ok(holder, 'the other holds it');
      // One turn: one script call. sub_plain's successes alone; sub_mixed's with a failure.
      const attempts = [...plain, held].map((j, i) => attemptOf(j, i + 1, 'succeeded'));
      const [good, bad] = [attemptOf(ok, 5, 'succeeded'), attemptOf(failed, 6, 'failed')];
      await Promise.all([
        ...[...plain, held].map((j, i) => store.finish({ ...j, attempt: 1 }, attempts[i]!, null, true)),
        store.finish({ ...ok, attempt: 1 }, good, null, true),
        store.finish({ ...failed, attempt: 1 }, bad, Date.now() + 60_000, true),
      ]);
      const all = [...plain, held, ok, failed].map((j) => j.job_id);
      assert.deepEqual(await store.known(all), new Set(all));
      for (const j of [...plain, ok]) assert.equal(await redis.get(`hub:job:${j.job_id}`), '', 'done');
      assert.equal(await redis.hget('hub:jobs:holder', held.job_id), holder, 'still the other’s');
      assert.equal((await store.pending()).count, 2, 'the held job and the retry');
      const [plainHealth, mixedHealth] = await store.health(['sub_plain', 'sub_mixed']);
      assert.deepEqual(plainHealth, {
        lastSuccess: attempts[3]!.finished,
        lastFailure: null,
        consecutiveFailures: 0,
        failingSince: null,
      });
      assert.deepEqual(
        mixedHealth,
        afterAttempt(afterAttempt(NO_ATTEMPTS, true, good.finished), false, bad.finished),
      );
      assert.equal((await store.attempts('sub_plain', { limit: 10, skip: 0 })).total, 4);
      assert.equal((await store.attempts('sub_mixed', { limit: 10, skip: 0 })).total, 2);
    } finally {
      await store.close();
      await other.close();
    }
  });
});

describe('SQLite delivery store: a file from before the schedule and the bodies were apart', () => {
  for (const withSub of [true, false])
    it(`moves its jobs over${withSub ? '' : ' (the oldest files: no sub column)'}: due ones are claimed with their bodies, finished ones stay known`, async () => {
      const path = freshPath();
      const due = job('sub_old');
      const done = job('sub_old');
      const old = new DatabaseSync(path);
      old.exec(
        `CREATE TABLE jobs (job_id TEXT PRIMARY KEY, due INTEGER, body TEXT NOT NULL, created INTEGER NOT NULL${withSub ? ', sub TEXT' : ''}) STRICT`,
      );
      const insert = old.prepare(
        `INSERT INTO jobs (job_id, due, body, created${withSub ? ', sub' : ''}) VALUES (?, ?, ?, ?${withSub ? ', ?' : ''})`,
      );
      const now = Date.now();
      for (const [j, at] of [
        [due, now - 1000],
        [done, null],
      ] as const)
        insert.run(j.job_id, at, JSON.stringify(j), now, ...(withSub ? [j.subscription_id] : []));
      old.close();

      const store = new SqliteDeliveryStore(path, { retentionMs: RETENTION_MS });
      try {
        assert.equal((await store.pending()).count, 1);
        // A job finished before the move is still known: sent again, it is not scheduled again.
        await store.enqueue([done]);
        assert.equal((await store.pending()).count, 1);
        const claimed = await store.claim(now, 10, 30_000);
        assert.deepEqual(
          claimed.map((c) => c.job),
          [due],
        );
        await store.finish(due, null, null);
        assert.equal((await store.pending()).count, 0);
      } finally {
        await store.close();
      }
      const tables = new DatabaseSync(path)
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .all()
        .map((r) => r.name);
      assert.deepEqual(tables, ['attempt_log', 'endpoint_health', 'job_bodies', 'schedule']);
    });

  it('moves them by job id beside a schedule already there (an older version ran on the file in between)', async () => {
    const path = freshPath();
    const newer = job('sub_x');
    const older = job('sub_x');
    const first = new SqliteDeliveryStore(path, { retentionMs: RETENTION_MS });
    await first.enqueue([newer]); // the schedule's row 1
    await first.close();
    const old = new DatabaseSync(path);
    old.exec(
      'CREATE TABLE jobs (job_id TEXT PRIMARY KEY, due INTEGER, body TEXT NOT NULL, created INTEGER NOT NULL, sub TEXT) STRICT',
    );
    // Its rowid 1 too; and the newer job once more, as the processor may send a job twice.
    const insert = old.prepare('INSERT INTO jobs (job_id, due, body, created, sub) VALUES (?, ?, ?, ?, ?)');
    for (const j of [older, newer])
      insert.run(j.job_id, Date.now() - 1000, JSON.stringify(j), Date.now(), 'sub_x');
    old.close();
    const store = new SqliteDeliveryStore(path, { retentionMs: RETENTION_MS });
    try {
      const claimed = await store.claim(Date.now() + 1, 10, 30_000);
      assert.deepEqual(claimed.map((c) => c.job.job_id).sort(), [newer.job_id, older.job_id].sort());
      assert.deepEqual(claimed.find((c) => c.job.job_id === older.job_id)!.job, older);
    } finally {
      await store.close();
    }
  });
});

describe('SQLite delivery store: a file from before attempts had rows of columns', () => {
  for (const bodyApart of [true, false])
    it(`moves its records over (${bodyApart ? 'the request body in a column of its own' : 'the oldest files: the request body inside the record'}): they read back whole, beside new ones`, async () => {
      const path = freshPath();
      const j = job('sub_b');
      // As an older version kept it: the record as JSON.
      const before: AttemptRecord = recordOf({
        ...attemptOf(j, 1, 'failed'),
        next: Date.now() + 60_000,
        request: {
          url: 'https://example.com/hook',
          headers: { 'webhook-id': 'del_1' },
          body: '{"id":"evt_1"}',
        },
        response: { status: 503, headers: { 'retry-after': '5' }, body: 'busy', truncated: false },
      });
      const old = new DatabaseSync(path);
      old.exec(`CREATE TABLE attempts (id TEXT PRIMARY KEY, subscription_id TEXT NOT NULL, owner TEXT NOT NULL,
        event_id TEXT NOT NULL, status TEXT NOT NULL, started INTEGER NOT NULL, body TEXT NOT NULL${bodyApart ? ', request_body TEXT' : ''}) STRICT`);
      const { body, ...rest } = before.request;
      const record = bodyApart ? { ...before, request: rest } : before;
      old
        .prepare(`INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?${bodyApart ? ', ?' : ''})`)
        .run(
          before.id,
          j.subscription_id,
          j.owner,
          j.event.id,
          'failed',
          Date.parse(before.started_at),
          JSON.stringify(record),
          ...(bodyApart ? [body] : []),
        );
      old.close();
      const store = new SqliteDeliveryStore(path, { retentionMs: RETENTION_MS });
      try {
        const after = attemptOf(j, 2, 'succeeded');
        await store.finish({ ...j, attempt: 2 }, after, null, true);
        assert.deepEqual(await store.attempt(before.id), before);
        assert.deepEqual(await store.attemptsOfEvent(j.owner, j.event.id), [before, recordOf(after)]);
        assert.deepEqual((await store.attempts('sub_b', { status: 'failed', limit: 10, skip: 0 })).items, [
          before,
        ]);
      } finally {
        await store.close();
      }
      const tables = new DatabaseSync(path)
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'attempts'")
        .all();
      assert.deepEqual(tables, []);
    });

  it('opens with a row it cannot read: the others move over, that one stays in the old table', async () => {
    const path = freshPath();
    const j = job('sub_c');
    const good = recordOf(attemptOf(j, 1, 'succeeded')); // as an older version kept it
    const old = new DatabaseSync(path);
    old.exec(`CREATE TABLE attempts (id TEXT PRIMARY KEY, subscription_id TEXT NOT NULL, owner TEXT NOT NULL,
      event_id TEXT NOT NULL, status TEXT NOT NULL, started INTEGER NOT NULL, body TEXT NOT NULL) STRICT`);
    const insert = old.prepare('INSERT INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?)');
    insert.run(
      good.id,
      j.subscription_id,
      j.owner,
      j.event.id,
      'succeeded',
      Date.parse(good.started_at),
      JSON.stringify(good),
    );
    insert.run(
      'del_torn',
      j.subscription_id,
      j.owner,
      j.event.id,
      'succeeded',
      Date.now(),
      '{"id":"del_torn",',
    );
    old.close();
    const store = new SqliteDeliveryStore(path, { retentionMs: RETENTION_MS });
    try {
      assert.deepEqual(await store.attemptsOfEvent(j.owner, j.event.id), [good]);
    } finally {
      await store.close();
    }
    const left = new DatabaseSync(path).prepare('SELECT id FROM attempts').all();
    assert.deepEqual(
      left.map((r) => r.id),
      ['del_torn'],
    );
  });
});

describe('SQLite delivery stores: a finish with a field left undefined', () => {
  for (const [name, Store] of [
    ['SQLite', SqliteDeliveryStore],
    ['SQLite on its own thread', ThreadedDeliveryStore],
  ] as const)
    it(`${name}: commits with the others of its window, the field read back as null`, async () => {
      const store = new Store(freshPath(), {
        retentionMs: RETENTION_MS,
      });
      try {
        const j = job('sub_u');
        const other = attemptOf(j, 1, 'failed');
        const odd = { ...attemptOf(j, 2, 'succeeded'), error: undefined } as unknown as Attempt;
        // One window: neither is awaited before the other is added.
        await Promise.all([
          store.finish({ ...j, attempt: 1 }, other, null, true),
          store.finish({ ...j, attempt: 2 }, odd, null, true),
        ]);
        assert.deepEqual(await store.attempt(other.id), recordOf(other));
        assert.deepEqual(await store.attempt(odd.id), { ...recordOf(odd), error: null });
      } finally {
        await store.close();
      }
    });
});

describe('SQLite delivery stores: reads and the group commit', () => {
  for (const [name, Store] of [
    ['SQLite', SqliteDeliveryStore],
    ['SQLite on its own thread', ThreadedDeliveryStore],
  ] as const)
    it(`${name}: a read made while finishes wait for their commit sees them`, async () => {
      const store = new Store(freshPath(), {
        retentionMs: RETENTION_MS,
      });
      try {
        const j = job('sub_w');
        const first = attemptOf(j, 1, 'failed');
        const second = attemptOf(j, 2, 'succeeded');
        // Not awaited: each read is made while the finishes before it wait for their commit.
        const finish = (a: typeof first, next: number | null) =>
          store.finish({ ...j, attempt: a.attempt }, a, next, true);
        const finishing = [finish(first, Date.now() + 60_000)];
        assert.equal((await store.pending()).count, 1, 'the retry is pending');
        finishing.push(finish(second, null));
        assert.deepEqual(await store.attempt(second.id), recordOf(second));
        const third = attemptOf(j, 3, 'succeeded');
        finishing.push(finish(third, null));
        assert.deepEqual(
          (await store.attempts('sub_w', { limit: 10, skip: 0 })).items,
          [third, second, first].map(recordOf),
        );
        const fourth = attemptOf(j, 4, 'succeeded');
        finishing.push(finish(fourth, null));
        assert.deepEqual(
          await store.attemptsOfEvent(j.owner, j.event.id),
          [first, second, third, fourth].map(recordOf),
        );
        await Promise.all(finishing);
      } finally {
        await store.close();
      }
    });
});

describe('Redis delivery store: a lease taken over by another dispatcher', () => {
  it('the late finishes and renewals of the one that lost it change nothing of the jobs; its attempts are recorded', async () => {
    await redis.flushdb();
    const [a, b] = [0, 1].map(() => new RedisDeliveryStore(redis, { retentionMs: RETENTION_MS }));
    const t = Date.now();
    const [done, retried] = [job('sub_lease'), job('sub_lease')];
    try {
      await a!.enqueue([done, retried]);
      assert.equal((await a!.claim(t + 1, 10, 1000)).length, 2, 'A leases both until t + 1,001');
      // A stalls past its leases (or Redis is out of its reach); B claims both.
      assert.equal((await b!.claim(t + 2000, 10, 30_000)).length, 2);
      await a!.renew([done.job_id, retried.job_id], t + 60_000);
      // On Redis's clock: within the clocks' measured difference of this process's.
      const lease = Number(await redis.zscore('hub:jobs:leased', done.job_id));
      assert.ok(Math.abs(lease - (t + 32_000)) < 1000, `B’s lease stands (${lease - t})`);
      // B completes one and schedules a retry of the other; A's late finishes say the opposite.
      await b!.finish({ ...done, attempt: 1 }, attemptOf(done, 1, 'succeeded'), null);
      await b!.finish({ ...retried, attempt: 1 }, attemptOf(retried, 1, 'failed'), t + 90_000);
      const late = attemptOf(done, 1, 'failed');
      await a!.finish({ ...done, attempt: 1 }, late, t + 70_000);
      await a!.finish({ ...retried, attempt: 1 }, attemptOf(retried, 1, 'succeeded'), null);
      assert.equal((await a!.pending()).count, 1, 'only B’s retry is pending');
      assert.deepEqual(
        (await b!.claim(t + 90_000, 10, 1000)).map((c) => [c.job.job_id, c.due]),
        [[retried.job_id, t + 90_000]],
      );
      assert.equal((await a!.attempt(late.id))?.id, late.id, 'the late attempt is in the log');
    } finally {
      await a!.close();
      await b!.close();
    }
  });
});

describe('Redis delivery store: dispatchers whose clocks differ', () => {
  it('one 40 s behind leases and schedules on Redis’s clock: its leases hold for the others, its retries come due in time', async () => {
    await redis.flushdb();
    const behind = () => Date.now() - 40_000;
    const a = new RedisDeliveryStore(redis, { retentionMs: RETENTION_MS, clock: behind });
    const b = new RedisDeliveryStore(redis, { retentionMs: RETENTION_MS });
    const j = job('sub_clock');
    try {
      await a.enqueue([j]);
      assert.equal((await a.claim(behind() + 1, 10, 30_000)).length, 1, 'due now, by its clock too');
      assert.deepEqual(await b.claim(Date.now() + 1, 10, 30_000), [], 'its lease runs 30 s for the others');
      assert.ok(Math.abs((await a.nextDue())! - (behind() + 30_000)) < 1000, 'read back on its own clock');
      // A retry 60 s ahead by its clock: due 60 s ahead for every dispatcher.
      await a.finish({ ...j, attempt: 1 }, attemptOf(j, 1, 'failed'), behind() + 60_000);
      assert.deepEqual(await b.claim(Date.now() + 58_000, 10, 1000), []);
      assert.equal((await b.claim(Date.now() + 62_000, 10, 1000)).length, 1);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
