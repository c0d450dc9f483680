// The in-process bus (infra/bus/memory.ts), the embedded profile's and the tests': what a consumer
// is handed.
import assert from 'node:assert/strict';
import { MemoryBus } from '../../infra/bus/memory.ts';
import { memoryLogger } from '../harness.ts';

describe('memory bus (unit)', () => {
  it('a consumer’s maxBatch bounds each handle call; the bus’s own bound is the default', async () => {
    const bus = new MemoryBus({ logger: memoryLogger().logger, maxBatch: 10 });
    // A topic each: a group that comes later does not see what the groups before it passed.
    const take = async (topic: string, maxBatch?: number) => {
      await bus.ensureTopics([{ topic, partitions: 1 }]);
      await bus.send(
        topic,
        Array.from({ length: 25 }, (_, i) => ({ key: 'k', value: Buffer.from(`m${i}`) })),
      );
      const sizes: number[] = [];
      const seen: string[] = [];
      const consumer = await bus.consume({
        group: 'g',
        topic,
        ...(maxBatch ? { maxBatch } : {}),
        handle: async (messages) => {
          sizes.push(messages.length);
          for (const m of messages) seen.push(m.value.toString());
        },
      });
      while (seen.length < 25) await new Promise((r) => setTimeout(r, 5));
      await consumer.stop();
      assert.deepEqual(
        seen,
        Array.from({ length: 25 }, (_, i) => `m${i}`),
      );
      return sizes;
    };
    try {
      assert.deepEqual(await take('own', 7), [7, 7, 7, 4]);
      assert.deepEqual(await take('default'), [10, 10, 5]);
    } finally {
      await bus.close();
    }
  });
});
