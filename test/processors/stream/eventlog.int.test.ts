// The event log contract on every adapter: in memory and SQLite (embedded), on the real Redis, and
// on the real PostgreSQL (distributed).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { openDerivedDatabase } from '../../../infra/sqlite.ts';
import type { WebhookEvent } from '../../../processors/stream/derive.ts';
import { MemoryEventLog, RedisEventLog } from '../../../processors/stream/eventlog.ts';
import { PostgresEventLog } from '../../../processors/stream/eventlog-postgres.ts';
import { SqliteEventLog } from '../../../processors/stream/eventlog-sqlite.ts';
import { PostgresLogs } from '../../../processors/stream/postgres-logs.ts';
import { dropSchema, testConfig } from '../../harness.ts';
import { event, eventLogContract } from './eventlog.ts';

eventLogContract('memory', async (retentionMs) => ({ log: new MemoryEventLog({ retentionMs }) }));

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
    url: `${postgresUrl}${postgresUrl.includes('?') ? '&' : '?'}schema=${schema}`,
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
