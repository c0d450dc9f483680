// The distributed profile's logs in PostgreSQL beyond the contracts: partitions made ahead and on
// demand, dropped whole past the retention, shared by several processes; and the upgrade from a
// Redis set where an earlier version kept them.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import { recordOf } from '../../../processors/delivery/port.ts';
import { PostgresAttemptLog } from '../../../processors/delivery/postgres.ts';
import { RedisDeliveryStore } from '../../../processors/delivery/redis.ts';
import type { WebhookEvent } from '../../../processors/stream/derive.ts';
import { RedisEventLog } from '../../../processors/stream/eventlog.ts';
import { PostgresEventLog } from '../../../processors/stream/eventlog-postgres.ts';
import { appendStatement, type LogRows, PostgresLogs } from '../../../processors/stream/postgres-logs.ts';
import { MOVED_KEY, moveLogsFromRedis } from '../../../processors/stream/postgres-logs-move.ts';
import { dropSchema, inSchema, memoryLogger, redisDb, testConfig } from '../../harness.ts';
import { attemptOf, job } from '../delivery/contract.ts';
import { event } from './eventlog.ts';

const DAY = 86_400_000;
const { postgresUrl, redisUrl } = testConfig();

describe('PostgreSQL logs: partitions', () => {
  const schema = `test_parts_${randomBytes(4).toString('hex')}`;
  const opened: PostgresLogs[] = [];
  const open = () => {
    const logs = new PostgresLogs({ url: inSchema(postgresUrl, schema), retentionMs: 3 * DAY });
    opened.push(logs);
    return logs;
  };
  let client: pg.Client;
  const partitions = async (table: string) =>
    (
      await client.query<{ name: string }>(
        `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass ORDER BY 1`,
        [`${schema}.${table}`],
      )
    ).rows.map((r) => r.name);
  const day = (ms: number) => new Date(ms).toISOString().slice(0, 10).replaceAll('-', '');

  before(async () => {
    client = new pg.Client({ connectionString: postgresUrl });
    await client.connect();
  });
  after(async () => {
    await Promise.all(opened.map((l) => l.close()));
    await client.end();
    await dropSchema(postgresUrl, schema);
  });

  it('a day each, made ahead by the first write and on demand for an older one; dropped whole once past the retention', async () => {
    const logs = open();
    const log = new PostgresEventLog(logs);
    const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
    const now = Date.now();
    const s = (ms: number) => Math.floor(ms / 1000);
    const today = event(owner, 'device.created', 'a', s(now));
    const older = event(owner, 'device.updated', 'a', s(now - 2 * DAY));
    await log.append([today, older]);
    const expected = [now - 2 * DAY, now, now + DAY, now + 2 * DAY].map(day);
    assert.deepEqual(
      await partitions('hub_event_log'),
      expected.map((d) => `hub_event_log_${d}`),
    );
    assert.deepEqual(
      await partitions('hub_attempt_log'),
      expected.slice(1).map((d) => `hub_attempt_log_${d}`),
      "the attempts' partitions ahead, made by the same upkeep",
    );
    assert.equal((await log.list(owner, { limit: 10, skip: 0 })).total, 2);
    // Two days on, the older day is past the 3-day retention: its partition goes, rows and all.
    await logs.upkeepNow(now + 2 * DAY);
    const kept = [now, now + DAY, now + 2 * DAY, now + 3 * DAY, now + 4 * DAY].map(day);
    assert.deepEqual(
      await partitions('hub_event_log'),
      kept.map((d) => `hub_event_log_${d}`),
    );
    assert.deepEqual(
      (await log.list(owner, { limit: 10, skip: 0 })).items.map((e) => e.id),
      [today.id],
    );
  });

  it('several processes write new days at once; a partition another dropped meanwhile is made again', async () => {
    const [a, b] = [open(), open()];
    const [logA, logB] = [new PostgresEventLog(a), new PostgresEventLog(b)];
    const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
    const now = Date.now();
    const events = (n: number) =>
      Array.from({ length: n }, (_, i) =>
        event(owner, 'device.device_meta.updated', `d${i}`, Math.floor((now - (i % 3) * DAY) / 1000)),
      );
    const [first, second] = [events(30), events(30)];
    await Promise.all([logA.append(first), logB.append(second), logA.append(second)]);
    assert.equal((await logA.list(owner, { limit: 100, skip: 0 })).total, 60);
    // B's process drops yesterday's partition (as one whose clock were days ahead would); A, which
    // knew it, writes there again.
    await client.query(`DROP TABLE ${schema}.hub_event_log_${day(now - DAY)}`);
    const late = event(owner, 'device.updated', 'x', Math.floor((now - DAY) / 1000));
    await logA.append([late]);
    assert.deepEqual(await logB.get(owner, late.id), late);
  });
});

describe('PostgreSQL logs: totals', () => {
  const schema = `test_totals_${randomBytes(4).toString('hex')}`;
  let logs: PostgresLogs;
  before(() => {
    logs = new PostgresLogs({ url: inSchema(postgresUrl, schema), retentionMs: 3 * DAY });
  });
  after(async () => {
    await logs.close();
    await dropSchema(postgresUrl, schema);
  });

  it('rows come back as they went in: one alone, an empty value, quotes and backslashes, a newline in a column', async () => {
    // Each column crosses as one text, a newline before each value; a batch with a newline in a
    // value goes as arrays (groupedStatement).
    const log = new PostgresEventLog(logs);
    const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
    const s = Math.floor(Date.now() / 1000);
    const alone = { ...event(owner, 'device.created', 'a', s), resource_prn: '' };
    await log.append([alone]);
    assert.deepEqual(await log.get(owner, alone.id), alone);
    const odd = {
      ...event(owner, 'device.updated', 'b', s),
      data: { quote: 'say "hi"', backslash: 'C:\\dir\\', newline: 'two\nlines', braces: '{a,b}' },
    };
    const plain = event(owner, 'device.updated', 'c', s);
    await log.append([odd, plain]);
    assert.deepEqual(await log.get(owner, odd.id), odd);
    assert.deepEqual(await log.get(owner, plain.id), plain);
    const newline = { ...event(owner, 'device.updated', 'd', s), resource_prn: 'prn:::devices:/d\nx' };
    const beside = event(owner, 'device.updated', 'e', s);
    await log.append([newline, beside]);
    assert.deepEqual(await log.get(owner, newline.id), newline);
    assert.deepEqual(await log.get(owner, beside.id), beside);
  });

  it('a null goes in as NULL, not as the text null (the batch as arrays), and is counted as its row', async () => {
    const log: LogRows<[string, number, string | null]> = {
      name: 'hub-test-nulls',
      table: 'hub_attempt_log',
      columns: [
        ['id', 'text'],
        ['started', 'bigint'],
        ['note', 'text'],
      ],
      keys: ([id]) => ['k', `k:${id}`],
    };
    const client = new pg.Client({ connectionString: postgresUrl });
    await client.connect();
    try {
      // Temporary tables of the names the statement writes, found before any schema's.
      await client.query(`CREATE TEMP TABLE hub_attempt_log (id text, started bigint, note text);
        CREATE TEMP TABLE hub_log_counts (key text, bucket bigint, n bigint, PRIMARY KEY (key, bucket))`);
      const joined = appendStatement(
        log,
        [
          ['y', 7_200_001, 'b'],
          ['x', 3_600_000, 'a'],
        ],
        3_600_000,
      );
      const arrays = appendStatement(log, [['z', 7_200_002, null]], 3_600_000);
      assert.notEqual(joined.name, arrays.name);
      await client.query(joined);
      await client.query(arrays);
      const rows = await client.query('SELECT id, started, note FROM hub_attempt_log ORDER BY id');
      assert.deepEqual(
        rows.rows.map((r) => [r.id, Number(r.started), r.note]),
        [
          ['x', 3_600_000, 'a'],
          ['y', 7_200_001, 'b'],
          ['z', 7_200_002, null],
        ],
      );
      const counts = await client.query('SELECT key, bucket, n FROM hub_log_counts ORDER BY key, bucket');
      assert.deepEqual(
        counts.rows.map((r) => [r.key, Number(r.bucket), Number(r.n)]),
        [
          ['k', 3_600_000, 1],
          ['k', 7_200_000, 2],
          ['k:x', 3_600_000, 1],
          ['k:y', 7_200_000, 1],
          ['k:z', 7_200_000, 1],
        ],
      );
    } finally {
      await client.end();
    }
  });

  it('equal the rows matched, whatever the range: whole hours from the counts, the ends row by row; a row appended twice counts once, by one process or two at once', async () => {
    const log = new PostgresEventLog(logs);
    const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
    const now = Date.now();
    const types = ['device.created', 'device.updated', 'device.device_meta.updated'] as const;
    // 600 events over the last 50 hours, and one just past the retention (not stored).
    const events = Array.from({ length: 600 }, (_, i) =>
      event(owner, types[i % 3]!, `d${i % 4}`, Math.floor((now - ((i * 7919) % 600) * 300_000) / 1000)),
    );
    await log.append(events.slice(0, 450));
    await log.append(events.slice(100, 200)); // again, after a crash
    await log.append(events.slice(400, 500)); // half of them again: the other half added
    // Derived again by two processors at once (a rebalance): one adds them, the other waits for
    // its rows and adds none.
    const other = new PostgresLogs({ url: inSchema(postgresUrl, schema), retentionMs: 3 * DAY });
    try {
      await Promise.all([
        log.append(events.slice(500)),
        new PostgresEventLog(other).append(events.slice(450)),
      ]);
    } finally {
      await other.close();
    }
    await log.append([event(owner, 'device.created', 'd0', Math.floor((now - 3 * DAY - 60_000) / 1000))]);
    const horizon = now - 3 * DAY;
    const ranges: [number | undefined, number | undefined][] = [
      [undefined, undefined],
      [now - 10 * 3_600_000 - 1234, undefined],
      [undefined, now - 20 * 3_600_000 + 777],
      [now - 30 * 3_600_000 + 5, now - 29 * 3_600_000 - 5], // within one hour
      [now - 30 * 3_600_000 + 5, now - 28 * 3_600_000 - 5], // parts of two
      [now - 45 * 3_600_000 + 999, now - 3_600_000 + 1],
    ];
    for (const [since, until] of ranges)
      for (const type of [undefined, 'device.updated'] as const)
        for (const resource of [undefined, 'prn:::devices:/d1']) {
          const expected = events.filter(
            (e) =>
              e.created * 1000 >= Math.max(since ?? 0, horizon) &&
              (until === undefined || e.created * 1000 < until) &&
              (!type || e.type === type) &&
              (!resource || e.resource_prn === resource),
          ).length;
          const { total } = await log.list(owner, {
            since,
            until,
            type,
            resource_prn: resource,
            limit: 1,
            skip: 0,
          });
          assert.equal(total, expected, JSON.stringify({ since, until, type, resource }));
        }
  });

  it('a close writes the appends still lingering before it ends the pool', async () => {
    const lingering = new PostgresLogs({
      url: inSchema(postgresUrl, schema),
      retentionMs: 3 * DAY,
      lingerMs: 60_000,
    });
    const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
    const e = event(owner, 'device.created', 'd0', Math.floor(Date.now() / 1000));
    const appended = new PostgresEventLog(lingering).append([e]);
    await lingering.close();
    await appended;
    assert.deepEqual(await new PostgresEventLog(logs).get(owner, e.id), e);
  });

  it('of attempts, by status filter, a dead-lettered one among the failed', async () => {
    const records = new PostgresAttemptLog(logs);
    const j = job(`sub_${randomBytes(4).toString('hex')}`);
    const statuses = ['succeeded', 'failed', 'dead_lettered'] as const;
    const attempts = Array.from({ length: 90 }, (_, i) => ({
      ...attemptOf(j, i + 1, statuses[i % 3]!),
      started: Date.now() - i * 1_800_000, // every half hour, 45 hours back
    }));
    await records.append(attempts.map((a) => records.rowOf(a)));
    await records.append(attempts.slice(0, 10).map((a) => records.rowOf(a)));
    const total = async (status?: (typeof statuses)[number]) =>
      (await records.attempts(j.subscription_id, { status, limit: 1, skip: 0 })).total;
    assert.deepEqual(
      [await total(), await total('succeeded'), await total('failed'), await total('dead_lettered')],
      [90, 30, 60, 30],
    );
  });

  it('of attempts, a record read back whole: its request body from its column, or from the record of a row written before the column', async () => {
    const records = new PostgresAttemptLog(logs);
    const j = job(`sub_${randomBytes(4).toString('hex')}`);
    const body = JSON.stringify({ id: j.event.id, note: 'a "quoted" \\ value', data: { n: 1 } });
    const now = {
      ...attemptOf(j, 1, 'succeeded'),
      request: { url: 'https://example.com/hook', headers: { a: 'b' }, body },
    };
    const before = { ...now, id: `del_${randomBytes(8).toString('hex')}`, attempt: 2 };
    await records.append([records.rowOf(now)]);
    // As an earlier version wrote it: the whole record in `body`, no request_body.
    const client = new pg.Client({ connectionString: postgresUrl });
    await client.connect();
    try {
      const stored = await client.query<{ body: string; request_body: string }>(
        `SELECT body, request_body FROM ${schema}.hub_attempt_log WHERE id = $1`,
        [now.id],
      );
      assert.equal(stored.rows[0]!.request_body, body, 'the body in a column of its own');
      assert.ok(!stored.rows[0]!.body.includes('quoted'), 'and not escaped inside the record');
      await client.query(
        `INSERT INTO ${schema}.hub_attempt_log (id, started, subscription_id, event_id, owner, status, body)
         VALUES ($1, $2, $3, $4, $5, $6, $7)`,
        [
          before.id,
          before.started,
          before.subscription_id,
          before.event_id,
          before.owner,
          before.status,
          JSON.stringify(recordOf(before)),
        ],
      );
    } finally {
      await client.end();
    }
    assert.deepEqual(await records.attempt(now.id), recordOf(now));
    assert.deepEqual(await records.attempt(before.id), recordOf(before));
    const listed = await records.attempts(j.subscription_id, { limit: 10, skip: 0 });
    assert.deepEqual(
      listed.items,
      [recordOf(before), recordOf(now)].sort((x, y) =>
        x.started_at < y.started_at || (x.started_at === y.started_at && x.id < y.id) ? 1 : -1,
      ),
    );
    assert.deepEqual(
      (await records.attemptsOfEvent(j.owner, j.event.id)).map((r) => r.request.body),
      [body, body],
    );
  });
});

describe('PostgreSQL logs: the upgrade from a Redis set of an earlier version', () => {
  const schema = `test_move_${randomBytes(4).toString('hex')}`;
  // A database of its own: the move scans the whole keyspace.
  const redis = new Redis(redisDb(redisUrl, 13));
  let logs: PostgresLogs;
  after(async () => {
    await logs?.close();
    redis.disconnect();
    await dropSchema(postgresUrl, schema);
  });

  it('copies the event log and the attempt records once, removes their keys, and says so in the log', async () => {
    await redis.flushdb();
    const retentionMs = 30 * DAY;
    // What an earlier version wrote: events, attempts with their indexes, a job finished, a record
    // that cannot be read, and the read models' and the schedule's keys, which stay.
    const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
    const t = Math.floor(Date.now() / 1000);
    const events: WebhookEvent[] = Array.from({ length: 2500 }, (_, i) =>
      event(owner, i % 2 ? 'device.created' : 'device.device_meta.updated', `d${i % 7}`, t - (i % 5) * 3600),
    );
    await new RedisEventLog({ redis, retentionMs }).append(events);
    const old = new RedisDeliveryStore(redis, { retentionMs });
    const j = job('sub_moved');
    const pendingJob = job('sub_moved');
    await old.enqueue([j, pendingJob]);
    const attempts = [attemptOf(j, 1, 'failed'), attemptOf(j, 2, 'succeeded')];
    await old.finish({ ...j, attempt: 1 }, attempts[0]!, Date.now());
    await old.finish({ ...j, attempt: 2 }, attempts[1]!, null);
    await old.close();
    await redis.set('hub:evt:evt_torn', '{"id":"evt_torn",');
    await redis.set('hub:rm:devices:keep', 'a read model');

    logs = new PostgresLogs({ url: inSchema(postgresUrl, schema), retentionMs });
    const log = new PostgresEventLog(logs);
    const records = new PostgresAttemptLog(logs);
    const { logger, lines } = memoryLogger();
    const signal = new AbortController().signal;
    await Promise.all([
      moveLogsFromRedis({ redis, events: log, attempts: records, logger, signal }),
      // A second process started at once waits for the first, then finds the move done.
      moveLogsFromRedis({ redis, events: log, attempts: records, logger, signal }),
    ]);

    const all = await log.list(owner, { limit: 500, skip: 0 });
    assert.equal(all.total, 2500);
    const newestFirst = [...events].sort(
      (a, b) => b.created - a.created || b.source_position - a.source_position,
    );
    assert.deepEqual(all.items, newestFirst.slice(0, 500));
    assert.deepEqual(await log.get(owner, events[1234]!.id), events[1234]);
    assert.deepEqual(
      await records.attemptsOfEvent(j.owner, j.event.id),
      attempts.map(recordOf),
      'the attempts, as the API showed them',
    );
    assert.equal((await records.attempts('sub_moved', { status: 'failed', limit: 10, skip: 0 })).total, 1);

    assert.deepEqual(
      (await redis.keys('hub:ev*')).sort(),
      ['hub:evt:evt_torn'],
      'the moved records and the old indexes are gone; the unreadable one is left to expire',
    );
    assert.deepEqual(await redis.keys('hub:att*'), []);
    assert.equal(await redis.exists(MOVED_KEY, 'hub:rm:devices:keep', `hub:job:${pendingJob.job_id}`), 3);
    assert.notEqual(await redis.zscore('hub:jobs:due', pendingJob.job_id), null, 'the schedule stays');
    const said = lines().map((l) => JSON.parse(l) as { msg: string; events?: number; attempts?: number });
    const done = said.filter((l) => l.msg.endsWith('done'));
    assert.equal(done.length, 1, 'moved once');
    assert.deepEqual([done[0]!.events, done[0]!.attempts], [2500, 2]);

    // A later start finds it done and moves nothing.
    const again = memoryLogger();
    await moveLogsFromRedis({ redis, events: log, attempts: records, logger: again.logger, signal });
    assert.deepEqual(again.lines(), []);
  });
});
