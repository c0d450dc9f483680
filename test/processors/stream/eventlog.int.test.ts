// The event log contract on every adapter: in memory and SQLite (embedded), on the real Redis, and
// on the real PostgreSQL (distributed).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Redis } from 'ioredis';
import pg from 'pg';
import { openDerivedDatabase } from '../../../infra/sqlite.ts';
import type { WebhookEvent } from '../../../processors/stream/derive.ts';
import { MemoryEventLog, RedisEventLog } from '../../../processors/stream/eventlog.ts';
import { PostgresEventLog } from '../../../processors/stream/eventlog-postgres.ts';
import { SqliteEventLog } from '../../../processors/stream/eventlog-sqlite.ts';
import { PostgresLogs } from '../../../processors/stream/postgres-logs.ts';
import { dropSchema, inSchema, testConfig } from '../../harness.ts';
import { event, eventLogContract, eventLogTailContract, readAll } from './eventlog.ts';

eventLogContract('memory', async (retentionMs) => ({ log: new MemoryEventLog({ retentionMs }) }));
eventLogTailContract('memory', async () => new MemoryEventLog({ retentionMs: 86_400_000 }));

const redis = new Redis(testConfig().redisUrl);
after(() => redis.disconnect());
eventLogContract('Redis', async (retentionMs) => ({
  log: new RedisEventLog({ redis, retentionMs }),
  keysOf: async (owner) => (await redis.keys(`hub:evlog:${owner}*`)).length,
}));

// Partitions of a second each, in a schema of the suite's own: the retention's test sees its rows
// go with their partition.
const { postgresUrl } = testConfig();
const schema = `test_evlog_${randomBytes(4).toString('hex')}`;
const opened: PostgresLogs[] = [];
after(async () => {
  await Promise.all(opened.map((l) => l.close()));
  await dropSchema(postgresUrl, schema);
});
eventLogContract('PostgreSQL', async (retentionMs) => {
  const logs = new PostgresLogs({
    url: inSchema(postgresUrl, schema),
    retentionMs,
    partitionMs: 1000,
  });
  opened.push(logs);
  return {
    log: new PostgresEventLog(logs),
    // A row goes with its partition, once all of it is past the retention: at most a partition's
    // width after the row itself.
    keysOf: async (owner) => {
      await logs.upkeepNow(Date.now() + 1000);
      const client = new pg.Client({ connectionString: postgresUrl });
      await client.connect();
      try {
        const { rows } = await client.query(
          `SELECT count(*)::int AS n FROM ${schema}.hub_event_log WHERE owner = $1`,
          [owner],
        );
        return rows[0].n as number;
      } finally {
        await client.end();
      }
    },
  };
});

// The tail on PostgreSQL, in a schema of its own with partitions of a day.
const tailSchema = `test_evtail_${randomBytes(4).toString('hex')}`;
const tailUrl = inSchema(postgresUrl, tailSchema);
const tailLogs = new PostgresLogs({ url: tailUrl, retentionMs: 86_400_000 });
after(async () => {
  await tailLogs.close();
  await dropSchema(postgresUrl, tailSchema);
});
eventLogTailContract('PostgreSQL', async () => new PostgresEventLog(tailLogs));

describe('event log tail on PostgreSQL: appends that commit late', () => {
  it('reads nothing past a transaction still open, then its rows in their place: no gap, no repeat', async () => {
    const log = new PostgresEventLog(tailLogs);
    const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
    const t = Math.floor(Date.now() / 1000);
    await log.append([event(owner, 'device.created', 'a', t)]); // the day's partition made
    const head = await log.head();
    // Another process's append, begun first and committed last.
    const slow = event(owner, 'device.updated', 'a', t);
    const client = new pg.Client({ connectionString: postgresUrl });
    await client.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO ${tailSchema}.hub_event_log (id, at, owner, type, resource_prn, source_position, sequence, body)
         VALUES ($1, $2, $3, $4, $5, $6, 0, $7)`,
        [slow.id, t * 1000, owner, slow.type, slow.resource_prn, slow.source_position, JSON.stringify(slow)],
      );
      const quick = event(owner, 'step.created', 'a', t);
      await log.append([quick]);
      assert.equal((await log.list(owner, { limit: 10, skip: 0 })).total, 2); // committed, listed…
      const before = await readAll(log, owner, head);
      assert.deepEqual(before.seen, []); // …but not tailed while an older append may still commit
      await client.query('COMMIT');
      // Another transaction open on the server (another suite's) may hold the tail back a moment.
      let after = await readAll(log, owner, before.position);
      for (let i = 0; i < 100 && after.seen.length < 2; i++) {
        await new Promise((r) => setTimeout(r, 50));
        after = await readAll(log, owner, before.position);
      }
      assert.deepEqual(
        after.seen.map((s) => s.id),
        [slow.id, quick.id],
      );
      assert.deepEqual((await readAll(log, owner, after.position)).seen, []);
    } finally {
      await client.end();
    }
  });

  it('reads in the order of the numbers, not of their text: across 9 → 10 and 999 → 1000, each row once', async () => {
    const log = new PostgresEventLog(tailLogs);
    const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
    const t = Math.floor(Date.now() / 1000);
    // The day's partition made, by another account's append (which this tail does not read).
    await log.append([event(`${owner}x`, 'device.created', 'a', t)]);
    // Rows as transactions 9, 10 and 11 would have logged them (long finished on any server):
    // as text, '10' sorts before '9', and source position '1000' before '999'.
    const rows = [
      { logged: 9, sourcePosition: 5 },
      { logged: 10, sourcePosition: 6 },
      { logged: 11, sourcePosition: 999 },
      { logged: 11, sourcePosition: 1000 },
    ].map((r) => ({ ...r, event: event(owner, 'device.updated', 'b', t) }));
    const client = new pg.Client({ connectionString: postgresUrl });
    await client.connect();
    try {
      for (const { logged, sourcePosition, event: e } of rows)
        await client.query(
          `INSERT INTO ${tailSchema}.hub_event_log (id, at, owner, type, resource_prn, source_position, sequence, body, logged)
           VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $8)`,
          [e.id, t * 1000, owner, e.type, e.resource_prn, sourcePosition, JSON.stringify(e), logged],
        );
    } finally {
      await client.end();
    }
    const expected = rows.map((r) => r.event.id);
    // Page by page and all at once: a page's last row is where the next one starts.
    for (const limit of [1, 2, 10]) {
      const { seen } = await readAll(log, owner, '0.', limit);
      assert.deepEqual(
        seen.map((s) => s.id),
        expected,
        `pages of ${limit}`,
      );
    }
  });
});

describe('memory event log: the per-owner cap', () => {
  it('keeps the newest maxPerOwner events of an owner, drops the oldest (by id too), and stays ordered', async () => {
    const log = new MemoryEventLog({ retentionMs: 86_400_000, maxPerOwner: 3000 });
    const owner = 'prn:::accounts:/capped';
    const now = Math.floor(Date.now() / 1000);
    const all: WebhookEvent[] = [];
    for (let batch = 0; batch < 20; batch++) {
      const events = Array.from({ length: 500 }, () => event(owner, 'device.device_meta.updated', 'd1', now));
      all.push(...events);
      // One late event per batch lands before the newest ones: the log inserts it in order.
      await log.append(events.length > 1 ? [...events.slice(0, -2), events.at(-1)!, events.at(-2)!] : events);
    }
    const { items, total } = await log.list(owner, { limit: 5000, skip: 0 });
    assert.equal(total, 3000);
    assert.deepEqual(
      items.map((e) => e.id),
      all
        .slice(-3000)
        .reverse()
        .map((e) => e.id),
    );
    assert.equal(await log.get(owner, all[0]!.id), undefined);
    assert.equal(await log.get(owner, all.at(-3000)!.id), all.at(-3000));
    const other = await log.list('prn:::accounts:/nobody', { limit: 10, skip: 0 });
    assert.equal(other.total, 0);
  });
});

const derived = openDerivedDatabase(join(mkdtempSync(join(tmpdir(), 'hub-evlog-')), 'derived.sqlite'));
after(() => derived.close());
eventLogContract('SQLite', async (retentionMs) => ({ log: new SqliteEventLog(derived, { retentionMs }) }));
eventLogTailContract('SQLite', async () => new SqliteEventLog(derived, { retentionMs: 86_400_000 }));

describe('SQLite event log: a file written with names as text (before 2026-11-30)', () => {
  it('opens converted: the same answers to every query, the same positions, and appends go on after them', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'hub-evlog-')), 'derived.sqlite');
    const owner = 'prn:::accounts:/converted';
    const now = Math.floor(Date.now() / 1000);
    const old = [
      event(owner, 'device.created', 'd1', now - 3),
      event(owner, 'device.device_meta.updated', 'd1', now - 2),
      event(owner, 'device.device_meta.updated', 'd2', now - 1),
      event('prn:::accounts:/other', 'device.created', 'd3', now - 1),
    ];
    // The first layout, as its migration left it, with those events in it.
    const first = new DatabaseSync(path);
    first.exec(`CREATE TABLE migrations (component TEXT PRIMARY KEY, version INTEGER NOT NULL) STRICT;
      INSERT INTO migrations VALUES ('eventlog', 1);
      CREATE TABLE event_log (id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL, type TEXT NOT NULL,
        resource_prn TEXT NOT NULL, score INTEGER NOT NULL, source_position INTEGER NOT NULL,
        sequence INTEGER NOT NULL, body TEXT NOT NULL) STRICT;
      CREATE INDEX event_log_by_owner ON event_log (owner, score, source_position, sequence);
      CREATE INDEX event_log_by_type ON event_log (owner, type, score, source_position, sequence);
      CREATE INDEX event_log_by_device ON event_log (owner, resource_prn, score, source_position, sequence);`);
    const insert = first.prepare('INSERT INTO event_log VALUES (?, ?, ?, ?, ?, ?, ?, ?)');
    for (const e of old)
      insert.run(
        e.id,
        e.owner,
        e.type,
        e.resource_prn,
        e.created * 1000,
        e.source_position,
        e.sequence,
        JSON.stringify(e),
      );
    first.exec('DELETE FROM event_log WHERE rowid = 1'); // positions need not start at 1
    first.close();
    const said: string[] = [];
    const derived = openDerivedDatabase(path, (m) => said.push(m));
    try {
      const log = new SqliteEventLog(derived, { retentionMs: 86_400_000 });
      assert.match(
        said.join('\n'),
        /upgrading eventlog from version 1 to 2[\s\S]*eventlog upgraded in \d+ ms/,
      );
      const ids = (r: { items: WebhookEvent[] }) => r.items.map((e) => e.id);
      const all = await log.list(owner, { limit: 10, skip: 0 });
      assert.deepEqual(ids(all), [old[2]!.id, old[1]!.id]);
      assert.equal(all.total, 2);
      assert.deepEqual(all.items[0], old[2]);
      const byType = await log.list(owner, { type: 'device.device_meta.updated', limit: 10, skip: 0 });
      assert.deepEqual(ids(byType), [old[2]!.id, old[1]!.id]);
      const byDevice = await log.list(owner, { resource_prn: 'prn:::devices:/d1', limit: 10, skip: 0 });
      assert.deepEqual(ids(byDevice), [old[1]!.id]);
      assert.deepEqual(await log.get(owner, old[1]!.id), old[1]);
      assert.equal(await log.get(owner, old[3]!.id), undefined); // another owner's
      assert.equal(await log.head(), '4');
      const tail = await log.tail(owner, '2', 10);
      assert.deepEqual(
        tail.items.map((i) => [i.event.id, i.position]),
        [[old[2]!.id, '3']],
      );
      const next = event(owner, 'device.device_meta.updated', 'd1', now);
      await log.append([next]);
      assert.equal(await log.head(), '5');
      assert.deepEqual(
        ids(await log.list(owner, { resource_prn: 'prn:::devices:/d1', limit: 10, skip: 0 })),
        [next.id, old[1]!.id],
      );
    } finally {
      await derived.close();
    }
  });
});

describe('SQLite event log: numbers given in a transaction that rolls back', () => {
  it('are forgotten with it: a name numbered again later is not confused with another', async () => {
    const path = join(mkdtempSync(join(tmpdir(), 'hub-evlog-')), 'derived.sqlite');
    const derived = openDerivedDatabase(path);
    try {
      const log = new SqliteEventLog(derived, { retentionMs: 86_400_000 });
      const now = Math.floor(Date.now() / 1000);
      const bad = event('prn:::accounts:/gone', 'device.created', 'dx', now);
      // A body that cannot be written: the batch fails after numbering its names.
      (bad.data as Record<string, unknown>).n = 1n;
      await assert.rejects(log.append([bad]));
      const kept = event('prn:::accounts:/kept', 'device.created', 'dy', now);
      await log.append([kept]);
      assert.deepEqual((await log.list('prn:::accounts:/kept', { limit: 10, skip: 0 })).items, [kept]);
      assert.equal((await log.list('prn:::accounts:/gone', { limit: 10, skip: 0 })).total, 0);
      assert.equal(await log.get('prn:::accounts:/gone', kept.id), undefined);
    } finally {
      await derived.close();
    }
  });
});
