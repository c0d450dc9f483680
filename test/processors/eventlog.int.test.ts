// The event log contract on both adapters: in memory (embedded) and on the real Redis.
import { Redis } from 'ioredis';
import { MemoryEventLog, RedisEventLog } from '../../processors/eventlog.ts';
import { testConfig } from '../harness.ts';
import { eventLogContract } from './eventlog.ts';

eventLogContract('memory', async (retentionMs) => ({ log: new MemoryEventLog({ retentionMs }) }));

const redis = new Redis(testConfig().redisUrl);
after(() => redis.disconnect());
eventLogContract('Redis', async (retentionMs) => ({
  log: new RedisEventLog({ redis, retentionMs }),
  keysOf: async (owner) => (await redis.keys(`hub:evlog:${owner}*`)).length,
}));
