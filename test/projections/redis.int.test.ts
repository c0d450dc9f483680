import { RedisReadStore } from '../../infra/readstore/redis.ts';
import { testConfig } from '../harness.ts';
import { readStoreContract } from './contract.ts';

const { redisUrl } = testConfig();
readStoreContract('Redis', async () => ({
  open: async () => new RedisReadStore(redisUrl),
  cleanup: async () => {},
}));
