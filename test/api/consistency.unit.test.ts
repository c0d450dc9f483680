// Read-your-writes bookkeeping: a stored write is answered even when remembering it fails or hangs.
import assert from 'node:assert/strict';
import type { Context } from 'koa';
import { consistency, type LastWrites, MemoryLastWrites } from '../../api/consistency.ts';

const context = () => {
  const headers: Record<string, string> = {};
  return {
    ctx: {
      state: { caller: 'alice' },
      set: (k: string, v: string) => (headers[k] = v),
    } as unknown as Context,
    headers,
  };
};

describe('read-your-writes (unit)', () => {
  it('remembers a write, and the next read waits for its position', async () => {
    const waited: number[] = [];
    const c = consistency(new MemoryLastWrites(), async (_names, position) => {
      waited.push(position);
    });
    const { ctx, headers } = context();
    await c.written(ctx, 42);
    assert.equal(headers['X-Hub-Position'], '42');
    await c.readable({ ...ctx, get: () => '' } as unknown as Context, ['devices']);
    assert.deepEqual(waited, [42]);
  });

  it('a store of last writes that fails or hangs neither fails the answer nor holds it past a second', async () => {
    const failures: string[] = [];
    for (const lastWrites of [
      { remote: true, get: async () => 0, record: () => Promise.reject(new Error('Connection is closed.')) },
      { remote: true, get: async () => 0, record: () => new Promise<void>(() => {}) },
    ] satisfies LastWrites[]) {
      const c = consistency(
        lastWrites,
        async () => {},
        (err) => failures.push((err as Error).message),
      );
      const { ctx, headers } = context();
      const started = Date.now();
      await c.written(ctx, 7);
      assert.ok(Date.now() - started < 1500, `took ${Date.now() - started} ms`);
      assert.equal(headers['X-Hub-Position'], '7', 'the client can still ask for its write');
    }
    assert.equal(failures.length, 2);
    assert.match(failures[0]!, /Connection is closed/);
    assert.match(failures[1]!, /not remembered within/);
  });
});
