import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { RedisReadStore } from '../../infra/readstore/redis.ts';
import { databaseProblem } from '../../infra/redis.ts';
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
    const writer = new RedisReadStore(redisUrl);
    const reader = new RedisReadStore(redisUrl);
    /** The reader's own subscriber connection's channel count, as Redis reports it (other
     * clients of a shared server do not count). */
    const channels = async () => {
      const sub = (reader as unknown as { subscriber: Redis }).subscriber;
      const port = (sub as unknown as { stream?: { localPort?: number } }).stream?.localPort;
      const line = ((await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub')) as string)
        .split('\n')
        .find((l) => port !== undefined && l.includes(`addr=127.0.0.1:${port} `));
      return line ? Number(/ sub=(\d+)/.exec(line)![1]) : 0;
    };
    try {
      for (let i = 0; i < 50 && (await channels()) === 0; i++) await sleep(20);
      // Generation switches only: every projection batch publishes a checkpoint notice, and a
      // processor or a dispatcher took them all.
      assert.equal(await channels(), 1);
      const heard: number[] = [];
      const projection = `notices-${randomUUID().slice(0, 8)}`;
      reader.onCheckpoint((p, _g, position) => {
        if (p === projection) heard.push(position);
      });
      for (let i = 0; i < 50 && (await channels()) === 1; i++) await sleep(20);
      assert.equal(await channels(), 2);
      assert.equal(
        await writer.apply(projection, 1, [], 0, { position: 7, created: Date.now() }, false),
        'ok',
      );
      for (let i = 0; i < 50 && heard.length === 0; i++) await sleep(20);
      assert.deepEqual(heard, [7]);
      await admin.del(`hub:rm:${projection}:g1:cp`);
    } finally {
      await Promise.all([writer.close(), reader.close()]);
      admin.disconnect();
    }
  });
});

describe('Redis read store: databases of one server (int)', () => {
  const inDb = (db: number) => {
    const url = new URL(redisUrl);
    url.pathname = `/${db}`;
    return url.toString();
  };

  it('a generation switch in another database of the same server is not heard', async () => {
    const here = new RedisReadStore(inDb(5));
    const there = new RedisReadStore(inDb(6));
    const projection = `switch-${randomUUID().slice(0, 8)}`;
    try {
      await new Promise((r) => setTimeout(r, 200)); // both subscribers connected
      assert.equal(await here.activeGeneration(projection, true), 1);
      await there.activate(projection, 9);
      await here.activate(projection, 2);
      await there.activate(projection, 9);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(
        await here.activeGeneration(projection),
        2,
        'a switch published in database 6 moved database 5',
      );
      assert.equal(await there.activeGeneration(projection), 9);
    } finally {
      await here.close();
      await there.close();
    }
  });

  it('a database the server does not have is refused by name, not replaced by database 0', async () => {
    const redis = new Redis(inDb(99), { maxRetriesPerRequest: 1 });
    redis.on('error', () => {});
    try {
      assert.equal(await databaseProblem(redis), 'it has no database 99');
      const fine = new Redis(inDb(3));
      assert.equal(await databaseProblem(fine), undefined);
      fine.disconnect();
    } finally {
      redis.disconnect();
    }
  });
});
