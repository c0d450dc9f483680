// The event log contract on both adapters: in memory (embedded) and on the real Redis.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { openDerivedDatabase } from '../../infra/sqlite.ts';
import type { WebhookEvent } from '../../processors/derive.ts';
import { MemoryEventLog, RedisEventLog } from '../../processors/eventlog.ts';
import { SqliteEventLog } from '../../processors/eventlog-sqlite.ts';
import { testConfig } from '../harness.ts';
import { event, eventLogContract } from './eventlog.ts';

eventLogContract('memory', async (retentionMs) => ({ log: new MemoryEventLog({ retentionMs }) }));

const redis = new Redis(testConfig().redisUrl);
after(() => redis.disconnect());
eventLogContract('Redis', async (retentionMs) => ({
  log: new RedisEventLog({ redis, retentionMs }),
  keysOf: async (owner) => (await redis.keys(`hub:evlog:${owner}*`)).length,
}));

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
