// Each caller's last write position (read-your-writes across requests): one contract for the
// in-process adapter (embedded) and the Redis one shared by API processes (distributed).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { type LastWrites, MemoryLastWrites, RedisLastWrites } from '../../api/consistency.ts';
import { testConfig } from '../harness.ts';

function lastWritesContract(name: string, make: () => LastWrites) {
  describe(`last writes: ${name}`, () => {
    const caller = () => `prn:::devices:/lw-${randomBytes(6).toString('hex')}`;

    it('answers 0 for a caller that never wrote, then the position recorded', async () => {
      const lw = make();
      const c = caller();
      assert.equal(await lw.get(c), 0);
      await lw.record(c, 42);
      assert.equal(await lw.get(c), 42);
    });

    it('keeps the larger position: a late record of an older write does not lower it', async () => {
      const lw = make();
      const c = caller();
      await lw.record(c, 10);
      await lw.record(c, 7);
      assert.equal(await lw.get(c), 10);
    });

    it('records many callers at once, each readable once its record resolves', async () => {
      const lw = make();
      const callers = Array.from({ length: 200 }, caller);
      // The same caller twice in one turn: the larger position stands, whatever the order.
      await Promise.all([
        ...callers.map((c, i) => lw.record(c, 1000 + i)),
        lw.record(callers[0]!, 5000),
        lw.record(callers[1]!, 1),
      ]);
      const got = await Promise.all(callers.map((c) => lw.get(c)));
      assert.deepEqual(
        got,
        callers.map((_, i) => (i === 0 ? 5000 : 1000 + i)),
      );
    });
  });
}

lastWritesContract('in process', () => new MemoryLastWrites());

const redis = new Redis(testConfig().redisUrl);
after(() => redis.disconnect());
lastWritesContract('Redis', () => new RedisLastWrites(redis));

describe('last writes on Redis: one round trip per turn', () => {
  it('sends the records made in one turn of the event loop as one script call', async () => {
    const lw = new RedisLastWrites(redis);
    const tag = `lw-${randomBytes(6).toString('hex')}`;
    await lw.record(`prn:::devices:/${tag}-warm`, 1); // the script is loaded
    const monitor = await redis.duplicate().monitor();
    const calls: string[][] = [];
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args.some((a) => a.includes(tag))) calls.push(args);
    });
    try {
      await new Promise((r) => setTimeout(r, 50)); // MONITOR is on before the records
      await Promise.all(
        Array.from({ length: 100 }, (_, i) => lw.record(`prn:::devices:/${tag}-${i}`, i + 1)),
      );
      await new Promise((r) => setTimeout(r, 50));
    } finally {
      monitor.disconnect();
    }
    // The script call, then the commands it ran (MONITOR shows both): one call, 100 SETs.
    const scripts = calls.filter((a) => /^evalsha$|^eval$/i.test(a[0]!));
    assert.equal(scripts.length, 1, `one script call for 100 records, not ${scripts.length}`);
    assert.equal(calls.filter((a) => /^set$/i.test(a[0]!)).length, 100);
  });
});
