import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisReadStore } from '../../infra/readstore/redis.ts';
import { testConfig } from '../harness.ts';
import { readStoreContract } from './contract.ts';

const { redisUrl } = testConfig();
readStoreContract('Redis', async () => ({
  open: async () => new RedisReadStore(redisUrl),
  cleanup: async () => {},
}));

describe('Redis read store: checkpoint notices (int)', () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it('a process hears checkpoint notices only once something listens (the API), not before', async () => {
    const admin = new Redis(redisUrl);
    const subscribers = async () =>
      Number(((await admin.pubsub('NUMSUB', 'hub:rm:checkpoints')) as [string, number])[1]);
    const before = await subscribers();
    const writer = new RedisReadStore(redisUrl);
    const reader = new RedisReadStore(redisUrl);
    try {
      await sleep(300); // their subscriber connections are up
      // Every projection batch publishes a notice: a processor or a dispatcher took them all.
      assert.equal(await subscribers(), before);
      const heard: number[] = [];
      const projection = `notices-${randomUUID().slice(0, 8)}`;
      reader.onCheckpoint((p, _g, position) => {
        if (p === projection) heard.push(position);
      });
      for (let i = 0; i < 50 && (await subscribers()) === before; i++) await sleep(20);
      assert.equal(await subscribers(), before + 1);
      assert.equal(
        await writer.apply(projection, 1, [], 0, { position: 7, created: Date.now() }, false),
        'ok',
      );
      for (let i = 0; i < 50 && heard.length === 0; i++) await sleep(20);
      assert.deepEqual(heard, [7]);
    } finally {
      await Promise.all([writer.close(), reader.close()]);
      admin.disconnect();
    }
  });
});
