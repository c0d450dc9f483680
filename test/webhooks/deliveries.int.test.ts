// The delivery store contract on every adapter: SQLite, SQLite on its own thread (embedded), and the real Redis.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import {
  RedisDeliveryStore,
  SqliteDeliveryStore,
  ThreadedDeliveryStore,
} from '../../processors/deliveries.ts';
import { testConfig } from '../harness.ts';
import { deliveryStoreContract } from './deliveries.ts';

const RETENTION_MS = 86_400_000;

deliveryStoreContract(
  'SQLite',
  async () =>
    new SqliteDeliveryStore(join(mkdtempSync(join(tmpdir(), 'hub-deliveries-')), 'deliveries.db'), {
      retentionMs: RETENTION_MS,
    }),
);

deliveryStoreContract(
  'SQLite on its own thread',
  async () =>
    new ThreadedDeliveryStore(join(mkdtempSync(join(tmpdir(), 'hub-deliveries-')), 'deliveries.db'), {
      retentionMs: RETENTION_MS,
    }),
);

// A database of its own: the schedule's keys are global to a Redis database.
const redis = new Redis(`${testConfig().redisUrl.replace(/\/\d*$/, '')}/11`);
after(() => redis.disconnect());
deliveryStoreContract('Redis', async () => {
  await redis.flushdb();
  return new RedisDeliveryStore(redis, { retentionMs: RETENTION_MS });
});
