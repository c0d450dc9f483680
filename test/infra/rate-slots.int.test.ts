// The rate slots in Redis (what the distributed dispatchers share), on the real Redis: reservations
// through two connections, as two dispatcher processes make them, take one sequence of slots.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { MemoryRateSlots, RedisRateSlots } from '../../infra/rate-limits.ts';
import { testConfig } from '../harness.ts';

describe('rate slots in Redis (int)', () => {
  const url = testConfig().redisUrl;
  const a = new Redis(url);
  const b = new Redis(url);
  after(() => {
    a.disconnect();
    b.disconnect();
  });

  it('two processes reserving at once get slots one interval apart, as one process would', async () => {
    const key = `test-${randomBytes(6).toString('hex')}`;
    const [one, two] = [new RedisRateSlots(a), new RedisRateSlots(b)];
    const waits = await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? one : two).reserve(key, 10)),
    );
    const sorted = [...waits].sort((x, y) => x - y);
    assert.ok(sorted[0]! <= 1, String(sorted));
    // 100 ms apart each (less the time the calls took to arrive), never two in one slot.
    for (let i = 1; i < sorted.length; i++)
      assert.ok(sorted[i]! - sorted[i - 1]! >= 90, `slots ${i - 1} and ${i}: ${sorted.join(', ')}`);
    assert.ok(sorted[19]! >= 1800 && sorted[19]! <= 1910, String(sorted));
    // In process, each would have had its own sequence: two slots at once.
    const apart = [new MemoryRateSlots(), new MemoryRateSlots()];
    assert.deepEqual(await Promise.all(apart.map((s) => s.reserve(key, 10))), [0, 0]);
  });

  it('the key expires once its last slot has passed', async () => {
    const key = `test-${randomBytes(6).toString('hex')}`;
    await new RedisRateSlots(a).reserve(key, 1000);
    const ttl = await a.pttl(`hub:slots:${key}`);
    assert.ok(ttl > 0 && ttl <= 1001, String(ttl));
  });
});
